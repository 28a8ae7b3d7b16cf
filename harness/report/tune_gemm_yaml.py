"""Tuned configs as a YAML list in the style ROCm's ``tune_gemm.py`` writes and reads::

    # harness tuned configs
    # arch: gfx942
    # device: AMD Instinct MI300X
    # ...
    - {'M': 4864, 'N': 4096, 'K': 8192, 'rowMajorA': 'T', 'rowMajorB': 'N', 'dtype': 'fp16', 'BLOCK_SIZE_M': 256, ...} # TFLOPS: 402.11 time(us): 811.42

One shape and its best config per line. ``rowMajorA``/``rowMajorB`` follow tune_gemm
(``T`` = row-major as written; our ``NT`` is their ``TN``); config names use tune_gemm's spelling
(BLOCK_SIZE_M, GROUP_SIZE_M, SPLIT_K, num_warps, ...). The file is read back by
``tune_gemm.py --gemm_size_file F --compare_wo_tuning`` and by the harness itself
(``--shapes-format tune_gemm``; ``read_tuned_yaml`` for merging, times from the comments).

The consumer (ROCm/triton 4a7afd26, ``python/perf-kernels/tools/tune_gemm``): ``process_item``
takes M, N, K, rowMajorA, rowMajorB out of each entry and hands the rest to ``read_config``, which
``.get``s BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SPLIT_K, num_warps, num_stages,
waves_per_eu, matrix_instr_nonkdim, kpack and instruction_sched_variant; ``gen_configStr`` calls
``sched_variant.upper()``, so every one of them is written: a key the harness did not tune on this
target gets tune_gemm's neutral value (``TUNE_GEMM_DEFAULTS``; ``instruction_sched_variant``
``'none'``, the only value its tuning space has), and the header lists them (``# filled:``).
Other keys (``dtype``, the harness's NVIDIA-only switches at 0) ride along; tune_gemm ignores
them (its dtypes come from ``-dtype_a`` etc.). A shape whose best config uses a switch tune_gemm's
kernel does not have (TMA, SWAP_AB, PERSISTENT, STREAM_K) gets the fastest config it can run, with
a line. Only the matmul is written: tune_gemm's kernel has no block scales (fp8_blockscale is
refused with one line).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional

import pandas as pd
import yaml

from ..errors import HarnessError
from ..shapes.tune_gemm_yaml import TUNE_GEMM_DEFAULTS, major_value
from .common import HARNESS_ONLY, TRITON_NAMES, Meta, config_of, deciding_time, kernel_rows
from .pick import pick_rows, say_default

HEADER = "# harness tuned configs"
_META = re.compile(r"^#\s*(arch|device|cu_num|driver|toolchain|triton|filled)\s*:\s*(.*?)\s*$")


def accept(config: dict):
    """None where tune_gemm's kernel runs the config, else why not."""
    used = [k for k in HARNESS_ONLY if config.get(k)]
    return "uses %s, which tune_gemm's kernel does not have" % ", ".join(used) if used else None
_TIME = re.compile(r"#\s*TFLOPS:\s*([0-9.eE+-]+)\s+time\(us\):\s*([0-9.eE+-]+)")


def write_tuned_yaml(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, path,
                     say: Callable[[str], None] = say_default) -> Path:
    meta = Meta.coerce(meta, df)
    kernels = set(kernel_rows(df)["kernel"].astype(str))
    if kernels - {"matmul"}:
        raise HarnessError("--format yaml is tune_gemm's: its kernel is a plain GEMM (no block scales); "
                           "kernel %s has no tune_gemm equivalent" % ", ".join(sorted(kernels - {"matmul"})))
    top = pick_rows(df, best, accept, "yaml", say)
    if top.empty:
        raise HarnessError("no shape has an ok kernel result: nothing to write to a tune_gemm YAML")
    lines, filled = [], set()
    for _, row in top.iterrows():
        entry, fill = _entry(row)
        filled.update(fill)
        us = deciding_time(row) / 1e3
        tflops = 2.0 * entry["M"] * entry["N"] * entry["K"] / (us * 1e-6) / 1e12
        lines.append("- %s # TFLOPS: %s time(us): %s" % (_flow(entry), _fmt(tflops), _fmt(us)))
    head = [HEADER] + ["# %s: %s" % (k, "" if v is None else v) for k, v in meta.as_dict().items()]
    head.append("# filled: %s" % ", ".join(k for k in TUNE_GEMM_DEFAULTS if k in filled))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(head + lines) + "\n")
    return path


def _entry(row) -> tuple:
    """(one YAML entry, the tune_gemm keys filled with neutral values) of a results row."""
    entry = {"M": int(row["M"]), "N": int(row["N"]), "K": int(row["K"]),
             "rowMajorA": major_value(row["layout"][0]), "rowMajorB": major_value(row["layout"][1]),
             "dtype": str(row["dtype"])}
    entry.update({TRITON_NAMES.get(k, k): v for k, v in config_of(row).items()})
    filled = [k for k in TUNE_GEMM_DEFAULTS if k not in entry]
    for k in filled:
        entry[k] = TUNE_GEMM_DEFAULTS[k]
    return entry, filled


def read_tuned_yaml(path) -> tuple:
    """(entries DataFrame with a ``us`` column from the comments, metadata dict from the header)."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError("tuned YAML %s does not exist" % path)
    meta, rows = {}, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        m = _META.match(stripped)
        if m:
            meta[m.group(1)] = m.group(2)
            continue
        if not stripped.startswith("-"):
            continue
        try:
            item = yaml.safe_load(stripped)
        except yaml.YAMLError as exc:
            raise HarnessError("malformed YAML entry: %s" % (getattr(exc, "problem", None) or exc),
                               where="%s:%d" % (path, number))
        if not isinstance(item, list) or len(item) != 1 or not isinstance(item[0], dict):
            raise HarnessError("expected one '- {M: .., N: .., K: .., ...}' entry per line", where="%s:%d" % (path, number))
        entry = dict(item[0])
        t = _TIME.search(stripped)
        entry["us"] = float(t.group(2)) if t else None
        entry["_line"] = number
        rows.append(entry)
    return pd.DataFrame(rows), meta


def _flow(entry: dict) -> str:
    """A one-line mapping as tune_gemm writes it (Python's repr is valid YAML flow style)."""
    return "{" + ", ".join("%r: %r" % (k, v) for k, v in entry.items()) + "}"


def _fmt(value: float) -> str:
    if value < 0.0001:
        return "%.3e" % value
    if value > 1000:
        return "%.1f" % value
    return "%.2f" % value
