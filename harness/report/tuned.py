"""tuned/<target>/<kernel>.csv (every measured row) and .json (best config per shape)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .aggregate import config_columns
from .common import deciding_time, dim_columns
from .common import safe_frame  # CSV cells a spreadsheet would take for formulas
from remote_agent.contract import deciding_estimator


def write_tuned(df: pd.DataFrame, best: pd.DataFrame, out_dir: Path, kernel: str, meta: dict) -> tuple:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / ("%s.csv" % kernel)
    json_path = out_dir / ("%s.json" % kernel)
    safe_frame(df).to_csv(csv_path, index=False)
    cfg_cols = config_columns(best)
    dims = dim_columns(df)
    entries = []
    for _, row in best.iterrows():
        entries.append({
            "shape": row["shape_id"], **{d: int(row[d]) for d in dims},
            "dtype": row["dtype"], "layout": _plain(row["layout"]) if not pd.isna(row["layout"]) else "",
            "device": row["device"],
            "config": {c[len("cfg_"):]: _plain(row[c]) for c in cfg_cols if not pd.isna(row[c])},
            "variant_id": row["variant_id"], "time_ns": deciding_time(row),
            "estimator": deciding_estimator(row), "time_ns_median": float(row["time_ns_median"]),
            "spread_ns": float(row["spread_ns"]), "tied_with": int(row["tied_with"]),
            "tflops": float(row["tflops"]), "rel_err": float(row["rel_err"]),
        })
    json_path.write_text(json.dumps({"kernel": kernel, **meta, "best": entries}, indent=1))
    return csv_path, json_path


def _plain(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
