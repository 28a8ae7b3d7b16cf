"""The fp8 block-scaled GEMM's decode kernel in CUDA C++ for sm90a (cuda_decode.cu), configs with
CUDA = 1 and SWAP_AB = 1: what the GPU compiler (harness/compile/cuda_cpp.py, NVRTC) needs to
build a config, and what the agent needs to launch it.

Why a kernel of its own (docs/fp8.md, "The decode kernel"): with a few tokens (M of 16 to 64) the
GEMM streams the weight once, and its time is B's bytes over the memory's bandwidth. The prefill
kernel's tile puts the tokens on the wgmma's 64-row side; this one computes C^T = B A^T, the
weight's rows on that side and the tokens on the narrow one (n = BLOCK_M), and splits K over
CTAs (SPLIT_K) so that every multiprocessor keeps copies in flight.

Config keys: BLOCK_M (16, 32 or 64 tokens), BLOCK_N (64 or 128 weight rows: one or two consumer
warpgroups), BLOCK_K 128, num_stages (the ring's slots), SPLIT_K (its partials reduced in order
through the agent's workspace, as the Triton kernel's). Rules (rules.py) prune the rest.
"""

from __future__ import annotations

import os

from . import cuda_kernel
from .cuda_kernel import SWIZZLE_128B, U8, tensor_map, wgmma_header
from .fp8 import SCALE_BLOCK

LANGUAGE = "cuda"  # built by harness/compile/cuda_cpp.py
SOURCE = os.path.join(cuda_kernel.HERE, "cuda_decode.cu")
ENTRY = "fp8_blockscale_decode"
BLOCK_M = (16, 32, 64)  # tokens: the wgmma's n
BLOCK_N = (64, 128)  # weight rows: 64 a consumer warpgroup


def swap_ab(config: dict) -> bool:
    """The config runs on this kernel."""
    return bool(config.get("CUDA")) and bool(config.get("SWAP_AB"))


def threads(config: dict) -> int:
    """The consumer warpgroups and the loader warp."""
    return config["BLOCK_N"] // 64 * 128 + 32


def defines(config: dict) -> dict:
    return {"BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"], "STAGES": config["num_stages"],
            "SPLIT_K": config.get("SPLIT_K", 1)}


def shared_bytes(config: dict) -> int:
    """The ring (tokens and weight rows a slot, and their scales: BLOCK_M of A and 16 bytes for
    B's), its barriers and flag, and 1024 bytes to align the ring to the 128-byte swizzle's
    1024-byte period."""
    stages, bm = config["num_stages"], config["BLOCK_M"]
    return stages * ((bm + config["BLOCK_N"]) * SCALE_BLOCK + 4 * bm + 16) + 16 * stages + 16 + 1024


def headers(config: dict) -> dict:
    return {"wgmma.h": wgmma_header(config["BLOCK_M"]), "sm90.cuh": cuda_kernel.sm90_header()}


def params(config: dict) -> list:
    """The parameters as the agent packs them: tensor maps of A (a tile of tokens) and B (a tile
    of weight rows), A's M-major scales, B's scales, C, the split-K workspace and counters by
    pointer, M, N, K and the row pitch of A's M-major scales."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    return [tensor_map("tm_a", "a", ("M", "K"), ("stride_am", "stride_ak"), (bm, SCALE_BLOCK), U8, 1, SWIZZLE_128B),
            tensor_map("tm_b", "b", ("N", "K"), ("stride_bn", "stride_bk"), (bn, SCALE_BLOCK), U8, 1, SWIZZLE_128B),
            {"name": "a_scale_t_ptr", "type": "*fp32"}, {"name": "b_scale_ptr", "type": "*fp32"},
            {"name": "c_ptr", "type": "*bf16"}, {"name": "ws_ptr", "type": "*fp32"},
            {"name": "lock_ptr", "type": "*i32"},
            {"name": "M", "type": "i32"}, {"name": "N", "type": "i32"}, {"name": "K", "type": "i32"},
            {"name": "stride_atk", "type": "i32"}]


def launch_facts(config: dict) -> dict:
    """What the agent launches the cubin with; the grid is fp8_blockscale.grid's (a CTA a tile and
    split of K)."""
    n = threads(config)
    return {"entry": ENTRY, "target": "cuda:90a", "threads": n, "block": [n, 1, 1], "num_warps": n // 32,
            "num_stages": config["num_stages"], "num_ctas": 1, "warp_size": 32, "shared": shared_bytes(config),
            "params": params(config), "constexprs": {}, "divisible": []}
