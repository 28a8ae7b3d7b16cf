"""The tensor descriptors of the fp8 block-scaled GEMM's warp-specialized kernel (WS = 1,
gluon_kernel.py), made on the host by the GPU agent (cuTensorMapEncodeTiled) as for the matmul
(harness/kernels/matmul/descriptors.py has the why and the Descriptor record).

A is M x K and B is N x K, both K-major (what the fp8 wgmma takes); A in blocks of 64 rows (a
consumer warpgroup's) x 128 K, B in its parts of BLOCK_N x 128 K, C (bf16) in blocks of 64 rows
and each part's width. Standard library only: the compiler, the tests and the GPU probe read it.
"""

from __future__ import annotations

from typing import List, Tuple

from ..matmul.descriptors import Descriptor

WS_ROWS = 64  # rows of a tile per consumer warpgroup
SCALE_CHUNK = 8  # SMEM_SCALES: the K steps of A scales a consumer stages in shared memory at a time


def warp_specialized(config: dict) -> bool:
    """The config runs on the warp-specialized Gluon kernel."""
    return bool(config.get("WS"))


def tile_parts(block_n: int) -> Tuple[int, int]:
    """(WIDE, NARROW) of BLOCK_N: one part (NARROW 0) for a power of two, else WIDE = BLOCK_N -
    NARROW with NARROW its lowest set bit (96 = 64 + 32, 160 = 128 + 32, 192 = 128 + 64); the
    kernel needs WIDE a power of two too (rule ws_config)."""
    narrow = block_n & -block_n
    return (block_n, 0) if narrow == block_n else (block_n - narrow, narrow)


def tensor_descriptors(config: dict, a_t: bool = False, b_t: bool = True) -> List[Descriptor]:
    """The descriptors a WS config takes (none otherwise: the Triton kernel makes its own on the
    device). a_t / b_t: unused, the operands' layout is fixed."""
    if not warp_specialized(config):
        return []
    wide, narrow = tile_parts(config["BLOCK_N"])
    bk = config["BLOCK_K"]
    ctas = config.get("num_ctas", 1)
    rows = WS_ROWS * ctas  # a consumer's rows of the cluster's tile
    split, whole = (((1, 0),), ((0, 0),)) if ctas > 1 else ((), ())  # A and C split, B multicast
    out = [Descriptor("a_desc", "a", ("M", "K"), ("stride_am", "stride_ak"), (rows, bk), split),
           Descriptor("b_desc", "b", ("N", "K"), ("stride_bn", "stride_bk"), (wide, bk), whole),
           Descriptor("c_desc", "c", ("M", "N"), ("stride_cm", "stride_cn"), (rows, wide), split)]
    if config.get("SMEM_SCALES") == 2:  # A's scales M-major (KS x M): a K step's 64 rows a copy
        out.append(Descriptor("as_desc", "a_scale_t", ("KS", "M"), ("stride_atk", "stride_atm"), (1, WS_ROWS)))
    if narrow:
        out += [Descriptor("b2_desc", "b", ("N", "K"), ("stride_bn", "stride_bk"), (narrow, bk), whole),
                Descriptor("c2_desc", "c", ("M", "N"), ("stride_cm", "stride_cn"), (rows, narrow), split)]
    return out
