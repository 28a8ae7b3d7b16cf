"""Tuned CSV in the aiter / CK layout, plus the ``-o2``-style file of all candidates.

Columns, in order::

    arch, cu_num, M, N, K, [untuned CSV's extra columns], kernelId, splitK, us, kernelName,
    tflops, bw, errRatio, dtype, layout, device, driver, toolchain, triton

- ``arch`` is the GPU arch (gfx942, sm90) or the CPU arch; ``cu_num`` the CU or SM count (aiter
  keys its lookups on ``cu_num, M, N, K``).
- ``kernelId`` is the harness ``variant_id`` (stable across runs: a hash of config and
  specialization); ``kernelName`` spells the config (``matmul_BLOCK_M64_..._num_warps4``).
- ``splitK`` is the config's SPLIT_K (1 = no split; 1 where the kernel has none).
- ``us`` the median time in microseconds, ``tflops`` TFLOP/s, ``bw`` GB/s, ``errRatio`` the share
  of output elements outside tolerance.
- Shapes read from an aiter untuned CSV carry its other columns (bias, dtype, outdtype, ...);
  pass those shapes as ``shapes=`` and the columns come back after K, as aiter's tuned files
  have them. Such a ``dtype`` / ``layout`` column replaces the harness one.
- The all-candidates file has the same columns plus ``status`` and one row per measured
  (variant, shape), failures included (their ``us`` empty), fastest first within a shape.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import pandas as pd

from remote_agent.contract import OK, PRUNED

from ..errors import HarnessError
from .common import Meta, config_of, deciding_time, deciding_times, kernel_name, kernel_rows, plain, tuned_best
from .common import safe_frame  # CSV cells a spreadsheet would take for formulas

KEY_COLUMNS = ["arch", "cu_num", "M", "N", "K"]
RESULT_COLUMNS = ["kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
COLUMNS = KEY_COLUMNS + RESULT_COLUMNS
META_COLUMNS = ["dtype", "layout", "device", "driver", "toolchain", "triton"]
ALL_EXTRA = ["status"]


def columns(extra_columns=()) -> list:
    """The exact header of a tuned CSV with the given untuned-CSV extra columns."""
    extra = list(extra_columns)
    return KEY_COLUMNS + extra + RESULT_COLUMNS + [c for c in META_COLUMNS if c not in extra]


def write_tuned_csv(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, path, *, all_path=None,
                    sort: bool = False, shapes=None) -> list:
    """Write the tuned CSV (one row per shape: its best kernel) to ``path`` and, with
    ``all_path`` (the ``-o2`` option), every candidate. ``sort`` orders rows by
    arch, cu_num, M, N, K (aiter's ``--sort``); otherwise by dtype, layout, N, K, M.
    Returns the paths written."""
    meta = Meta.coerce(meta, df)
    extras = _extras(shapes)
    extra_cols = list(dict.fromkeys(k for e in extras.values() for k in e))
    header = columns(extra_cols)
    top = tuned_best(df, best)
    if top.empty:
        raise HarnessError("no shape has an ok kernel result: nothing to write to a tuned CSV")
    rows = [_row(r, meta, extras, header) for _, r in top.iterrows()]
    out = pd.DataFrame(rows, columns=header)
    if sort:
        out = out.sort_values(KEY_COLUMNS, kind="stable")
    written = [_write(out, path)]
    if all_path:
        cands = kernel_rows(df[df["status"] != PRUNED]).copy()
        cands["_t"] = deciding_times(cands).where(cands["status"] == OK)
        cands = cands.sort_values(["dtype", "layout", "N", "K", "M", "_t"], kind="stable", na_position="last")
        all_rows = [_row(r, meta, extras, header) | {"status": r["status"]} for _, r in cands.iterrows()]
        all_out = pd.DataFrame(all_rows, columns=header + ALL_EXTRA)
        if sort:
            all_out = all_out.sort_values(KEY_COLUMNS, kind="stable")
        written.append(_write(all_out, all_path))
    return written


def read_tuned_csv(path) -> pd.DataFrame:
    """A tuned CSV back (this layout, or aiter's own with a ``gfx`` column for the arch)."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError("tuned CSV %s does not exist" % path)
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise HarnessError("cannot read as CSV: %s" % exc, where=str(path))
    if "arch" not in df.columns and "gfx" in df.columns:
        df = df.rename(columns={"gfx": "arch"})
    missing = [c for c in ("M", "N", "K", "us") if c not in df.columns]
    if missing:
        raise HarnessError("not a tuned CSV: no %s column" % ", ".join(missing), where=str(path))
    return df


def read_tuned_configs(path, kernel: Optional[str] = None) -> list:
    """[(Shape, config)] of a tuned CSV written by the harness: the shape from M, N, K, dtype and
    layout, the config parsed back from ``kernelName`` (``<kernel>_<NAME><int>_...``). This is
    what ``--compare-wo-tuning FILE`` rebuilds and runs. Give ``kernel`` when its name holds
    an underscore."""
    from ..shapes import make_shape
    from ..shapes.aiter_csv import DEFAULT_LAYOUT, TORCH_DTYPES

    path = Path(path)
    df = read_tuned_csv(path)
    missing = [c for c in ("kernelName", "dtype") if c not in df.columns]
    if missing:
        raise HarnessError("no %s column: not a tuned CSV the harness wrote" % ", ".join(missing), where=str(path))
    out = []
    for i, row in df.iterrows():
        where = "%s:%d" % (path, i + 2)
        dtype = TORCH_DTYPES.get(str(row["dtype"]).lower())
        if dtype is None:
            raise HarnessError("dtype %r is not one the harness runs" % row["dtype"], where=where)
        layout = str(row["layout"]) if "layout" in df.columns and not pd.isna(row["layout"]) else DEFAULT_LAYOUT
        shape = make_shape(row["M"], row["N"], row["K"], dtype=dtype, layout=layout, where=where)
        out.append((shape, parse_kernel_name(str(row["kernelName"]), where, kernel)))
    return out


_PARAM = re.compile(r"([A-Za-z][A-Za-z_]*?)(-?\d+)(?=_|$)")


def parse_kernel_name(name: str, where=None, kernel: Optional[str] = None) -> dict:
    """``matmul_BLOCK_M64_BLOCK_N128_num_warps4`` -> {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4}."""
    if kernel and name.startswith(kernel + "_"):
        rest = name[len(kernel) + 1:]
    else:
        rest = name.partition("_")[2]
    config, pos = {}, 0
    for match in _PARAM.finditer(rest):
        if match.start() != pos:
            break
        config[match.group(1)] = int(match.group(2))
        pos = match.end() + 1
    if not rest or pos < len(rest):
        raise HarnessError("kernelName %r does not spell a config as <kernel>_<NAME><int>_..." % name, where=where)
    return config


def _extras(shapes) -> dict:
    """shape id -> {column: value} of the untuned CSV columns the shapes carried."""
    from ..shapes.hipblaslt_log import EXTRA_KEYS
    from ..shapes.tune_gemm_yaml import CONFIG_NAMES

    skip = set(EXTRA_KEYS) | set(CONFIG_NAMES) | set(COLUMNS) | set(ALL_EXTRA)
    out = {}
    for shape in shapes or ():
        cols = {k: v for k, v in shape.extra if k not in skip}
        if cols:
            out[shape.id] = cols
    return out


def _row(r, meta: Meta, extras: dict, header: list) -> dict:
    config = config_of(r)
    ok = r["status"] == OK
    row = {
        "arch": meta.arch, "cu_num": meta.cu_num, "M": int(r["M"]), "N": int(r["N"]), "K": int(r["K"]),
        "kernelId": r["variant_id"], "splitK": config.get("SPLIT_K", 1),
        "us": round(deciding_time(r) / 1e3, 4) if ok else None,
        "kernelName": kernel_name(r["kernel"], config),
        "tflops": _num(r.get("tflops")) if ok else None, "bw": _num(r.get("gbps")) if ok else None,
        "errRatio": _num(r.get("err_ratio")),
        "dtype": r["dtype"], "layout": r["layout"], "device": meta.device or r.get("device"),
        "driver": meta.driver, "toolchain": meta.toolchain, "triton": meta.triton,
    }
    for key, value in extras.get(r["shape_id"], {}).items():
        row[key] = value
    return {c: row.get(c) for c in header}


def _num(value):
    value = plain(value)
    return None if value is None else round(float(value), 4)


def _write(frame: pd.DataFrame, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_frame(frame).to_csv(path, index=False)
    return path
