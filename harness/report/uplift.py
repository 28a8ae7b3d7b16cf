"""Uplift over the vendor library, per shape and over a workload, and the filter that drops
tuned entries not worth shipping.

Library rows are results rows whose ``variant_id`` starts with ``lib:`` (see common.py); for a
shape with several, the fastest ok one is the library's time.

Per shape: ``speedup = library time / tuned time`` and ``uplift_pct = (speedup - 1) * 100``.
A tuned entry is *kept* when its row is ok (the agent checked its answer), its ``err_ratio``
is within ``max_err_ratio`` (when given, as aiter's ``--errRatio``), and it is faster than the
library; a shape without a library time is kept, with reason ``no library time``. ``uses`` says
what the shape runs with: ``tuned``, or ``library`` where the entry is dropped and the library has
a time (the library beat every tuned config, or none ran ok): the shape falls back to the library.

Over the workload, each shape weighs its number of calls (``weights``: shape_id -> calls, e.g.
the hipBLASLt summary CSV's ``weight`` column; 1 each when not given)::

    weighted speedup = sum(w * library time) / sum(w * time used)

where the time used is the tuned time for a kept entry and the library time otherwise (a
dropped entry falls back to the library). Only shapes with a library time count.

``library_build`` names what the library row ran, from the results' ``library`` column (results
schema 5: ``OpenBLAS 0.3.34.481.3, core SkylakeX``, the version and the kernel core OpenBLAS
picked at run time); empty for the reference build, GPU libraries and older files. The summary's
``libraries`` lists what the shapes were compared against (the build, else the library's variant
id), for every report's summary line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from remote_agent.contract import OK

from ..errors import HarnessError
from .common import deciding_time, dim_columns, fastest_row, library_rows, tuned_best

COLUMNS = ["shape_id", "M", "N", "K", "dtype", "layout", "weight", "library", "library_build", "library_ns",
           "tuned_variant",
           "tuned_ns", "speedup", "uplift_pct", "err_ratio", "kept", "reason", "uses"]  # matmul's; other kernels: columns()


def columns(dims) -> list:
    """The uplift table's columns, the kernel's dimensions in place of M, N, K."""
    return COLUMNS[:1] + list(dims) + COLUMNS[4:]


def read_weights(source) -> dict:
    """shape_id -> weight from a dict, a list of Shapes, a DataFrame or CSV with ``shape_id`` and
    ``weight`` (or ``calls``) columns (the hipBLASLt summary CSV), or None (empty)."""
    if source is None:
        return {}
    if isinstance(source, dict):
        return {str(k): float(v) for k, v in source.items()}
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise HarnessError("weights file %s does not exist" % path)
        source = pd.read_csv(path)
    if isinstance(source, pd.DataFrame):
        col = "weight" if "weight" in source.columns else "calls" if "calls" in source.columns else None
        if "shape_id" not in source.columns or col is None:
            raise HarnessError("a weights table needs shape_id and weight (or calls) columns")
        frame = source.dropna(subset=["shape_id"])
        frame = frame[frame["shape_id"].astype(str) != ""]
        return frame.groupby(frame["shape_id"].astype(str))[col].sum().astype(float).to_dict()
    out = {}
    for shape in source:  # Shapes
        out[shape.id] = out.get(shape.id, 0.0) + float(shape.weight)
    return out


def library_uplift(df: pd.DataFrame, best: Optional[pd.DataFrame] = None, weights=None,
                   max_err_ratio: Optional[float] = None) -> tuple:
    """(per-shape DataFrame with COLUMNS, summary dict). Summary keys: shapes, compared, kept,
    dropped, fell_back (shape ids that use the library), mean_uplift_pct (kept entries),
    weighted_speedup, weighted_uplift_pct, libraries (the library builds compared against)."""
    w = read_weights(weights)
    dims = dim_columns(df)
    tuned = tuned_best(df, best)
    lib = library_rows(df[df["status"] == OK])
    lib_best = {}
    for shape_id, group in lib.groupby("shape_id", sort=False):
        lib_best[shape_id] = fastest_row(group)
    shapes = list(tuned["shape_id"]) + [s for s in lib_best if s not in set(tuned["shape_id"])]
    by_id = {r["shape_id"]: r for _, r in tuned.iterrows()}
    rows = []
    for shape_id in shapes:
        t = by_id.get(shape_id)
        l = lib_best.get(shape_id)
        ref = t if t is not None else l
        row = {"shape_id": shape_id, **{d: int(ref[d]) for d in dims},
               "dtype": ref["dtype"], "layout": ref["layout"], "weight": w.get(shape_id, 1.0 if not w else 0.0),
               "library": l["variant_id"] if l is not None else None,
               "library_build": _text(l.get("library")) if l is not None else "",
               "library_ns": deciding_time(l) if l is not None else None,
               "tuned_variant": t["variant_id"] if t is not None else None,
               "tuned_ns": deciding_time(t) if t is not None else None,
               "err_ratio": _float(t.get("err_ratio")) if t is not None else None}
        if t is not None and l is not None:
            row["speedup"] = row["library_ns"] / row["tuned_ns"]
            row["uplift_pct"] = (row["speedup"] - 1.0) * 100.0
        else:
            row["speedup"] = row["uplift_pct"] = None
        row["kept"], row["reason"] = _verdict(t, row, max_err_ratio)
        row["uses"] = "tuned" if row["kept"] else "library" if row["library_ns"] is not None else "-"
        rows.append(row)
    table = pd.DataFrame(rows, columns=columns(dims))
    return table, _summary(table)


def keep_faster_than_library(df: pd.DataFrame, best: Optional[pd.DataFrame] = None,
                             max_err_ratio: Optional[float] = None) -> pd.DataFrame:
    """The tuned best rows worth shipping (pass the result as ``best`` to the writers)."""
    table, _ = library_uplift(df, best, None, max_err_ratio)
    keep = set(table.loc[table["kept"], "shape_id"])
    top = tuned_best(df, best)
    return top[top["shape_id"].isin(keep)].reset_index(drop=True)


def write_uplift(df: pd.DataFrame, best: Optional[pd.DataFrame], path, weights=None,
                 max_err_ratio: Optional[float] = None) -> tuple:
    """Write the per-shape table to ``path`` (CSV); returns (path, summary dict)."""
    table, summary = library_uplift(df, best, weights, max_err_ratio)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.round({"speedup": 4, "uplift_pct": 2}).to_csv(path, index=False)
    return path, summary


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def library_label(variant_id, build) -> str:
    """``lib:openblas:fp32 (OpenBLAS 0.3.34.481.3, core SkylakeX)``; the id alone without a build."""
    return "%s (%s)" % (variant_id, build) if build else str(variant_id or "")


def libraries_words(summary: dict) -> str:
    """`` (OpenBLAS 0.3.34.481.3, core SkylakeX)`` for a summary line, "" when no build is named."""
    return " (%s)" % "; ".join(summary.get("libraries") or []) if summary.get("libraries") else ""


def _float(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if value != value else value


def _verdict(t, row: dict, max_err_ratio) -> tuple:
    if t is None:
        return False, "no ok tuned kernel"
    if t["status"] != OK:
        return False, "tuned kernel not ok (%s)" % t["status"]
    if max_err_ratio is not None and row["err_ratio"] is not None and row["err_ratio"] > max_err_ratio:
        return False, "err_ratio %.4g above %.4g" % (row["err_ratio"], max_err_ratio)
    if row["library_ns"] is None:
        return True, "no library time"
    if row["tuned_ns"] >= row["library_ns"]:
        return False, "not faster than %s" % row["library"]
    return True, "faster"


def _summary(table: pd.DataFrame) -> dict:
    compared = table[table["library_ns"].notna()]
    kept = table[table["kept"]]
    used = compared.apply(lambda r: r["tuned_ns"] if r["kept"] else r["library_ns"], axis=1) \
        if len(compared) else pd.Series(dtype=float)
    lib_total = float((compared["weight"] * compared["library_ns"]).sum()) if len(compared) else 0.0
    used_total = float((compared["weight"] * used).sum()) if len(compared) else 0.0
    speedup = lib_total / used_total if used_total > 0 else None
    kept_compared = kept[kept["uplift_pct"].notna()]
    return {
        "shapes": int(len(table)),
        "compared": int(len(compared)),
        "kept": int(len(kept)),
        "dropped": int(len(table) - len(kept)),
        "fell_back": [str(sid) for sid in table.loc[table["uses"] == "library", "shape_id"]],
        "mean_uplift_pct": float(kept_compared["uplift_pct"].mean()) if len(kept_compared) else None,
        "weighted_speedup": speedup,
        "weighted_uplift_pct": (speedup - 1.0) * 100.0 if speedup else None,
        "libraries": sorted({b or v for b, v in zip(compared["library_build"], compared["library"])})
        if len(compared) else [],
    }
