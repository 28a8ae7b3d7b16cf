"""harness report."""

from __future__ import annotations

from typing import Optional

import typer

from .. import state, ui
from .common import ROOT, TargetsOpt, kernel_of, pick_target


def report(
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target to report (default: the last used)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel to report (default: the last built)"),
    no_fetch: bool = typer.Option(False, "--no-fetch", help="use the local results only"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Fetch remote results (one tar stream), pick the best config per shape from ok rows
    (differences within the measured spread are ties, broken by lower spread), write
    tuned/TARGET/KERNEL.csv and .json and print a table."""
    from ..report.aggregate import best_per_shape, load_results, status_counts
    from ..report.fetch import fetch_and_merge
    from ..report.table import best_table
    from ..report.tuned import write_tuned
    from ..run import local_results_path
    from ..transport import for_target

    tgt = pick_target(target, targets_file, "report")
    kern = kernel_of(tgt.name, kernel)
    local = local_results_path(ROOT, tgt.name, kern)
    _, facts = state.get(ROOT, tgt.name)
    if tgt.is_remote and facts.get("results_remote", True) and not no_fetch:
        transport = for_target(tgt).open()
        try:
            new = fetch_and_merge(transport, tgt.name, kern, local)
        finally:
            transport.close()
        ui.console.print("fetched %d new rows from %s" % (new, tgt.name))
    df = load_results([local])
    best = best_per_shape(df)
    from ..bundle import bundle_dir
    from ..compile.disasm import with_vector_counts

    best = with_vector_counts(best, bundle_dir(ROOT, tgt.name, kern))  # vector instructions, when counted
    meta = {"target": tgt.name, "arch": tgt.resolved_arch if not tgt.is_gpu else tgt.gpu_arch,
            "devices": sorted(df["device"].astype(str).unique().tolist()),
            "hosts": sorted(df["host"].astype(str).unique().tolist())}
    csv_path, json_path = write_tuned(df, best, ROOT / "tuned" / tgt.name, kern, meta)
    ui.out.print(best_table(best, status_counts(df)))
    missing = sorted(set(df["shape_id"]) - set(best["shape_id"]))
    if missing:
        ui.out.print("[yellow]no ok config for: %s[/]" % ", ".join(missing))
    ui.out.print("wrote %s and %s" % (csv_path, json_path))
