"""Tuned CSV in the layout aiter's bf16/fp16 GEMM dispatch reads, plus the ``-o2``-style file of
all candidates.

The consumer is ``aiter.tuned_gemm.get_GEMM_A16W16_config`` (aiter e4048607): ``pd.read_csv(f)
.drop_duplicates().set_index(["gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype",
"scaleAB", "bpreshuffle"]).to_dict("index")``, looked up with ``(get_gfx(), get_cu_num(), M, N, K,
bias, str(dtype), str(otype), scaleAB, bpreshuffle)``; the row's ``libtype`` picks the function
(``solMap``). Columns, in order::

    gfx, cu_num, M, N, K, bias, dtype, outdtype, scaleAB, bpreshuffle, [untuned CSV's other
    columns], libtype, solidx, splitK, us, kernelName, err_ratio, tflops, bw,
    kernelId, layout, device, driver, toolchain, triton

- ``gfx`` the GPU arch (gfx942, gfx950; sm90 on NVIDIA, where aiter does not run), ``cu_num`` the
  CU / SM count. ``bias``, ``scaleAB``, ``bpreshuffle`` are ``False`` (the harness matmul has no
  bias, no scales, no preshuffled B); ``dtype`` and ``outdtype`` are torch names of what was
  measured (the matmul writes C in its input dtype).
- ``libtype`` is ``triton``: aiter then runs its own Triton ``gemm_a16w16``, which takes its
  config from aiter's Triton JSON (``--format triton`` writes it: ``{gfx}-GEMM-A16W16-N=..-K=..
  .json``); ``solidx`` 0. The CSV row routes the shape to Triton; the JSON holds the config.
- ``splitK`` as aiter counts it everywhere (``KBatch = 2^splitK`` in its CK kernels): log2 of the
  split, so SPLIT_K 1 is 0 and 8 is 3. A split that is not a power of two has no such value: that
  shape gets the fastest config with one that is, and a line says so.
- Only what aiter's GEMM computes is written: ``Y = X @ W^T`` with X (M x K) and W (N x K) both
  K-contiguous, our ``NT``; other layouts are left out with a line each. aiter's Triton GEMM is
  fp16/bf16: fp32 rows (``torch.float32``) are written for the harness's own use and said so.
- ``us`` the deciding time in microseconds, ``tflops`` TFLOP/s, ``bw`` GB/s, ``err_ratio`` the
  share of output elements outside tolerance; ``kernelId`` the harness ``variant_id``,
  ``kernelName`` spells the config (``matmul_BLOCK_M64_..._num_warps4``); ``layout`` and the
  facts after it are for the harness (aiter reads only its key and ``libtype``).
- Shapes read from an aiter untuned CSV carry their other columns back (after ``bpreshuffle``).
- The all-candidates file has the same columns plus ``status`` and one row per measured
  (variant, shape), failures included (their ``us`` empty), fastest first within a shape.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from remote_agent.contract import OK, PRUNED

from ..errors import HarnessError
from .common import HARNESS_ONLY, Meta, config_of, deciding_time, deciding_times, kernel_name, kernel_rows, plain
from .common import safe_frame  # CSV cells a spreadsheet would take for formulas
from .pick import is_power_of_two, pick_rows, say_default

KEY_COLUMNS = ["gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle"]
RESULT_COLUMNS = ["libtype", "solidx", "splitK", "us", "kernelName", "err_ratio", "tflops", "bw"]
COLUMNS = KEY_COLUMNS + RESULT_COLUMNS
META_COLUMNS = ["kernelId", "layout", "device", "driver", "toolchain", "triton"]
ALL_EXTRA = ["status"]
LIBTYPE = "triton"
TORCH_NAMES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
AITER_LAYOUT = "NT"  # Y = X @ W^T, X M x K and W N x K row-major


def columns(extra_columns=()) -> list:
    """The exact header of a tuned CSV with the given untuned-CSV extra columns."""
    extra = [c for c in extra_columns if c not in KEY_COLUMNS]
    return KEY_COLUMNS + extra + RESULT_COLUMNS + META_COLUMNS


def aiter_split_k(split_k) -> int:
    """aiter's splitK (log2 of the K batch) of a SPLIT_K; only powers of two have one."""
    if not is_power_of_two(split_k):
        raise HarnessError("SPLIT_K=%s has no aiter splitK (aiter splits K into 2^splitK batches)" % split_k)
    return int(split_k).bit_length() - 1


def accept(config: dict) -> Optional[str]:
    """None where aiter's kernels can express the config, else why not."""
    if not is_power_of_two(config.get("SPLIT_K", 1)):
        return "splits K %s ways (aiter's splitK is log2 of the split: powers of two only)" % config.get("SPLIT_K")
    used = [k for k in HARNESS_ONLY if config.get(k)]
    if used:
        return "uses %s, which aiter's Triton GEMM does not have" % ", ".join(used)
    return None


def aiter_rows(df: pd.DataFrame, say: Callable[[str], None]) -> pd.DataFrame:
    """The rows of aiter's GEMM layout (NT); one line for each other shape, one for fp32 rows."""
    kept = df["layout"] == AITER_LAYOUT
    for shape_id in sorted(set(df.loc[~kept, "shape_id"])):
        say("aiter: %s left out: aiter's GEMM is X @ W^T (layout NT); one row per M, N, K and dtype" % shape_id)
    if (df.loc[kept, "dtype"] == "fp32").any():
        say("aiter: fp32 rows are keyed torch.float32; aiter's Triton GEMM (libtype triton) is fp16/bf16, so they "
            "serve the harness (--merge, --compare-wo-tuning), not aiter's dispatch")
    return df[kept]


def write_tuned_csv(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, path, *, all_path=None,
                    sort: bool = False, shapes=None, say: Callable[[str], None] = say_default) -> list:
    """Write the tuned CSV (one row per shape: its best kernel aiter can express) to ``path`` and,
    with ``all_path`` (the ``-o2`` option), every candidate. ``sort`` orders rows by gfx,
    cu_num, M, N, K (aiter's ``--sort``); otherwise by dtype, layout, N, K, M. Every shape left
    out or given another config gets one line through ``say``. Returns the paths written."""
    meta = Meta.coerce(meta, df)
    extras = _extras(shapes)
    extra_cols = list(dict.fromkeys(k for e in extras.values() for k in e))
    header = columns(extra_cols)
    kernels = kernel_rows(df)
    if not kernels[kernels["status"] == OK].shape[0]:
        raise HarnessError("no shape has an ok kernel result: nothing to write to a tuned CSV")
    others = sorted(set(kernels["kernel"].astype(str)) - {"matmul"})
    if others:
        raise HarnessError("--format aiter is aiter's bf16/fp16 GEMM CSV (the matmul); %s configs go to aiter's "
                           "Triton JSON: --format triton" % ", ".join(others))
    sub = aiter_rows(df, say)
    top = pick_rows(sub, None if best is None else best[best["shape_id"].isin(set(sub["shape_id"]))],
                    accept, "aiter", say)
    if top.empty:
        raise HarnessError("no shape is left for aiter's tuned CSV (see the lines above)")
    out = pd.DataFrame([_row(r, meta, extras, header) for _, r in top.iterrows()], columns=header)
    if sort:
        out = out.sort_values(["gfx", "cu_num", "M", "N", "K"], kind="stable")
    written = [_write(out, path)]
    if all_path:
        cands = kernel_rows(sub[sub["status"] != PRUNED]).copy()
        cands = cands[[accept(config_of(r)) is None for _, r in cands.iterrows()]]
        cands["_t"] = deciding_times(cands).where(cands["status"] == OK)
        cands = cands.sort_values(["dtype", "layout", "N", "K", "M", "_t"], kind="stable", na_position="last")
        all_rows = [_row(r, meta, extras, header) | {"status": r["status"]} for _, r in cands.iterrows()]
        all_out = pd.DataFrame(all_rows, columns=header + ALL_EXTRA)
        if sort:
            all_out = all_out.sort_values(["gfx", "cu_num", "M", "N", "K"], kind="stable")
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
    """shape id -> {column: value} of the untuned CSV columns the shapes carried (aiter's key
    columns are the harness's own: what it measured)."""
    from ..shapes.hipblaslt_log import EXTRA_KEYS
    from ..shapes.tune_gemm_yaml import CONFIG_NAMES

    skip = set(EXTRA_KEYS) | set(CONFIG_NAMES) | set(COLUMNS) | set(META_COLUMNS) | set(ALL_EXTRA) | {"arch"}
    out = {}
    for shape in shapes or ():
        cols = {k: v for k, v in shape.extra if k not in skip}
        if cols:
            out[shape.id] = cols
    return out


def _row(r, meta: Meta, extras: dict, header: list) -> dict:
    """One CSV row of a results row; the only place rows of this file are made."""
    config = config_of(r)
    ok = r["status"] == OK
    torch_dtype = TORCH_NAMES.get(r["dtype"], r["dtype"])
    row = {
        "gfx": meta.arch, "cu_num": meta.cu_num, "M": int(r["M"]), "N": int(r["N"]), "K": int(r["K"]),
        "bias": False, "dtype": torch_dtype, "outdtype": torch_dtype, "scaleAB": False, "bpreshuffle": False,
        "libtype": LIBTYPE, "solidx": 0, "splitK": aiter_split_k(config.get("SPLIT_K", 1)),
        "us": round(deciding_time(r) / 1e3, 4) if ok else None,
        "kernelName": kernel_name(r["kernel"], config),
        "err_ratio": _num(r.get("err_ratio")),
        "tflops": _num(r.get("tflops")) if ok else None, "bw": _num(r.get("gbps")) if ok else None,
        "kernelId": r["variant_id"], "layout": r["layout"], "device": meta.device or r.get("device"),
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
