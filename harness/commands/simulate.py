"""harness simulate."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .. import ui
from ..errors import HarnessError


def simulate(
    results: List[str] = typer.Argument(..., help="recorded full-space results CSV(s): every config measured once"),
    strategy: str = typer.Option("all", "--strategy", "-s", help="a strategy, several comma-separated, or all"),
    seeds: int = typer.Option(20, "--seeds", help="seeds per strategy (0 .. N-1)"),
    within: float = typer.Option(0.03, "--within", help="target: a pick truly within this fraction of the best"),
    batch_size: int = typer.Option(8, "--batch-size", help="configs per round"),
    budget: Optional[int] = typer.Option(None, "--budget", help="evaluations allowed per run"),
    noise: float = typer.Option(0.0, "--noise", help="replay with noise: this many times each row's p20..p80 spread"),
    shape: Optional[str] = typer.Option(None, "--shape", help="only this shape id"),
    targets_file: Optional[str] = typer.Option(None, "--targets", hidden=True, help="accepted like on every command; unused"),
):
    """Replay search strategies against recorded results instead of building and running:
    how many evaluations each needs until its pick is within --within of the best (median over
    the seeds), as a fraction of the feasible configs. Deterministic; takes seconds."""
    import statistics

    from rich.table import Table

    from ..strategies import names as strategy_names
    from ..strategies.simulate import load_recorded, median_to_target, sweep

    known = strategy_names()
    names = list(known) if strategy == "all" else [n.strip() for n in strategy.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise HarnessError("unknown --strategy %s; choose from %s or all" % (", ".join(unknown) or repr(strategy),
                                                                           ", ".join(known)))
    if seeds < 1 or batch_size < 1 or not 0 <= within < 1 or noise < 0:
        raise HarnessError("--seeds and --batch-size are at least 1, --within is a fraction in [0, 1), --noise >= 0")
    table = Table(title="evaluations until the pick is within %g %% of the best (median of %d seeds)" % (
        100 * within, seeds))
    for col in ("shape", "strategy", "feasible", "median evals", "of feasible", "reached", "median pick/best"):
        table.add_column(col, justify="left" if col in ("shape", "strategy") else "right")
    for path in results:
        if not Path(path).is_file():
            raise HarnessError("results file %s does not exist" % path)
        try:
            recordings = load_recorded(path, shape)
        except (ValueError, KeyError) as exc:
            raise HarnessError(str(exc).strip("'\""), where=str(path))
        for rec in recordings:
            if rec.best_ns is None:
                ui.out.print("[yellow]%s: no ok row to replay[/]" % rec.shape_id)
                continue
            for name in names:
                runs = sweep(name, rec, range(seeds), within, batch_size, noise, budget)
                med = median_to_target(runs)
                ratios = [r.found_ratio for r in runs if r.found_ratio is not None]
                table.add_row(rec.shape_id, name, str(rec.feasible), "-" if med is None else "%g" % med,
                              "-" if med is None else "%.1f %%" % (100.0 * med / rec.feasible),
                              "%d/%d" % (sum(r.to_target is not None for r in runs), len(runs)),
                              "%.3f" % statistics.median(ratios) if ratios else "-")
    ui.out.print(table)
