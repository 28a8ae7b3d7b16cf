"""Results CSV -> pandas, and the best config per shape (ties within the spread)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from remote_agent.contract import CONFIG_PREFIX, OK, TIME

from ..errors import HarnessError
from .common import deciding_spreads, deciding_times
from .results_reader import read_results

KEY = ["variant_id", "shape_id", "device"]


def load_results(paths, known=None, say=None) -> pd.DataFrame:
    """Every row of the given results files that passes results_reader's checks (against
    ``known``, the bundle's variants and shapes, where given); a re-measured key keeps its latest
    row. ``say`` gets each file's one-line summary (rows read, kept, set aside and why)."""
    frames = []
    for path in paths:
        path = Path(path)
        if not path.exists() or path.stat().st_size == 0:
            continue
        results = read_results(path, known)
        if say is not None:
            say(results.summary())
        if results.rows:
            frames.append(results.frame())
        elif results.set_aside:
            raise HarnessError("no row can be used: %s" % results.summary())
    if not frames:
        raise HarnessError("no results yet; run: harness run")
    df = pd.concat(frames, ignore_index=True)
    df = df.sort_values("timestamp", kind="stable").drop_duplicates(KEY, keep="last")
    return df.reset_index(drop=True)


def config_columns(df: pd.DataFrame) -> list:
    return [c for c in df.columns if c.startswith(CONFIG_PREFIX)]


def best_per_shape(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, device): the fastest ok config by its deciding time (``time_ns``:
    the minimum on CPU targets, the median on GPU targets; the median in older files).

    Candidates whose time is within the measured spread (common.deciding_spreads) of the fastest
    are a tie; a tie goes to the lowest spread, then the lowest time. Fills ``time_ns`` where
    older files lack it and adds columns ``spread_ns`` and ``tied_with`` (how many others were
    within the spread)."""
    ok = df[df["status"] == OK].copy()
    if ok.empty:
        return ok.assign(spread_ns=[], tied_with=[])
    ok[TIME] = deciding_times(ok)
    ok["spread_ns"] = deciding_spreads(ok)
    rows = []
    for _, group in ok.groupby(["shape_id", "device"], sort=True):
        fastest = group.loc[group[TIME].idxmin()]
        margin = group["spread_ns"].clip(lower=fastest["spread_ns"])
        tied = group[group[TIME] - fastest[TIME] <= margin]
        winner = tied.sort_values(["spread_ns", TIME, "variant_id"]).iloc[0].copy()
        winner["tied_with"] = len(tied) - 1
        rows.append(winner)
    return pd.DataFrame(rows).reset_index(drop=True)


def status_counts(df: pd.DataFrame) -> dict:
    return df["status"].value_counts().to_dict()
