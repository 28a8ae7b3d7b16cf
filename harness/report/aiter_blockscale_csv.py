"""aiter's a8w8 blockscale tuned CSV (``a8w8_blockscale_tuned_gemm.csv``): read, never written.

aiter's tuner (csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py) writes, and
``aiter.ops.gemm_op_a8w8.get_CKGEMM_config`` reads (``pd.read_csv(f).drop_duplicates()
.set_index(["gfx", "cu_num", "M", "N", "K"]).to_dict("index")``), exactly these columns::

    gfx, cu_num, M, N, K, libtype, kernelId, splitK, us, kernelName, tflops, bw, errRatio

``gemm_a8w8_blockscale`` (aiter e4048607) then dispatches ``libtype`` ``ck`` or ``cktile`` and
asserts on anything else (``Unsupported libtype triton for gemm_a8w8_blockscale``); ``kernelName``
names one of aiter's compiled CK instances. A harness Triton config has no place in this file: its
configs go to aiter's Triton JSON (``report/triton_json.py``, family ``GEMM-A8W8_BLOCKSCALE``), which
``--format aiter-blockscale`` writes instead, saying so. What stays here: the reader (aiter's own
files are inputs to ``--merge`` and comparisons) and aiter's tflops / bw formulas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from ..errors import HarnessError

KEYS = ["gfx", "cu_num", "M", "N", "K"]
RESULTS = ["libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
COLUMNS = KEYS + RESULTS
LIBTYPES = ("ck", "cktile")  # what gemm_a8w8_blockscale dispatches


def aiter_tflops_bw(M: int, N: int, K: int, us: float) -> tuple:
    """TFLOP/s and GB/s as aiter's blockscale tuner computes them (inputs 1 byte, output 2)."""
    tflops = round(2 * M * N * K / (us * 1e6), 2)
    bw = round((M * K + N * K + 2 * M * N) / (us * 1e-6) / 1e9, 2)
    return tflops, bw


def write_tuned_csv(df: pd.DataFrame, best: Optional[pd.DataFrame] = None, meta=None, path=None) -> Path:
    """Refused: aiter's blockscale CSV dispatches CK kernels only (see the module text)."""
    raise HarnessError("aiter's a8w8 blockscale CSV takes libtype ck or cktile only (gemm_a8w8_blockscale asserts "
                       "'Unsupported libtype triton'); a Triton kernel's configs go to aiter's Triton JSON: "
                       "--format triton (GEMM-A8W8_BLOCKSCALE)")


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
