"""The table `harness report` prints."""

from __future__ import annotations

from typing import Optional

import pandas as pd
from rich.table import Table

from .aggregate import config_columns
from .common import deciding_time


def _time_header(best: pd.DataFrame) -> str:
    """The time column's name: the estimator that decided (``min``, ``median``), or ``time``
    where rows of both kinds are shown."""
    names = set(best["estimator"].fillna("median")) if "estimator" in best.columns else {"median"}
    return names.pop() if len(names) == 1 else "time"


def best_table(best: pd.DataFrame, counts: dict) -> Table:
    title = "best config per shape  (" + ", ".join("%s %d" % kv for kv in sorted(counts.items())) + ")"
    table = Table(title=title)
    cfg_cols = config_columns(best)
    # vector instructions in the kernel (from the bundle's disassembly), when the build counted them
    vec = "vector_instructions" in best.columns and best["vector_instructions"].notna().any()
    for col in ["shape", "device"] + [_short(c[4:]) for c in cfg_cols] + [_time_header(best), "spread", "GFLOP/s", "rel err",
                                                                          "ties"] + (["vec instr"] if vec else []):
        table.add_column(col, justify="right" if col not in ("shape", "device") else "left")
    for _, row in best.iterrows():
        cfg = [str(_int(row[c])) for c in cfg_cols]
        extra = [("-" if pd.isna(row["vector_instructions"]) else str(int(row["vector_instructions"])))] if vec else []
        table.add_row(row["shape_id"], str(row["device"]), *cfg, _time(deciding_time(row)),
                      _time(row["spread_ns"]), "%.2f" % (row["tflops"] * 1e3), "%.1e" % row["rel_err"],
                      str(int(row["tied_with"])), *extra)
    return table


def winners_table(best: pd.DataFrame, winners: dict) -> Optional[Table]:
    """The noise-aware winners of `harness tune` (winners.json entries by shape), decided in words:
    ``clear by 12.3 %`` (how much slower the runner-up is) or ``tie with <configs>``."""
    from ..strategies.winner import entry_words

    if not winners or "decided" not in best.columns:
        return None
    table = Table(title="noise-aware winners (top candidates re-measured interleaved)")
    for col in ("shape", "winner", _time_header(best), "noise %", "spread %", "decided", "repeats"):
        table.add_column(col, justify="left" if col in ("shape", "winner", "decided") else "right")
    shown = set()
    for _, row in best.iterrows():
        w = winners.get(row["shape_id"])
        if not w or row.get("decided") is None or row["shape_id"] in shown:
            continue  # one line a shape, however many devices measured it
        shown.add(row["shape_id"])
        noise = w.get("noise")
        table.add_row(row["shape_id"], _config_text(w["config"]), _time(w["median_ns"]),
                      "-" if noise is None else "%.2f" % (100.0 * noise), "%.1f" % (100.0 * w["rel_spread"]),
                      entry_words(w, _config_text), str(w["repeats"]))
    return table if shown else None


def _config_text(config: dict) -> str:
    return " ".join("%s=%s" % (_short(k), _int(v)) for k, v in config.items())


def _short(name: str) -> str:
    """BLOCK_M -> BM, GROUP_M -> GM, num_warps -> warps: the table stays narrow."""
    if name.startswith(("BLOCK_", "GROUP_", "SPLIT_")):
        return name[0] + name.split("_", 1)[1]
    return name.replace("num_", "")


def _int(v):
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return "%.3g %s" % (ns / scale, unit)
    return "%.0f ns" % ns
