"""harness status."""

from __future__ import annotations

from typing import Optional

import typer

from .. import ui
from .common import TargetsOpt, kernel_of, pick_target, targets_file_of


def status(
    target: Optional[str] = typer.Argument(None, help="target to ask (default: the last used)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel bundle (default: the last built)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Show the progress of remote runs: running or not, jobs done of total, rows measured,
    on every host of the target. A run goes on when the SSH connection drops; `harness run
    --remote` attaches to it again."""
    from ..errors import HarnessError
    from ..run import remote_status
    from ..transport import for_hosts
    from ..transport.base import SCHEDULER, can

    tgt = pick_target(target, targets_file_of(targets_file), "status")
    kern = kernel_of(tgt.name, kernel)
    if not tgt.is_remote:
        ui.out.print("%s runs on this machine: `harness run` shows its progress as it goes" % tgt.name)
        return
    for transport in for_hosts(tgt):
        try:
            transport.open()
            if can(transport, SCHEDULER):  # Slurm: the run's array tasks and their logs
                for line in transport.status_lines(tgt, kern):
                    ui.out.print(line, markup=False, highlight=False)
                continue
            info = remote_status(tgt, kern, transport)
        except HarnessError as exc:
            ui.out.print("%s: unreachable (%s)" % (transport.label, exc))
            continue
        finally:
            transport.close()
        state = "running (pid %s)" % info["pid"] if info["running"] else (
            "finished (exit %s)" % info["exit"] if info["exit"] is not None else "not running")
        progress = "%s/%s jobs" % (info["done"], info["total"]) if info["total"] is not None else "no run yet"
        ui.out.print("%s: %s, %s, %d rows in results" % (transport.label, state, progress, info["rows"]))
