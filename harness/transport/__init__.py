"""Transports: how the host reaches a target's machine.

``local`` runs here with no copying; ``ssh`` uses Fabric; ``slurm`` is SSH to a cluster's login
node whose runs go to the scheduler as job arrays (``run_jobs``). Both offer the same calls:
``run(command, on_line)``, ``list_files(rel_dir)``, ``put_files(pairs)`` (one tar stream) and
``fetch_tree(rel_dir, dest)`` (one tar stream), with the remote work folder as ``workdir``.
"""

from __future__ import annotations


def for_target(target, host=None, port=None, workdir=None):
    if getattr(target, "slurm", None):
        from .slurm import SlurmTransport

        return SlurmTransport(target, host, port, workdir)
    if target.is_remote:
        from .ssh import SSHTransport

        return SSHTransport(target, host, port, workdir)
    from .local import LocalTransport

    return LocalTransport(target)


def for_hosts(target) -> list:
    """One transport per machine of a fleet (a single-host target gives one)."""
    return [for_target(target, host, port, workdir) for host, port, workdir in target.host_list()]
