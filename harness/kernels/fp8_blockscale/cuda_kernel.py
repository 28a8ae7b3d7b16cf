"""The fp8 block-scaled GEMM's CUDA C++ kernel for sm90a (cuda_kernel.cu), configs with CUDA = 1:
what the GPU compiler (harness/compile/cuda_cpp.py, NVRTC) needs to build a config, and what the
agent needs to launch it (the parameter list with its four host-made tensor maps).

Why CUDA C++ beside the Gluon kernel (docs/fp8.md, "The CUDA C++ kernel"): on the H200 the
256 x 128 tile (two 64-row waves a consumer warpgroup through one partial, 192 registers a
thread) beat every Gluon tile, and Gluon cannot hold its registers there; the epilogue through
TMA stores and descriptors kept in uniform registers made up most of the rest.

Config keys: BLOCK_M (128 or 256), BLOCK_N (a multiple of 16; BLOCK_M 256: at most 128; over
128 only 144, 160, 192 or 256: a tile spans at most two 128-column scale blocks; 256 runs as two
128-column halves through one partial), BLOCK_K 128,
num_stages (the ring's slots), GROUP_M, PIPE (two partials a consumer, BLOCK_M 128 and BLOCK_N
up to 128), num_ctas (2: clusters of two CTAs sharing B, or A with SHARE_A = 1, by multicast).
Rules (rules.py) prune the rest; this module assumes a config they passed.
"""

from __future__ import annotations

import functools
import os

from .fp8 import SCALE_BLOCK

LANGUAGE = "cuda"  # built by harness/compile/cuda_cpp.py
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "cuda_kernel.cu")
SM90_HEADER = os.path.join(HERE, "sm90.cuh")  # the PTX wrappers both CUDA kernels include
ENTRY = "fp8_blockscale_cuda"
THREADS = 384  # the loader warpgroup and two consumers
MAX_KS = 512  # the kernel's copy of a tile's B scales: K up to 65536
# cuTensorMapEncodeTiled's element types and swizzles
U8, FP32, BF16 = 0, 7, 9
SWIZZLE_NONE, SWIZZLE_128B = 0, 3


def cuda_kernel(config: dict) -> bool:
    """The config runs on a CUDA C++ kernel: this one, or cuda_decode.cu with SWAP_AB = 1."""
    return bool(config.get("CUDA"))


def defines(config: dict) -> dict:
    return {"BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"], "STAGES": config["num_stages"],
            "GROUP_M": config.get("GROUP_M", 8), "PIPE": int(bool(config.get("PIPE"))),
            "CTAS": config.get("num_ctas", 1), "SHARE_A": int(bool(config.get("SHARE_A")))}


def shared_bytes(config: dict) -> int:
    """The dynamic shared memory cuda_kernel.cu lays out: the ring (A, B and A's scales a slot),
    two tiles' B scales (two 128-column scale blocks each), the C tile of the TMA-store epilogue
    (BLOCK_N a multiple of 64), the barriers, and 1024 bytes to align the ring to the 128-byte
    swizzle's 1024-byte period."""
    bm, bn, stages = config["BLOCK_M"], config["BLOCK_N"], config["num_stages"]
    ring = stages * (bm * SCALE_BLOCK + bn * SCALE_BLOCK + bm * 4)
    d_off = -(-(ring + 2 * 2 * MAX_KS * 4) // 1024) * 1024
    return d_off + (bm * bn * 2 if bn % 64 == 0 else 0) + 2 * stages * 8 + 1024


def wgmma_header(block_n: int) -> str:
    """wgmma_m64nNk32: the wgmma of a 64 x block_n fp32 fragment, e4m3 x e4m3, both operands in
    shared memory (one asm statement: the fragment is block_n / 2 registers a thread)."""
    n = block_n // 2
    regs = ", ".join("%%%d" % i for i in range(n))
    outs = ", ".join('"+f"(d[%d])' % i for i in range(n))
    return ("#pragma once\n"
            "__device__ __forceinline__ void wgmma_m64nNk32(float* d, unsigned long long da, unsigned long long db,"
            " int scale_d) {\n"
            "  asm volatile(\"{\\n .reg .pred p;\\n setp.ne.b32 p, %%%d, 0;\\n"
            " wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3 {%s}, %%%d, %%%d, p, 1, 1;\\n}\\n\"\n"
            "    : %s\n    : \"l\"(da), \"l\"(db), \"r\"(scale_d));\n}\n") % (n + 2, block_n, regs, n, n + 1, outs)


def part_width(config: dict) -> int:
    """The columns of one wgmma: BLOCK_N, or a 256-wide tile's 128-column half."""
    return 128 if config["BLOCK_N"] == 256 else config["BLOCK_N"]


@functools.lru_cache(maxsize=None)
def sm90_header() -> str:
    """sm90.cuh's text, read once a process (every config's job carries it, and so its digest)."""
    with open(SM90_HEADER) as f:
        return f.read()


def headers(config: dict) -> dict:
    return {"wgmma.h": wgmma_header(part_width(config)), "sm90.cuh": sm90_header()}


def tensor_map(name, operand, shape, strides, block, elem_type, elem_size, swizzle) -> dict:
    return {"name": name, "type": "tensormap", "operand": operand, "shape": list(shape), "strides": list(strides),
            "block": list(block), "elem_type": elem_type, "elem_size": elem_size, "swizzle": swizzle}


def params(config: dict) -> list:
    """The kernel's parameters as the agent packs them (remote_agent/runners/gpu_launch.Params):
    tensor maps of A, B, A's M-major scales and C (views named by the shape's scalars), then B's
    scales and C by pointer and M, N, K. A multicast operand's box is a CTA's half of the tile."""
    bm, bn, ctas = config["BLOCK_M"], config["BLOCK_N"], config.get("num_ctas", 1)
    share_a = ctas if config.get("SHARE_A") else 1
    share_b = ctas if not config.get("SHARE_A") else 1
    return [tensor_map("tm_a", "a", ("M", "K"), ("stride_am", "stride_ak"), (bm // share_a, SCALE_BLOCK), U8, 1,
                       SWIZZLE_128B),
            tensor_map("tm_b", "b", ("N", "K"), ("stride_bn", "stride_bk"), (bn // share_b, SCALE_BLOCK), U8, 1,
                       SWIZZLE_128B),
            tensor_map("tm_sa", "a_scale_t", ("KS", "M"), ("stride_atk", "stride_atm"), (1, bm), FP32, 4,
                       SWIZZLE_NONE),
            tensor_map("tm_c", "c", ("M", "N"), ("stride_cm", "stride_cn"), (bm, 64), BF16, 2, SWIZZLE_128B),
            {"name": "b_scale_ptr", "type": "*fp32"}, {"name": "c_ptr", "type": "*bf16"},
            {"name": "M", "type": "i32"}, {"name": "N", "type": "i32"}, {"name": "K", "type": "i32"}]


def launch_facts(config: dict) -> dict:
    """What the agent launches the cubin with (the keys of the Triton compiler's launch facts that
    apply); the grid is the kernel's (fp8_blockscale.grid: one CTA or cluster a multiprocessor)."""
    return {"entry": ENTRY, "target": "cuda:90a", "threads": THREADS, "block": [THREADS, 1, 1],
            "num_warps": THREADS // 32, "num_stages": config["num_stages"], "num_ctas": config.get("num_ctas", 1),
            "warp_size": 32, "shared": shared_bytes(config), "params": params(config), "constexprs": {},
            "divisible": []}


def units(config: dict, M: int, N: int) -> int:
    """Units of work of the persistent grid: tiles, or cluster-sized pairs of them."""
    bm, bn, ctas = config["BLOCK_M"], config["BLOCK_N"], config.get("num_ctas", 1)
    num_m, num_n = -(-M // bm), -(-N // bn)
    if config.get("SHARE_A"):
        return num_m * -(-num_n // ctas)
    return -(-num_m // ctas) * num_n
