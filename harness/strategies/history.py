"""The history of a search is the rows of the results CSV: turn them into Trials.

Rows with status ``pruned`` are not evaluations and are skipped. With one shape (or ``shape_id``)
each row is one Trial. With several shapes, a config's k-th evaluation is complete when every
shape it is not pruned for has its k-th row; its time is then the weighted geometric mean over
those shapes, and it failed if any of them failed.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable, Optional

from remote_agent.contract import CONFIG_PREFIX, PRUNED, deciding_estimator, deciding_time, finite_float

from ..library import is_library_id
from .base import OK, Trial, key


def in_space(row: dict, space: dict) -> bool:
    """A row of a config of ``space`` (its cfg_ columns name exactly the space's parameters and
    hold values of it); library rows and rows of another space are not."""
    if is_library_id(row.get("variant_id")):
        return False
    names = {c[len(CONFIG_PREFIX):] for c, v in row.items() if c and c.startswith(CONFIG_PREFIX) and v not in ("", None)}
    if names != set(space):
        return False
    return all(str(row[CONFIG_PREFIX + n]) in {str(v) for v in space[n]} for n in space)


def parse_value(text: str):
    """A config value as written in the CSV: int, then float, then the string itself."""
    for cast in (int, float):
        try:
            return cast(text)
        except (TypeError, ValueError):
            pass
    if text in ("True", "False"):
        return text == "True"
    return text


def row_config(row: dict, space: Optional[dict] = None) -> dict:
    """The config of a results row (its ``cfg_`` columns), with values typed as in ``space``."""
    cfg = {}
    for col, text in row.items():
        if not col or not col.startswith(CONFIG_PREFIX):
            continue
        name = col[len(CONFIG_PREFIX):]
        if text is None or text == "":
            continue
        if space is not None and name in space:
            match = [v for v in space[name] if str(v) == str(text)]
            cfg[name] = match[0] if match else parse_value(text)
        else:
            cfg[name] = parse_value(text)
    if space is not None:
        cfg = {n: cfg[n] for n in space if n in cfg}
    return cfg


def row_trial(row: dict, space: Optional[dict] = None) -> Trial:
    status = row.get("status") or "crash"
    t = deciding_time(row)
    p20, p80 = finite_float(row.get("time_ns_p20")), finite_float(row.get("time_ns_p80"))
    spread = (p80 - p20) if (p20 is not None and p80 is not None) else None
    ok = status == OK and t is not None
    return Trial(row_config(row, space), status if (ok or status != OK) else "crash",
                 t if ok else None, spread if ok else None, 1, finite_float(row.get("noise")) if ok else None,
                 deciding_estimator(row) if ok else None, row_clock_mhz(row) if ok else None)


def row_clock_mhz(row: dict) -> Optional[float]:
    """The mean of a row's clock_mhz_before and clock_mhz_after; None unless both are there."""
    before, after = finite_float(row.get("clock_mhz_before")), finite_float(row.get("clock_mhz_after"))
    return (before + after) / 2 if before and after else None


def trials_from_rows(rows: Iterable[dict], space: Optional[dict] = None, shape_id: Optional[str] = None,
                     weights: Optional[dict] = None) -> list:
    """Results rows (``csv.DictReader`` dicts) -> Trials, in the order the rows were written."""
    rows = [r for r in rows if shape_id is None or r.get("shape_id") == shape_id]
    shapes = list(dict.fromkeys(r.get("shape_id") for r in rows))
    if len(shapes) <= 1:
        return [row_trial(r, space) for r in rows if r.get("status") != PRUNED]
    pruned_for = {}
    for r in rows:
        if r.get("status") == PRUNED:
            pruned_for.setdefault(key(row_config(r, space)), set()).add(r.get("shape_id"))
    seen = {}  # config key -> {shape: [trials]}
    emitted = {}  # config key -> evaluations emitted
    out = []
    for r in rows:
        if r.get("status") == PRUNED:
            continue
        t = row_trial(r, space)
        k = key(t.config)
        per_shape = seen.setdefault(k, {})
        per_shape.setdefault(r.get("shape_id"), []).append(t)
        needed = [s for s in shapes if s not in pruned_for.get(k, ())]
        n = emitted.get(k, 0)
        if all(len(per_shape.get(s, ())) > n for s in needed):
            parts = [(s, per_shape[s][n]) for s in needed]
            emitted[k] = n + 1
            out.append(_combine(t.config, parts, weights or {}))
    return out


def _combine(config, parts, weights) -> Trial:
    failed = [t for _, t in parts if not t.ok]
    if failed:
        return Trial(dict(config), failed[0].status, None, None, 1)
    total = sum(weights.get(s, 1.0) for s, _ in parts)
    log_t = sum(weights.get(s, 1.0) * math.log(t.time_ns) for s, t in parts) / total
    return Trial(dict(config), OK, math.exp(log_t), None, 1)


def read_rows(path) -> list:
    """The rows of a results CSV (an absent file is an empty history)."""
    path = Path(path)
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def load_history(path, space: Optional[dict] = None, shape_id: Optional[str] = None,
                 weights: Optional[dict] = None) -> list:
    """A results CSV on disk -> the Trials a strategy resumes from."""
    return trials_from_rows(read_rows(path), space, shape_id, weights)
