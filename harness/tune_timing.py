"""Where a tune's seconds went: each device's busy share of the search and of the winners'
re-measure, what waited on what, and the compiles made or reused. ``harness tune`` prints it in
its last lines and keeps it in ``results/<target>/<kernel>/tune_timing.json`` (the last tune's),
which ``harness report --html`` shows.

The numbers come from the long-lived agents (``agent_session.Stats``: seconds a job ran on each
device, per round, a job sent ahead to a worker counted from its reply before) and the tune's own stopwatch; a phase's busy share is the device's
busy seconds over the phase's wall time, so start-up (pruning, the first build, the workers'
start) counts as idle. Busy seconds are counted as the agents report rounds done; where a shape's
re-measure runs beside the other shapes' search (a GPU tune whose shapes are streams), its jobs
done before the search ends count in the search, and a short re-measure phase may read over 100 %
(busy seconds of jobs that began before it). The share over both phases is exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

TIMING_FILE = "tune_timing.json"
PHASES = ("search", "re-measure")


def summarize(phases: dict, timings: dict, configs: int, compiles: dict) -> dict:
    """The record of one tune. ``phases``: {phase: wall seconds} (the stopwatch's);
    ``timings``: {phase: ``Session.timing()`` at the phase's end} (cumulative over the tune);
    ``configs``: configs the search measured; ``compiles``: {"compiled", "reused"}."""
    devices: dict = {}
    before: dict = {}
    for phase in PHASES:
        timing = timings.get(phase)
        if timing is None:
            continue
        for device, busy in sorted((timing.get("busy") or {}).items()):
            devices.setdefault(device, {})[phase] = round(busy - before.get(device, 0.0), 3)
        before = dict(timing.get("busy") or {})
    search = timings.get("search") or {}
    seconds = phases.get("search", 0.0)
    record = {
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "devices": devices,
        "configs": configs,
        "compiles": dict(compiles),
    }
    if search:
        measure = search.get("measure", 0.0) / max(1, search.get("machines", 1))
        record["search"] = {"seconds": round(seconds, 3), "configs_per_s": round(configs / seconds, 3) if seconds else 0.0,
                            "build_s": round(search.get("build", 0.0), 3),
                            "build_waited_on_measure_s": round(search.get("waited", 0.0), 3),
                            "measure_waited_on_build_s": round(max(0.0, seconds - measure), 3),
                            "agent_start_s": round(search.get("start", 0.0), 3)}
        if "ahead" in search:  # each shape's search a stream of its own (harness.streams)
            record["search"].update(pruning_s=round(search.get("pruning", 0.0), 3), ahead=search["ahead"],
                                    in_flight_max=search.get("in_flight_max", 0))
    return record


def busy_share(record: dict, device: str, phase: Optional[str] = None) -> Optional[float]:
    """A device's busy seconds over the phase's wall time (None: not measured); without
    ``phase``, over the search and the re-measure together (the measuring phases)."""
    phases = [phase] if phase else [p for p in PHASES if p in record.get("phases", {})]
    wall = sum(record.get("phases", {}).get(p, 0.0) for p in phases)
    busy = sum(record.get("devices", {}).get(device, {}).get(p, 0.0) for p in phases)
    return busy / wall if wall > 0 else None


def lines(record: dict) -> list:
    """The tune's last lines before its wall time: each device's busy share, where the time went."""
    out = []
    devices = record.get("devices") or {}
    if devices:
        parts = []
        for device in sorted(devices):
            shares = ["%s %.0f%%" % (p, 100 * busy_share(record, device, p)) for p in PHASES
                      if p in devices[device] and busy_share(record, device, p) is not None]
            whole = busy_share(record, device)
            parts.append("%s %.0f%% (%s)" % (device, 100 * (whole or 0.0), ", ".join(shares)))
        out.append("devices busy while measuring: " + "; ".join(parts))
    phases = record.get("phases") or {}
    where = []
    for phase, seconds in phases.items():
        text = "%s %.1f s" % (phase, seconds)
        if phase == "search" and record.get("search"):
            s = record["search"]
            text += " (%d configs, %.1f configs/s; agents' start %.1f s; build %.1f s; build waited on measure " \
                    "%.1f s; measure waited on build %.1f s)" % (
                        record.get("configs", 0), s["configs_per_s"], s["agent_start_s"], s["build_s"],
                        s["build_waited_on_measure_s"], s["measure_waited_on_build_s"])
            if "ahead" in s:
                text = text[:-1] + "; pruning %.1f s; each shape's search a stream, %d batches in flight per shape, " \
                    "%d at most at once)" % (s["pruning_s"], s["ahead"], s["in_flight_max"])
        where.append(text)
    if where:
        out.append("where the time went: " + ", ".join(where))
    return out


def path_for(results_path: Path) -> Path:
    return Path(results_path).with_name(TIMING_FILE)


def save(results_path: Path, record: dict) -> Path:
    from .bundle import write_atomic

    path = path_for(results_path)
    write_atomic(path, json.dumps(record, indent=1).encode())
    return path


def load(results_path: Path) -> Optional[dict]:
    """The last tune's record, or None (no tune wrote one, or it does not parse)."""
    try:
        data = json.loads(path_for(results_path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
