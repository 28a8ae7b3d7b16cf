"""Console output and progress bars (rich), in one place."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)
if not out.is_terminal:
    out.width = max(out.width, 140)


def progress(transient: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
    )


def throughput_line(configs: int, seconds: float, timing: dict) -> str:
    """configs/s, how busy the measuring devices were, and what waited on what. ``timing``:
    build (seconds while at least one round was building), waited (host seconds blocked on results), measure
    (seconds the agents ran rounds, per machine summed), machines, busy {device: seconds}."""
    parts = ["%.2f configs/s" % (configs / seconds if seconds > 0 else 0.0)]
    busy = timing.get("busy") or {}
    if busy:
        parts.append("devices busy %.0f%% (%s)" % (100.0 * sum(busy.values()) / (len(busy) * seconds),
                                                    ", ".join("%s %.0f%%" % (d, 100.0 * b / seconds)
                                                              for d, b in sorted(busy.items()))))
    idle = max(0.0, seconds - timing.get("measure", 0.0) / max(1, timing.get("machines", 1)))
    parts.append("build %.1fs, build waited on measure %.1fs, measure waited on build %.1fs"
                 % (timing.get("build", 0.0), timing.get("waited", 0.0), idle))
    return "; ".join(parts)
