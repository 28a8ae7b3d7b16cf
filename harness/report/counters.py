"""Counter correlation: Pearson r of each profiler counter (``ctr_*``) against kernel time
(the deciding time, ``common.deciding_times``) across the variants of a shape, as the Triton-CPU RVV workflow's
report does with ``perf stat`` counters.

Only ok kernel rows count (library rows are left out), and only where both values are present
(an unsupported counter is empty, never 0). A (shape, counter) pair needs ``min_variants``
such variants and a counter that varies; otherwise it has no r. Pairs with |r| >= threshold are
marked ``listed``: the counters that explain the time differences among the shape's configs.

Counters that are time by another name explain nothing and are left out (``time_like``):
task-clock, cpu-clock and durations (ncu's gpu__time_duration) always; the operating system's
events (context switches, CPU migrations, page faults), which perf counts over the whole
process: the agent samples each variant for about the same wall time, so per call they follow
the time; cycles when the frequency was fixed, i.e. when cycles per ns of the shape's configs
stay within FIXED_FREQUENCY_CV (coefficient of variation) of each other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from remote_agent.contract import COUNTER_PREFIX, OK

from .common import counter_columns, deciding_times, kernel_rows
from .common import safe_frame  # CSV cells a spreadsheet would take for formulas

COLUMNS = ["shape_id", "counter", "r", "abs_r", "n", "listed"]
FIXED_FREQUENCY_CV = 0.05


def is_time_counter(name: str) -> bool:
    """task-clock, cpu-clock, durations: a time whatever the configs do."""
    n = name.lower().replace("-", "_")
    return n in ("task_clock", "cpu_clock", "time", "duration") or "duration" in n or n.endswith("_clock") \
        or n.startswith("time_")


OS_EVENTS = ("context_switches", "cs", "cpu_migrations", "migrations", "page_faults", "faults", "minor_faults",
             "major_faults")


def is_os_event(name: str) -> bool:
    return name.lower().replace("-", "_") in OS_EVENTS


def is_cycles_counter(name: str) -> bool:
    n = name.lower().replace("-", "_")
    return n in ("cycles", "cpu_cycles", "ref_cycles", "bus_cycles") or "cycles_elapsed" in n


def time_like(name: str, x, t) -> bool:
    """Time by another name: a time counter, or cycles at a fixed frequency (x / t constant)."""
    if is_time_counter(name) or is_os_event(name):
        return True
    if is_cycles_counter(name):
        ratio = np.asarray(x, float) / np.asarray(t, float)
        return bool(ratio.mean() > 0 and ratio.std() / ratio.mean() <= FIXED_FREQUENCY_CV)
    return False


def counter_correlation(df: pd.DataFrame, threshold: float = 0.8, min_variants: int = 3) -> pd.DataFrame:
    """One row per (shape, counter) with an r: columns COLUMNS, strongest first."""
    if not 0 <= threshold <= 1:
        raise ValueError("threshold is an |r| between 0 and 1 (got %r)" % threshold)
    ok = kernel_rows(df[df["status"] == OK])
    rows = []
    for col in counter_columns(ok):
        values = pd.to_numeric(ok[col], errors="coerce")
        times = deciding_times(ok)
        frame = pd.DataFrame({"shape_id": ok["shape_id"], "x": values, "t": times}).dropna()
        for shape_id, group in frame.groupby("shape_id", sort=True):
            if len(group) < min_variants:
                continue
            x, t = group["x"].to_numpy(float), group["t"].to_numpy(float)
            if np.ptp(x) == 0 or np.ptp(t) == 0 or time_like(col[len(COUNTER_PREFIX):], x, t):
                continue
            r = float(np.corrcoef(x, t)[0, 1])
            rows.append({"shape_id": shape_id, "counter": col[len(COUNTER_PREFIX):], "r": round(r, 6),
                         "abs_r": round(abs(r), 6), "n": len(group), "listed": abs(r) >= threshold})
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.sort_values(["abs_r", "shape_id", "counter"], ascending=[False, True, True],
                           kind="stable").reset_index(drop=True)


def write_counter_correlation(df: pd.DataFrame, path, threshold: float = 0.8, min_variants: int = 3,
                              listed_only: bool = True) -> Path:
    """Write the correlations to a CSV (only the listed ones unless ``listed_only=False``)."""
    table = counter_correlation(df, threshold, min_variants)
    if listed_only:
        table = table[table["listed"]]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_frame(table).to_csv(path, index=False)
    return path
