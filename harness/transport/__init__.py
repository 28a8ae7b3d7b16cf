"""Transports: how the host reaches a target's machine.

``local`` runs here with no copying; ``ssh`` uses Fabric. Both offer the same calls:
``run(command, on_line)``, ``list_files(rel_dir)``, ``put_files(pairs)`` (one tar stream) and
``fetch_tree(rel_dir, dest)`` (one tar stream), with the remote work folder as ``workdir``.
"""

from __future__ import annotations


def for_target(target):
    if target.is_remote:
        from .ssh import SSHTransport

        return SSHTransport(target)
    from .local import LocalTransport

    return LocalTransport(target)
