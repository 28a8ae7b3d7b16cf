"""What a transport is: the calls every one offers, and the capabilities some declare.

A transport is how the host reaches a target's machine. Every transport has ``name``,
``is_remote``, ``python`` (the interpreter that runs the agent there), ``capabilities`` and
``run`` / ``close``. A remote one (``is_remote``) also has ``label``, ``workdir``, ``open``
(returns itself, connected), ``shell_command``, ``run_capture``, ``list_files``, ``put_files``
and ``fetch_tree`` (see ssh.py). Optional calls are declared, never probed for:

- ``SCHEDULER``: the machine runs the jobs through a scheduler of its own: ``run_jobs(target,
  kernel, options, on_progress)`` replaces the agent started over SSH, ``status_lines(target,
  kernel)`` says how its jobs stand, and tune's rounds run as its jobs, not in a long-lived agent.
- ``DEVICE_FACTS``: ``device_facts_command()`` is a shell command printing the device facts found
  where the jobs ran (a compute node), instead of probing the machine logged into.

Lifecycle: ``for_target`` (transport/__init__.py) makes one, ``open()`` connects it (local: a
no-op), ``close()`` ends it; a dropped connection reopens on the next command.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Tuple

SCHEDULER = "scheduler"
DEVICE_FACTS = "device_facts"
CAPABILITIES = frozenset({SCHEDULER, DEVICE_FACTS})


class Transport(Protocol):
    """The calls of every transport (local.LocalTransport, ssh.SSHTransport, slurm.SlurmTransport)."""

    name: str
    is_remote: bool
    python: str
    capabilities: frozenset  # of SCHEDULER, DEVICE_FACTS

    def run(self, argv: list, on_line: Optional[Callable[[str], None]] = None, cwd=None,
            env=None) -> Tuple[int, str]:
        """Run ``argv`` there, stdout lines to ``on_line``; returns (exit code, stderr)."""

    def close(self) -> None:
        """End the connection (local: nothing)."""


def can(transport, capability: str) -> bool:
    """Whether ``transport`` (an instance or its class) declares ``capability``."""
    if capability not in CAPABILITIES:
        raise ValueError("unknown transport capability %r" % capability)
    return capability in transport.capabilities
