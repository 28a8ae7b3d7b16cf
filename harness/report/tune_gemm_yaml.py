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
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import pandas as pd
import yaml

from ..errors import HarnessError
from ..shapes.tune_gemm_yaml import major_value
from .common import TRITON_NAMES, Meta, config_of, deciding_time, tuned_best

HEADER = "# harness tuned configs"
_META = re.compile(r"^#\s*(arch|device|cu_num|driver|toolchain|triton)\s*:\s*(.*?)\s*$")
_TIME = re.compile(r"#\s*TFLOPS:\s*([0-9.eE+-]+)\s+time\(us\):\s*([0-9.eE+-]+)")


def write_tuned_yaml(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, path) -> Path:
    meta = Meta.coerce(meta, df)
    top = tuned_best(df, best)
    if top.empty:
        raise HarnessError("no shape has an ok kernel result: nothing to write to a tune_gemm YAML")
    lines = [HEADER]
    for key, value in meta.as_dict().items():
        lines.append("# %s: %s" % (key, "" if value is None else value))
    for _, row in top.iterrows():
        entry = {"M": int(row["M"]), "N": int(row["N"]), "K": int(row["K"]),
                 "rowMajorA": major_value(row["layout"][0]), "rowMajorB": major_value(row["layout"][1]),
                 "dtype": str(row["dtype"])}
        entry.update({TRITON_NAMES.get(k, k): v for k, v in config_of(row).items()})
        us = deciding_time(row) / 1e3
        tflops = 2.0 * entry["M"] * entry["N"] * entry["K"] / (us * 1e-6) / 1e12
        lines.append("- %s # TFLOPS: %s time(us): %s" % (_flow(entry), _fmt(tflops), _fmt(us)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


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
