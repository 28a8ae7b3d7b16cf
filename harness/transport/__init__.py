"""Transports: how the host reaches a target's machine.

``local`` runs here with no copying; ``ssh`` uses Fabric; ``slurm`` is SSH to a cluster's login
node whose runs go to the scheduler as job arrays (``run_jobs``). What each offers is base.py's
``Transport`` protocol; the calls only some have are declared in their ``capabilities``.
``TRANSPORTS`` is the table of transports by kind; ``kind_of`` says which one a target uses.
"""

from __future__ import annotations

import importlib

# kind -> "module:Class" (the module relative to this package, imported when first used)
TRANSPORTS = {
    "local": ".local:LocalTransport",
    "ssh": ".ssh:SSHTransport",
    "slurm": ".slurm:SlurmTransport",
}


def kind_of(target) -> str:
    """The transport a target uses: slurm with a slurm section, ssh with an ssh one, else local."""
    if target.slurm:
        return "slurm"
    return "ssh" if target.is_remote else "local"


def transport_class(target):
    """The class of the target's transport (its ``capabilities`` can be read without connecting)."""
    module, cls = TRANSPORTS[kind_of(target)].split(":")
    return getattr(importlib.import_module(module, __package__), cls)


def for_target(target, host=None, port=None, workdir=None):
    cls = transport_class(target)
    if not cls.is_remote:
        return cls(target)
    return cls(target, host, port, workdir)


def for_hosts(target) -> list:
    """One transport per machine of a fleet (a single-host target gives one)."""
    return [for_target(target, host, port, workdir) for host, port, workdir in target.host_list()]
