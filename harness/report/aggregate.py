"""Results CSV -> pandas, and the best config per shape (ties within the spread)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from remote_agent.contract import ADDED_IN_SCHEMA_2, CONFIG_PREFIX, OK, READABLE_RESULTS_SCHEMAS

from ..errors import HarnessError

KEY = ["variant_id", "shape_id", "device"]


def load_results(paths) -> pd.DataFrame:
    """Every row of the given results files; a re-measured key keeps its latest row."""
    frames = []
    for path in paths:
        path = Path(path)
        if not path.exists() or path.stat().st_size == 0:
            continue
        frame = pd.read_csv(path, dtype={"variant_id": str, "shape_id": str, "device": str})
        missing = [c for c in ("schema_version",) + tuple(KEY) if c not in frame.columns]
        schemas = set(pd.to_numeric(frame["schema_version"], errors="coerce").dropna().astype(int)) \
            if not missing else set()
        if missing or not schemas <= set(READABLE_RESULTS_SCHEMAS):
            raise HarnessError("results written by another schema version (this harness reads %s)"
                               % ", ".join(map(str, READABLE_RESULTS_SCHEMAS)), where=str(path))
        for col in ADDED_IN_SCHEMA_2:  # a schema-1 file: the columns it lacks are empty
            if col not in frame.columns:
                frame[col] = None
        frames.append(frame)
    if not frames:
        raise HarnessError("no results yet; run: harness run")
    df = pd.concat(frames, ignore_index=True)
    df = df.sort_values("timestamp", kind="stable").drop_duplicates(KEY, keep="last")
    return df.reset_index(drop=True)


def config_columns(df: pd.DataFrame) -> list:
    return [c for c in df.columns if c.startswith(CONFIG_PREFIX)]


def best_per_shape(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, device): the fastest ok config by median time.

    Candidates whose median is within the measured spread (p80 - p20) of the fastest are a
    tie; a tie goes to the lowest spread, then the lowest median. Adds columns ``spread_ns``
    and ``tied_with`` (how many others were within the spread)."""
    ok = df[df["status"] == OK].copy()
    if ok.empty:
        return ok.assign(spread_ns=[], tied_with=[])
    ok["spread_ns"] = ok["time_ns_p80"] - ok["time_ns_p20"]
    rows = []
    for _, group in ok.groupby(["shape_id", "device"], sort=True):
        fastest = group.loc[group["time_ns_median"].idxmin()]
        margin = group["spread_ns"].clip(lower=fastest["spread_ns"])
        tied = group[group["time_ns_median"] - fastest["time_ns_median"] <= margin]
        winner = tied.sort_values(["spread_ns", "time_ns_median", "variant_id"]).iloc[0].copy()
        winner["tied_with"] = len(tied) - 1
        rows.append(winner)
    return pd.DataFrame(rows).reset_index(drop=True)


def status_counts(df: pd.DataFrame) -> dict:
    return df["status"].value_counts().to_dict()
