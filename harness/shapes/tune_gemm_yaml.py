"""Shapes from a YAML list in the style ROCm's ``tune_gemm.py --gemm_size_file`` reads::

    - {M: 4864, N: 4096, K: 8192, rowMajorA: T, rowMajorB: N}
    - {M: 512, N: 512, K: 512, rowMajorA: T, rowMajorB: T, BLOCK_SIZE_M: 64, ...}

``rowMajorA: T`` (true) means A is stored row-major as written (M x K): our ``N``;
``rowMajorA: N`` means column-major, i.e. stored K x M: our ``T``. B likewise (row-major K x N
is ``N``). YAML booleans work too. So tune_gemm's ``TN`` (row-major A, column-major B) is our
``NT``. A missing rowMajor key means row-major. An optional ``dtype`` (or ``dtype_a``) key gives
the dtype (fp16, bf16, fp32); otherwise the default dtype is used. Every other key (a tuned
config, as ``tune_gemm.py --compare_wo_tuning`` reads) is kept in ``Shape.extra``; ``config_of``
turns it back into harness config names.

A malformed entry is an error naming the file and line: a hand-written list is better refused
than tuned partly.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import HarnessError
from . import DTYPES, dedupe, make_shape

DIM_KEYS = ("M", "N", "K")
MAJOR_KEYS = ("rowMajorA", "rowMajorB")
DTYPE_KEYS = ("dtype", "dtype_a")
DTYPE_ALIASES = {
    "fp16": "fp16", "f16": "fp16", "half": "fp16", "float16": "fp16", "f16_r": "fp16",
    "bf16": "bf16", "bfloat16": "bf16", "bf16_r": "bf16",
    "fp32": "fp32", "f32": "fp32", "float": "fp32", "float32": "fp32", "f32_r": "fp32",
}
# tune_gemm.py's config key -> the harness config name (the reverse is used when writing)
CONFIG_NAMES = {
    "BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K",
    "GROUP_SIZE_M": "GROUP_M", "SPLIT_K": "SPLIT_K",
}
# every key tune_gemm's read_config takes, with the value that changes nothing (its tuning space
# has instruction_sched_variant 'none' only; waves_per_eu 0 is no hint; kpack 1; 16-wide MFMA)
TUNE_GEMM_DEFAULTS = {"GROUP_SIZE_M": 1, "SPLIT_K": 1, "num_stages": 2, "waves_per_eu": 0,
                      "matrix_instr_nonkdim": 16, "kpack": 1, "instruction_sched_variant": "none"}
SCHED_KEY = "instruction_sched_variant"


def looks_like(text: str) -> bool:
    """A YAML list: the first line that is not blank or a comment starts with '-' (a plain shapes
    list never does; hipBLASLt logs are told apart before this is asked)."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "---":
            continue
        return stripped.startswith("-")
    return False


def major_letter(value, key: str, where: str) -> str:
    """rowMajorX value -> our layout letter for that operand."""
    if value is True or (isinstance(value, str) and value.strip().upper() in ("T", "TRUE")):
        return "N"
    if value is False or (isinstance(value, str) and value.strip().upper() in ("N", "F", "FALSE")):
        return "T"
    raise HarnessError("%s: %r should be T (row-major) or N (column-major)" % (key, value), where=where)


def major_value(letter: str) -> str:
    """Our layout letter -> the rowMajorX value tune_gemm writes."""
    return "T" if letter == "N" else "N"


def read(path: Path, text: str, default_dtype: str) -> list:
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise HarnessError("malformed YAML: %s" % (getattr(exc, "problem", None) or exc),
                           where="%s:%d" % (path, mark.line + 1) if mark else str(path))
    if not isinstance(data, list) or not data:
        raise HarnessError("a tune_gemm shapes file is a YAML list of {M: .., N: .., K: .., rowMajorA: .., "
                           "rowMajorB: ..} entries", where=str(path))
    shapes = []
    for item, node in zip(data, root.value):
        where = "%s:%d" % (path, node.start_mark.line + 1)
        if not isinstance(item, dict):
            raise HarnessError("entry is not a mapping: %r" % (item,), where=where)
        missing = [k for k in DIM_KEYS if k not in item]
        if missing:
            raise HarnessError("entry lacks %s" % ", ".join(missing), where=where)
        layout = "".join(major_letter(item.get(k, "T"), k, where) for k in MAJOR_KEYS)
        dtype = default_dtype
        for key in DTYPE_KEYS:
            if key in item:
                name = str(item[key]).strip().lower()
                if name not in DTYPE_ALIASES:
                    raise HarnessError("%s: %r is not a dtype the harness runs (%s)" %
                                       (key, item[key], ", ".join(DTYPES)), where=where)
                dtype = DTYPE_ALIASES[name]
                break
        extra = tuple((k, v) for k, v in item.items() if k not in DIM_KEYS + MAJOR_KEYS + DTYPE_KEYS)
        shapes.append(make_shape(item["M"], item["N"], item["K"], dtype=dtype, layout=layout, extra=extra,
                                 where=where))
    return dedupe(shapes)


def config_of(shape) -> dict:
    """The config an entry carried (tune_gemm names mapped back to harness names)."""
    return {CONFIG_NAMES.get(k, k): v for k, v in shape.extra}


def harness_config(config: dict, names, where: str) -> dict:
    """A tune_gemm config (harness names) fitted to a kernel's parameters ``names``: tune_gemm's
    keys the kernel does not have are dropped where they hold tune_gemm's neutral value (they then
    change nothing), refused otherwise; ``instruction_sched_variant`` must be ``none`` (the harness
    kernel has no scheduling variants)."""
    out = dict(config)
    sched = out.pop(SCHED_KEY, "none")
    if str(sched).strip().lower() not in ("none", "default", ""):
        raise HarnessError("instruction_sched_variant %r: the harness kernel has no scheduling variants; only "
                           "'none' can be rebuilt" % (sched,), where=where)
    for key, neutral in TUNE_GEMM_DEFAULTS.items():
        name = CONFIG_NAMES.get(key, key)
        if name in out and name not in names and out[name] == neutral:
            del out[name]
    return out
