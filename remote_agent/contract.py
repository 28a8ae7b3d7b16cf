"""The two contracts between host and remote, in one place.

The host imports this module; the remote agent imports it too. It is standard library
only. docs/contracts.md describes every field in words.
"""

import math

MANIFEST_SCHEMA = 2  # 2: shapes carry dims, operands and scalars; the manifest carries checks
RESULTS_SCHEMA = 5
READABLE_RESULTS_SCHEMAS = (1, 2, 3, 4, 5)  # the host reads these; older files lack the columns marked 2 to 5 below
AGENT_VERSION = "0.1.0"

# Every row of the results CSV has one of these statuses.
OK = "ok"
WRONG_ANSWER = "wrong_answer"
CRASH = "crash"
TIMEOUT = "timeout"
LOAD_ERROR = "load_error"
COMPILE_ERROR = "compile_error"
COMPILE_TIMEOUT = "compile_timeout"
PRUNED = "pruned"
STATUSES = (OK, WRONG_ANSWER, CRASH, TIMEOUT, LOAD_ERROR, COMPILE_ERROR, COMPILE_TIMEOUT, PRUNED)

# Fixed columns of the results CSV, in order. Config columns (``cfg_<NAME>``) and
# profiler counter columns (``ctr_<event>``) follow them; the header of a file names them.
# M, N, K stand for the kernel's problem dimensions: a kernel with other dimensions (e.g.
# ROWS, COLS) has its own names in their place (``results_header(..., dims)``).
FIXED_COLUMNS = (
    "schema_version",
    "target",
    "kernel",
    "variant_id",
    "shape_id",
    "M",
    "N",
    "K",
    "dtype",
    "layout",
    "device",
    "status",
    "estimator",  # 3
    "time_ns",  # 3
    "time_ns_median",
    "time_ns_min",
    "time_ns_p20",
    "time_ns_p80",
    "iterations",
    "samples",  # 2
    "noise",  # 2
    "preempted",  # 4
    "pinned_cpu",  # 2
    "clock_mhz_before",  # 2
    "clock_mhz_after",  # 2
    "throttle",  # 2
    "remeasured",  # 2
    "tflops",
    "gbps",
    "rel_err",
    "max_abs_err",
    "err_ratio",
    "profiler",
    "library",  # 5
    "message",
    "artifact_sha256",
    "agent_version",
    "host",
    "timestamp",
)
# Columns schema 1 did not have: a schema-1 file reads as if they were empty.
ADDED_IN_SCHEMA_2 = ("samples", "noise", "pinned_cpu", "clock_mhz_before", "clock_mhz_after", "throttle",
                     "remeasured")
# Columns schema 2 did not have: in older files the median decided (``deciding_time``).
ADDED_IN_SCHEMA_3 = ("estimator", "time_ns")
# Columns schema 3 did not have.
ADDED_IN_SCHEMA_4 = ("preempted",)
# Columns schema 4 did not have: which library build and kernel core a library row ran.
ADDED_IN_SCHEMA_5 = ("library",)
ADDED_SINCE_SCHEMA_1 = ADDED_IN_SCHEMA_2 + ADDED_IN_SCHEMA_3 + ADDED_IN_SCHEMA_4 + ADDED_IN_SCHEMA_5
ADDED_SINCE_SCHEMA_2 = ADDED_IN_SCHEMA_3 + ADDED_IN_SCHEMA_4 + ADDED_IN_SCHEMA_5
ADDED_SINCE_SCHEMA_3 = ADDED_IN_SCHEMA_4 + ADDED_IN_SCHEMA_5
TIME = "time_ns"  # the column with the time that decides (ranks, winners, uplift, tuned files)
CONFIG_PREFIX = "cfg_"
COUNTER_PREFIX = "ctr_"

# Relative error norm (||C - ref|| / ||ref||) allowed per input dtype; an element is
# "outside tolerance" (err_ratio) when |c - ref| > ATOL + RTOL * |ref|.
REL_ERR_TOL = {"fp32": 1e-5, "fp16": 1e-2, "bf16": 2e-2}
ELEM_RTOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 5e-2}
ELEM_ATOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 5e-2}

# Bytes per element of every dtype an operand may have, and the bits of a quiet NaN of each
# floating dtype (outputs are filled with it before a kernel runs).
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8, "i32": 4, "i64": 8, "i8": 1, "u8": 1,
               "fp8e4m3fn": 1, "fp8e4m3fnuz": 1,
               "e8m0": 1}  # e8m0: MXFP4 block scales, 2^(byte - 127)
NAN_BITS = {"fp32": 0x7FC00000, "fp16": 0x7E00, "bf16": 0x7FC0, "fp64": 0x7FF8000000000000,
            "fp8e4m3fn": 0x7F, "fp8e4m3fnuz": 0x80}
MATMUL_DIMS = ("M", "N", "K")

# Lines the agent prints that the host reads (everything else is shown as is).
PROGRESS_PREFIX = "@@progress "


def job_key(variant_id, shape_id, device):
    """The identity of a results row: a resumed run skips keys already present."""
    return "%s|%s|%s" % (variant_id, shape_id, device)


def results_header(config_names, counter_names, dims=MATMUL_DIMS):
    """The header of a results file: the fixed columns with the kernel's problem dimensions in
    place of M, N, K, then config and counter columns."""
    fixed = list(FIXED_COLUMNS)
    at = fixed.index("M")
    fixed[at:at + len(MATMUL_DIMS)] = list(dims)
    return (
        fixed
        + [CONFIG_PREFIX + n for n in config_names]
        + [COUNTER_PREFIX + sanitize_counter(c) for c in counter_names]
    )


def sanitize_counter(name):
    """perf event names may hold ':' or '/'; CSV column names keep letters, digits, '_' and '.'."""
    out = []
    for ch in name:
        out.append(ch if (ch.isalnum() or ch in "_.") else "_")
    return "".join(out)


def deciding_time(row):
    """The time that decides of a results row (a dict, or a pandas row): ``time_ns`` (schemas 3 to 5:
    the estimator named in ``estimator`` of the samples), else ``time_ns_median`` (schemas 1
    and 2, where the median decided). None where neither holds a finite number. Every reader
    that ranks, picks winners, reports uplift or writes tuned files reads times through this
    (or harness.report.common.deciding_times for a whole frame)."""
    t = finite_float(row.get(TIME))
    return t if t is not None else finite_float(row.get("time_ns_median"))


def deciding_estimator(row):
    """``min`` or ``median``: the estimator whose time decides (``median`` for older files)."""
    name = row.get("estimator")
    return name if name in ("min", "median") else "median"


def finite_float(value):
    """A results field (or any value) as a float; None when empty, unparsable, NaN or infinite."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
