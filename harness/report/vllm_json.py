"""Block-fp8 GEMM configs in the files vLLM and SGLang load for their Triton w8a8 block-fp8 kernel.

The consumers (vLLM 007d5005 ``vllm/model_executor/layers/quantization/utils/fp8_utils.py``,
SGLang 008601fa ``python/sglang/srt/layers/quantization/fp8_kernel.py``):
``get_w8a8_block_fp8_configs(N, K, block_n, block_k)`` opens ``configs/<name>`` next to the module,
``{int(M): config}``, and ``w8a8_triton_block_scaled_mm`` takes ``configs[min(configs, key=lambda
x: abs(x - M))]`` (the nearest tuned M; a tie goes to the smaller) and launches its kernel with
``**config``. File names::

    vLLM:   N={N},K={K},device_name={device},dtype=fp8_w8a8,block_shape=[128,128].json
    SGLang: N={N},K={K},device_name={device},dtype=fp8_w8a8,block_shape=[128, 128].json

``device`` is the device name as torch reports it with spaces turned into ``_``
(``NVIDIA_H100_80GB_HBM3``, ``AMD_Instinct_MI300X``). A config holds ``BLOCK_SIZE_M``,
``BLOCK_SIZE_N``, ``BLOCK_SIZE_K``, ``GROUP_SIZE_M``, ``num_warps``, ``num_stages`` and, where
the harness tuned them (AMD targets), ``waves_per_eu``, ``matrix_instr_nonkdim``, ``kpack``
(Triton's HIP launch options, as vLLM's own AMD files carry them).

Their kernel has no split-K and no tensor descriptors, and loads one scale per BLOCK_SIZE_K step,
so BLOCK_SIZE_K must divide the 128-wide scale block: a shape whose best config needs SPLIT_K > 1,
TMA or BLOCK_K > 128 gets the fastest config their kernel runs, with a line saying what that
costs. Only the fp8_blockscale kernel has an equivalent there: vLLM and SGLang load no Triton
config file for a dense fp16/bf16 GEMM (those go to torch / hipBLASLt / cuBLAS), so ``--format
vllm`` refuses the matmul.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from ..errors import HarnessError
from .common import TRITON_NAMES, Meta, config_of, kernel_rows
from .pick import pick_rows, say_default

SCALE_BLOCK = (128, 128)  # the harness fp8_blockscale kernel's block_n, block_k
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
HIP_KEYS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")
CONSUMERS = {"vllm": "[%d,%d]", "sglang": "[%d, %d]"}  # how each spells block_shape in the name


def device_file_name(device: str) -> str:
    """The device part of the name: torch's device name, spaces to underscores."""
    return str(device).replace(" ", "_")


def file_name(N: int, K: int, device: str, consumer: str = "vllm") -> str:
    shape = CONSUMERS[consumer] % SCALE_BLOCK
    return "N=%d,K=%d,device_name=%s,dtype=fp8_w8a8,block_shape=%s.json" % (N, K, device_file_name(device), shape)


def accept(config: dict) -> Optional[str]:
    """None where vLLM's / SGLang's kernel runs the config, else why not."""
    if int(config.get("SPLIT_K", 1)) != 1:
        return "splits K %s ways (their kernel has no split-K)" % config.get("SPLIT_K")
    if config.get("TMA"):
        return "uses TMA descriptors (their kernel does not)"
    block_k = int(config.get("BLOCK_K", SCALE_BLOCK[1]))
    if block_k > SCALE_BLOCK[1] or SCALE_BLOCK[1] % block_k:
        return "has BLOCK_K %d (their kernel needs it to divide the 128-wide scale block)" % block_k
    return None


def lookup(configs: dict, M: int) -> dict:
    """What vLLM / SGLang do with a loaded file for a GEMM of M rows."""
    table = {int(k): v for k, v in configs.items()}
    return table[min(table.keys(), key=lambda x: abs(x - M))]


def to_config(config: dict) -> dict:
    out = {}
    for name, value in config.items():
        key = TRITON_NAMES.get(name, name)
        if key in KEYS or key in HIP_KEYS:
            out[key] = value
    return out


def write_vllm_json(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, out_dir, consumer: str = "vllm",
                    say: Callable[[str], None] = say_default) -> list:
    """One file per (N, K) of the fp8_blockscale results into ``out_dir``, named as ``consumer``
    (vllm or sglang) looks it up. Returns the paths; raises HarnessError when none can be written."""
    meta = Meta.coerce(meta, df)
    kernels = set(kernel_rows(df)["kernel"].astype(str))
    if kernels != {"fp8_blockscale"}:
        raise HarnessError("--format %s is for fp8_blockscale: vLLM and SGLang load Triton configs for their "
                           "block-fp8 GEMM only (no config file for a dense fp16/bf16 GEMM); these results are %s"
                           % (consumer, ", ".join(sorted(kernels))))
    if not meta.device:
        raise HarnessError("the %s file name holds the device name as torch reports it: the results name no "
                           "device" % consumer)
    top = pick_rows(df, best, accept, consumer, say)
    if top.empty:
        raise HarnessError("no shape is left for %s's block-fp8 configs (see the lines above)" % consumer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for (N, K), group in top.groupby(["N", "K"], sort=True):
        dtypes = sorted(set(group["dtype"]))
        for shape_id in sorted(set(group.loc[group["dtype"] != dtypes[0], "shape_id"])):
            say("%s: %s left out: one file per N, K and device holds %s configs" % (consumer, shape_id, dtypes[0]))
        group = group[group["dtype"] == dtypes[0]].sort_values("M", kind="stable")
        doc = {str(int(r["M"])): to_config(config_of(r)) for _, r in group.iterrows()}
        path = out_dir / file_name(int(N), int(K), meta.device, consumer)
        path.write_text(json.dumps(doc, indent=4) + "\n")
        written.append(path)
    return written


_NAME = re.compile(r"^N=(\d+),K=(\d+),device_name=(.+),dtype=fp8_w8a8,block_shape=\[(\d+), ?(\d+)\]\.json$")


def parse_file_name(name: str) -> Optional[tuple]:
    """(N, K, device, block_n, block_k) of a vLLM / SGLang block-fp8 config file name, else None."""
    m = _NAME.match(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5)))
