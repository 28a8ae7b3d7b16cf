"""harness targets."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import sys

import typer

from .. import ui
from ..errors import HarnessError
from . import common
from .common import TargetsOpt


def targets_list(ctx: typer.Context, targets_file: Optional[str] = TargetsOpt):
    """List the targets in targets.yaml (the default one marked)."""
    if ctx.invoked_subcommand:
        common.targets_before_command = common.targets_file_of(targets_file)
        return
    from rich.table import Table

    from ..targets import DEFAULT_TARGET, find_targets_file, load_file

    path = find_targets_file(common.targets_file_of(targets_file))
    targets, default, _ = load_file(path)
    table = Table(title=str(path))
    for col in ("name", "arch", "backend", "profiler", "where", "description"):
        table.add_column(col)
    for name, t in targets.items():
        where = "%s@%s:%s" % (t.ssh.user or "", t.ssh.host, t.ssh.port) if t.ssh else "this machine"
        arch = t.resolved_arch + (" VLEN %d" % t.vlen if t.vlen else "") + (" %s" % t.gpu_arch if t.gpu_arch else "")
        table.add_row(name + (" (default)" if name == (default or DEFAULT_TARGET) else ""), arch, t.backend,
                      t.profiler, where, t.description)
    ui.out.print(table)



def targets_check(name: str = typer.Argument(..., help="target to check"), targets_file: Optional[str] = TargetsOpt):
    """Connect to the target and report what it has: python, arch, perf and the events it
    supports, GPUs."""
    import json
    import subprocess

    from ..targets import get_target
    from ..transport import for_target

    tgt = get_target(name, common.targets_file_of(targets_file))
    from remote_agent import check

    check_py = Path(check.__file__).read_text()
    script = check_py + "\nimport json, sys\nprint(json.dumps(facts(sys.argv[1:])))\n"
    if tgt.is_remote:
        transport = for_target(tgt).open()
        try:
            rc, out, err = transport.run_capture(transport.shell_command([tgt.python, "-c", script] + tgt.events))
        finally:
            transport.close()
        out = out.decode()
    else:
        proc = subprocess.run([sys.executable, "-c", script] + tgt.events, capture_output=True, text=True)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    if rc != 0:
        raise HarnessError("check on %s failed (is %s there?): %s" % (tgt.name, tgt.python, err.strip()[-200:]))
    facts = json.loads(out)
    ui.out.print("[bold]%s[/]: python %s on %s, %s cpus" % (tgt.name, facts["python"], facts["arch"], facts["cpus"]))
    perf = facts["perf"]
    if not perf["found"]:
        ui.out.print("perf: not found (wall clock will be used; for counters install perf: apt-get install linux-perf "
                     "on Debian)")
    else:
        ui.out.print("perf: %s, %s; counts: %s; not supported: %s" % (
            perf["version"], "runs" if perf["runs"] else "does not run",
            ", ".join(perf["events_supported"]) or "-", ", ".join(perf["events_unsupported"]) or "-"))
    ui.out.print("GPUs: %s" % (", ".join(g["info"] for g in facts["gpus"]) or "none"))
    _keep_caches(tgt, facts.get("caches") or {})
    if tgt.resolved_arch != facts["arch"] and not tgt.run_under:
        ui.out.print("[yellow]warning: target says %s but the machine is %s[/]" % (tgt.resolved_arch, facts["arch"]))


def _keep_caches(tgt, caches: dict) -> None:
    """Print the probed cache sizes and keep them with the target's facts: the CPU kernels' rules
    prune cache blocks by them (harness/cpu_facts.py)."""
    from .. import state
    from ..cpu_facts import CACHE_FACT, DEFAULT_L1D, DEFAULT_L2

    if tgt.is_gpu:
        return
    if caches.get("l1d") and caches.get("l2"):
        state.remember(common.ROOT, tgt.name, **{CACHE_FACT: caches})
        ui.out.print("caches: L1d %d KiB, L2 %d KiB%s (kept for the CPU kernels' cache-block rules)" % (
            caches["l1d"] // 1024, caches["l2"] // 1024, ", L3 %d KiB" % (caches["l3"] // 1024) if caches.get("l3") else ""))
    else:
        ui.out.print("caches: not reported by the machine; the CPU kernels' rules assume L1d %d KiB and L2 %d KiB"
                     % (DEFAULT_L1D // 1024, DEFAULT_L2 // 1024))
