"""C = (A * a_scale) @ (B * b_scale)^T: MXFP4 inputs (packed e2m1, e8m0 scales per 1 x 32), bf16 output.

aiter's a4w4 blockscale GEMM (``gemm_a4w4``, the Triton ``gemm_afp4wfp4``): A (activations) is
M x K/2 bytes, two e2m1 codes per byte along K, low nibble first, with one e8m0 scale per 1 x 32
block (a_scale M x K/32); B (the weight) is N x K/2 packed likewise with b_scale N x K/32; C is
M x N bf16. GPU only (Triton ``tl.dot_scaled``): native on AMD gfx950 (scaled fp4 MFMAs),
decomposed to bf16 MMAs by Triton on NVIDIA sm90. The shape's dtype is ``mxfp4``; K is a
multiple of 32 (whole MX blocks).
"""

from __future__ import annotations

import numpy as np

from ...shapes import Problem
from .. import gemm_tiles
from ..base import Operand
from ..blockscale import block_scaled_kernel
from . import mxfp4, rules, seeds
from .mxfp4 import MX_BLOCK, cdiv

NAME = "a4w4_blockscale"
DTYPE = "mxfp4"
SCALE_DTYPE = "e8m0"  # one byte per scale; the Triton kernel takes it as *i8 bits

# The dequantized inputs are exact in bf16 (an e2m1 value times a power of two), the products
# exact in fp32, so the error is the fp32 accumulation (about 1e-6 relative) and the bf16
# rounding of C (2^-9 relative per element, a relative error norm of about 1e-3): 1e-2 leaves room
# for the accumulation order of a split K, and an element is outside when
# |c - ref| > atol + rtol * |ref| (aiter's checkAllclose defaults, its errRatio).
TOLERANCE = {"rel_err": 1e-2, "rtol": 1e-2, "atol": 1e-2}

GPU_SPACE = {
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_N": [32, 64, 128, 256],
    "BLOCK_K": [128, 256],  # unpacked values per step, as aiter's BLOCK_SIZE_K (bytes: half)
    "GROUP_M": [1, 8],
    "SPLIT_K": [1, 2, 4, 8, 16],
    "num_warps": [4, 8],
    "num_stages": [2, 3, 4],
}
GPU_SPACE_CUDA = {}
GPU_SPACE_HIP = {"waves_per_eu": [0, 2], "matrix_instr_nonkdim": [16]}


def strides(shape) -> dict:
    """Element strides of A (M x K/2 bytes), B (N x K/2), C (M x N) and the scales (K/32 a row)."""
    kb, ks = cdiv(shape.K, 2), cdiv(shape.K, MX_BLOCK)
    return {"stride_am": kb, "stride_ak": 1, "stride_bn": kb, "stride_bk": 1,
            "stride_cm": shape.N, "stride_cn": 1, "stride_asm": ks, "stride_ask": 1,
            "stride_bsn": ks, "stride_bsk": 1}


def make_data(shape, seed: int) -> dict:
    """Seeded inputs and the reference: random packed codes and e8m0 scales in 124..130; ``ref``
    is dequantize(A) @ dequantize(B)^T in float64, stored fp32."""
    M, N, K = shape.M, shape.N, shape.K
    rng = np.random.default_rng([seed, M, N, K])
    a, a_scale = mxfp4.random_operand(rng, M, K)
    b, b_scale = mxfp4.random_operand(rng, N, K)
    ref = reference(a, a_scale, b, b_scale)
    return {"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale, "ref": ref.astype(np.float32)}


def reference(a, a_scale, b, b_scale) -> np.ndarray:
    """float64 dequantize(A) @ dequantize(B)^T."""
    return mxfp4.dequantize(a, a_scale) @ mxfp4.dequantize(b, b_scale).T


def bytes_moved(shape) -> int:
    """Packed A and B (half a byte a value), one byte per scale, bf16 C, each once."""
    kb, ks = cdiv(shape.K, 2), cdiv(shape.K, MX_BLOCK)
    return (shape.M + shape.N) * (kb + ks) + 2 * shape.M * shape.N


PROBLEM = Problem(dims=("M", "N", "K"), dtypes=(DTYPE,), layouts=())
OPERANDS = (  # in the order the Triton kernel takes its pointers
    Operand("a", "input", lambda s: (s.M, cdiv(s.K, 2)), dtype="u8"),
    Operand("b", "input", lambda s: (s.N, cdiv(s.K, 2)), dtype="u8"),
    Operand("c", "output", ("M", "N"), dtype="bf16"),
    Operand("a_scale", "input", lambda s: (s.M, cdiv(s.K, MX_BLOCK)), dtype=SCALE_DTYPE),
    Operand("b_scale", "input", lambda s: (s.N, cdiv(s.K, MX_BLOCK)), dtype=SCALE_DTYPE),
    Operand("ref", "reference", ("M", "N"), dtype="fp32"),
)
# from aiter's a4w4_blockscale_untuned_gemm.csv (DeepSeek-V3 projections): decode, mid, prefill
DEFAULT_SHAPES = {"gpu": "32x7168x2048:mxfp4,256x4608x7168:mxfp4,4096x7168x2304:mxfp4"}

KERNEL = block_scaled_kernel(
    NAME, __doc__, __file__,
    make_data=make_data,
    strides=strides,
    bytes_moved=bytes_moved,
    grid=gemm_tiles.grid,
    operands=OPERANDS,
    problem=PROBLEM,
    tolerances={name: {DTYPE: value} for name, value in TOLERANCE.items()},
    default_shapes=DEFAULT_SHAPES,
    gpu_space=GPU_SPACE,
    gpu_space_cuda=GPU_SPACE_CUDA,
    gpu_space_hip=GPU_SPACE_HIP,
    gpu_rules=rules.GPU_RULES,
    seed_configs=seeds.seed_configs,
    gpu_library="dequantize+torch.matmul",
)
