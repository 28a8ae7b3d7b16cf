"""What every tuned-file writer shares: the metadata, library rows, the tuned best per shape,
config names, the time that decides.

The time that decides. Every reader that ranks rows, picks a best row, reports uplift or writes
a tuned file reads a row's time through ``deciding_times`` (a frame) or ``deciding_time`` (one
row): the ``time_ns`` column (schemas 3 to 5: the row's ``estimator``, min on CPU targets and median on
GPU targets, of its samples), or ``time_ns_median`` for files of schemas 1 and 2.

Library rows. The vendor library's time for a shape (cuBLAS/hipBLASLt through torch, OpenBLAS
or a plain reference build) is a row of the results CSV like any other, told apart by its
``variant_id``, which starts with ``lib:`` (e.g. ``lib:torch.matmul``, ``lib:hipblaslt``,
``lib:openblas``). Its ``cfg_*`` columns are empty. Tuned files never contain library rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Optional

import pandas as pd

from remote_agent.contract import CONFIG_PREFIX, COUNTER_PREFIX, MATMUL_DIMS, OK, TIME, deciding_time  # noqa: F401

from ..errors import HarnessError

LIB_PREFIX = "lib:"

# harness config name -> the Triton / aiter / tune_gemm spelling
TRITON_NAMES = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K",
                "GROUP_M": "GROUP_SIZE_M"}
# the harness kernels' own switches, which no consumer's kernel has: a config that sets one is
# not the consumer's kernel, and where they are 0 they stay out of its file (aiter launches its
# Triton kernel with **config, and Triton refuses a keyword that is neither a kernel argument nor a
# compile option); WS and the rest are the fp8 warp-specialized Gluon kernel's, CUDA and SHARE_A
# its CUDA C++ kernel's
HARNESS_ONLY = ("SWAP_AB", "TMA", "PERSISTENT", "STREAM_K",
                "WS", "OVERLAP", "ORDERED", "PIPE", "SMEM_SCALES", "CUDA", "SHARE_A")


@dataclass
class Meta:
    """Where tuned results hold: every tuned file records these."""

    arch: str = ""  # gfx942, sm90, riscv64 ...
    device: str = ""  # device name as the agent saw it
    cu_num: Optional[int] = None  # CU count (AMD) or SM count (NVIDIA); cores on a CPU board
    driver: str = ""
    toolchain: str = ""
    triton: str = ""  # Triton version ("" where none was used)

    @classmethod
    def coerce(cls, value, df: Optional[pd.DataFrame] = None) -> "Meta":
        """A Meta from a Meta, a dict (unknown keys refused) or None; a missing device name is
        taken from the results' ``device`` column when it holds one name."""
        if value is None:
            meta = cls()
        elif isinstance(value, Meta):
            meta = cls(**asdict(value))
        elif isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise HarnessError("unknown metadata key(s) %s (known: %s)" % (", ".join(unknown), ", ".join(sorted(known))))
            meta = cls(**value)
        else:
            raise TypeError("metadata must be a Meta or a dict, not %r" % type(value).__name__)
        if not meta.device and df is not None and "device" in df.columns:
            names = sorted({str(d) for d in df["device"].dropna().unique()})
            if len(names) == 1:
                meta.device = names[0]
        if meta.cu_num is not None and not (isinstance(meta.cu_num, float) and pd.isna(meta.cu_num)):
            try:
                meta.cu_num = int(meta.cu_num)
            except (TypeError, ValueError):
                raise HarnessError("cu_num %r is not a whole number (the CU or SM count)" % (meta.cu_num,))
        elif meta.cu_num is not None:
            meta.cu_num = None
        return meta

    def as_dict(self) -> dict:
        return asdict(self)


def deciding_times(df: pd.DataFrame) -> pd.Series:
    """The time that decides of every row (``deciding_time`` for a whole frame), NaN where none."""
    median = pd.to_numeric(df["time_ns_median"], errors="coerce") if "time_ns_median" in df.columns \
        else pd.Series(float("nan"), index=df.index)
    if TIME not in df.columns:
        return median
    return pd.to_numeric(df[TIME], errors="coerce").fillna(median)


def deciding_spreads(df: pd.DataFrame) -> pd.Series:
    """How far a row's deciding time may move between measurements: for rows the minimum decided,
    ``noise`` x time (the spread of the minima of its samples' blocks); else p80 - p20 of the
    samples."""
    times = deciding_times(df)
    spread = pd.to_numeric(df["time_ns_p80"], errors="coerce") - pd.to_numeric(df["time_ns_p20"], errors="coerce")
    if "estimator" not in df.columns or "noise" not in df.columns:
        return spread
    by_min = (df["estimator"] == "min") & pd.to_numeric(df["noise"], errors="coerce").notna()
    return spread.where(~by_min, pd.to_numeric(df["noise"], errors="coerce") * times)


def fastest_row(group: pd.DataFrame):
    """The row of ``group`` with the smallest deciding time."""
    return group.loc[deciding_times(group).idxmin()]


def is_library(df: pd.DataFrame) -> pd.Series:
    return df["variant_id"].astype(str).str.startswith(LIB_PREFIX)


def kernel_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[~is_library(df)]


def library_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[is_library(df)]


def config_columns(df: pd.DataFrame) -> list:
    return [c for c in df.columns if c.startswith(CONFIG_PREFIX)]


def counter_columns(df: pd.DataFrame) -> list:
    return [c for c in df.columns if c.startswith(COUNTER_PREFIX)]


def plain(value):
    """numpy scalars -> Python; integral floats (pandas turns int columns with gaps into
    floats) -> int; NaN -> None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        if value != value:
            return None
        if value.is_integer():
            return int(value)
    return value


def config_of(row) -> dict:
    """The config of a results row: cfg_ columns without the prefix, empty ones left out."""
    out = {}
    for col in row.index:
        if col.startswith(CONFIG_PREFIX):
            value = row[col]
            if value is None or (not isinstance(value, str) and pd.isna(value)):
                continue
            out[col[len(CONFIG_PREFIX):]] = plain(value)
    return out


def config_key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


def kernel_name(kernel: str, config: dict) -> str:
    """A readable, stable name of a config: matmul_BLOCK_M64_BLOCK_N128_..._num_warps4."""
    return "_".join([str(kernel)] + ["%s%s" % (k, v) for k, v in config.items()])


def dim_columns(df: pd.DataFrame) -> list:
    """The kernel's problem dimension columns of a results frame: those between ``shape_id`` and
    ``dtype``, where the results header puts them (matmul: M, N, K)."""
    cols = list(df.columns)
    if "shape_id" in cols and "dtype" in cols and cols.index("shape_id") < cols.index("dtype"):
        return cols[cols.index("shape_id") + 1:cols.index("dtype")]
    return [c for c in MATMUL_DIMS if c in cols]


def shape_order(df: pd.DataFrame) -> list:
    """Columns tuned files sort by: dtype, layout, then the dimensions with the first one last
    (matmul: N, K, M, so that the M buckets of one N x K lie together)."""
    dims = dim_columns(df)
    return ["dtype", "layout"] + dims[1:] + dims[:1]


def tuned_best(df: pd.DataFrame, best: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """The row a tuned file holds per shape: one ok, non-library row per shape_id, sorted by
    dtype, layout and dimensions (``shape_order``: matmul N, K, M).

    Without ``best``: every shape with an ok kernel row in ``df``, its fastest one. With ``best``
    (e.g. aggregate.best_per_shape, or uplift.keep_faster_than_library): exactly the shapes of
    ``best``, each with its row there; where that row is a library row, the fastest ok kernel
    row of ``df`` instead (a tuned file never holds a library row). Several devices: the
    fastest of their rows."""
    ok = kernel_rows(df[df["status"] == OK])
    fastest = {shape_id: fastest_row(group) for shape_id, group in ok.groupby("shape_id", sort=False)}
    if best is None:
        chosen = fastest
    else:
        given = best[best["status"] == OK] if "status" in best.columns else best
        chosen = {}
        for shape_id, group in given.groupby("shape_id", sort=False):
            kernels = kernel_rows(group)
            if len(kernels):
                chosen[shape_id] = fastest_row(kernels)
            elif shape_id in fastest:
                chosen[shape_id] = fastest[shape_id]
    if not chosen:
        return ok.iloc[0:0].copy()
    out = pd.DataFrame(list(chosen.values()))
    return out.sort_values(shape_order(df), kind="stable").reset_index(drop=True)


def require_columns(df: pd.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise HarnessError("%s needs results columns %s" % (what, ", ".join(missing)))


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may take for a formula (OWASP)


def safe_cell(value):
    """A value for a CSV cell that a spreadsheet will not run: text starting with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (OWASP's advice against CSV
    injection), unless it is a plain number (aiter's files hold ``-1``). Numbers, None and other
    values are returned as they are."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def safe_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``safe_cell`` applied to every text cell (numeric columns are left alone), for
    writing a CSV that people open in spreadsheets."""
    out = df.copy()
    for col in out.columns:
        if not pd.api.types.is_numeric_dtype(out[col]) and not pd.api.types.is_bool_dtype(out[col]):
            out[col] = out[col].map(safe_cell)
    return out
