"""Tuned CSV in the layout of aiter's a8w8 blockscale GEMM (``a8w8_blockscale_tuned_gemm.csv``).

aiter's tuner (csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py) writes, and
``aiter.ops.gemm_op_a8w8.get_CKGEMM_config`` reads (``pd.read_csv(f).drop_duplicates()
.set_index(["gfx", "cu_num", "M", "N", "K"]).to_dict("index")``), exactly these columns::

    gfx, cu_num, M, N, K, libtype, kernelId, splitK, us, kernelName, tflops, bw, errRatio

One row per shape, its best kernel:

- ``gfx`` the GPU arch of the target (gfx942, gfx950; ``sm90`` on NVIDIA, where aiter does not
  run: the file is for comparison there), ``cu_num`` its CU / SM count.
- ``libtype`` is ``triton`` (aiter's own values are ``ck``, ``cktile``, ``asm``).
- ``kernelId`` the harness ``variant_id`` (stable across runs); ``kernelName`` spells the config
  (``fp8_blockscale_BLOCK_M64_..._num_stages3``), as the other harness writers do.
- ``splitK`` as aiter counts it: log2 of the K batch (aiter's ``KBatch = 2^splitK``), so a
  harness SPLIT_K of 4 is ``splitK`` 2.
- ``us`` the median time in microseconds (4 decimals); ``tflops`` and ``bw`` by aiter's own
  formulas (``GemmCommonTuner.calculate`` with the blockscale tuner's ``bpes=(1, 1, 2)``):
  2MNK / us / 1e6, and (MK + NK + 2MN) bytes / us / 1e3 in GB/s, 2 decimals (scales not counted).
- ``errRatio`` the share of output elements outside atol + rtol * |ref| (aiter: rtol = atol =
  1e-2, the fp8 kernel's tolerance too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from ..errors import HarnessError
from .common import Meta, config_of, deciding_time, kernel_name, plain, tuned_best
from .common import safe_frame  # CSV cells a spreadsheet would take for formulas

KEYS = ["gfx", "cu_num", "M", "N", "K"]
RESULTS = ["libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
COLUMNS = KEYS + RESULTS
LIBTYPE = "triton"


def aiter_split_k(split_k: int) -> int:
    """aiter's splitK (log2 of the K batch) of a SPLIT_K; only powers of two have one."""
    split_k = int(split_k)
    if split_k < 1 or split_k & (split_k - 1):
        raise HarnessError("SPLIT_K=%d has no aiter splitK (aiter splits K into 2^splitK batches)" % split_k)
    return split_k.bit_length() - 1


def aiter_tflops_bw(M: int, N: int, K: int, us: float) -> tuple:
    """TFLOP/s and GB/s as aiter's blockscale tuner computes them (inputs 1 byte, output 2)."""
    tflops = round(2 * M * N * K / (us * 1e6), 2)
    bw = round((M * K + N * K + 2 * M * N) / (us * 1e-6) / 1e9, 2)
    return tflops, bw


def write_tuned_csv(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, path) -> Path:
    """One row per shape (its best ok kernel row) in aiter's a8w8 blockscale layout, sorted as
    aiter's GemmCommonTuner sorts: gfx, cu_num, N, M, K."""
    meta = Meta.coerce(meta, df)
    if meta.cu_num is None:
        raise HarnessError("an aiter tuned CSV needs cu_num (the CU / SM count): set multiprocessors of the target")
    top = tuned_best(df, best)
    if top.empty:
        raise HarnessError("no shape has an ok kernel result: nothing to write to an aiter blockscale CSV")
    out = pd.DataFrame([_row(r, meta) for _, r in top.iterrows()], columns=COLUMNS)
    out = out.sort_values(["gfx", "cu_num", "N", "M", "K"], kind="stable")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_frame(out).to_csv(path, index=False, na_rep="Null")
    return path


def _row(r, meta: Meta) -> dict:
    config = config_of(r)
    M, N, K = int(r["M"]), int(r["N"]), int(r["K"])
    us = round(deciding_time(r) / 1e3, 4)
    tflops, bw = aiter_tflops_bw(M, N, K, us)
    err = plain(r.get("err_ratio"))
    return {"gfx": meta.arch, "cu_num": meta.cu_num, "M": M, "N": N, "K": K, "libtype": LIBTYPE,
            "kernelId": r["variant_id"], "splitK": aiter_split_k(config.get("SPLIT_K", 1)), "us": us,
            "kernelName": kernel_name(r["kernel"], config), "tflops": tflops, "bw": bw,
            "errRatio": round(float(err), 4) if err is not None else 0.0}


def read_tuned_csv(path) -> dict:
    """What aiter's ``get_CKGEMM_config`` builds from a tuned file: {(gfx, cu_num, M, N, K): row
    dict}, after aiter's ``_read_csv`` clean-up (stripped names and values, no ``Unnamed:``
    columns, no empty rows) and ``drop_duplicates``."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError("aiter tuned CSV %s does not exist" % path)
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise HarnessError("cannot read as CSV: %s" % exc, where=str(path))
    df.columns = df.columns.str.strip()
    df = df.loc[:, ~df.columns.str.startswith("Unnamed:")]
    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].apply(lambda v: v.strip() if isinstance(v, str) else v)
    df = df.dropna(how="all").drop_duplicates()
    keys = KEYS if "gfx" in df.columns else KEYS[1:]
    missing = [c for c in keys + ["kernelName", "splitK"] if c not in df.columns]
    if missing:
        raise HarnessError("not an aiter tuned CSV: no %s column" % ", ".join(missing), where=str(path))
    return df.set_index(keys).to_dict("index")
