"""C = (A * a_scale) @ (B * b_scale)^T: fp8 e4m3 inputs with per-block fp32 scales, bf16 output.

The layout of DeepSeek-V3's fp8 inference and aiter's a8w8 blockscale GEMM: A (activations) is
M x K row-major with one scale per 1 x 128 block (a_scale M x cdiv(K, 128)); B (the weight) is
stored N x K row-major with one scale per 128 x 128 block (b_scale cdiv(N, 128) x cdiv(K, 128));
C is M x N bf16. GPU only (Triton). The shape's dtype is the e4m3 format of A and B: fp8e4m3fn
(NVIDIA sm89+, AMD gfx950) or fp8e4m3fnuz (AMD gfx942).
"""

from __future__ import annotations

import numpy as np

from ...shapes import Problem
from .. import gemm_tiles
from ..base import Operand
from ..blockscale import block_scaled_kernel
from . import cuda_decode, cuda_kernel, descriptors, fp8, rules, seeds
from .fp8 import SCALE_BLOCK, cdiv

NAME = "fp8_blockscale"

# the answer is bf16: its rounding alone is 2^-9 relative per element (rel. error norm about 1e-3);
# 1e-2 leaves room for the fp8 MMA's accumulation inside a K block, and an element is outside
# when |c - ref| > atol + rtol * |ref| (aiter's checkAllclose defaults, its errRatio)
TOLERANCE = {"rel_err": 1e-2, "rtol": 1e-2, "atol": 1e-2}

GPU_SPACE = {
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_N": [32, 64, 96, 128, 160, 192, 256],  # 96, 160, 192: the warp-specialized kernel's (WS = 1)
    "BLOCK_K": [64, 128],
    "GROUP_M": [1, 8],
    "SPLIT_K": [1, 2, 4, 8, 16],  # powers of two: aiter's tuned CSV records log2 of the split
    "num_warps": [4, 8],
    "num_stages": [2, 3, 4, 5, 6],  # 6: the warp-specialized kernel's ring on 96- and 128-wide tiles
}
# TMA: A and B through tensor descriptors (sm90+); WS: the persistent warp-specialized Gluon kernel (sm90)
# and the WS kernel's 192-row tiles (three consumer warpgroups) and 80-wide tiles (64 + 16: 10240
# columns in 128 tiles, one wave of 132 multiprocessors, for decode)
# OVERLAP: the WS kernel's epilogue under the next tile's first MMA (gluon_kernel._consumer_overlap);
# ORDERED: its consumers issue each K step's MMAs in turn (gluon_kernel._take_turn); PIPE: each
# consumer's promotion under its next step's MMA (two partials, gluon_kernel._consumer_pipelined);
# SMEM_SCALES: A's scales staged in shared memory 8 K steps at a time (1, gluon_kernel._chunk_scale) or
# copied by TMA into each ring slot from their M-major copy (2, gluon_kernel._ring_scales)
# num_ctas 2: the WS kernel in clusters of two CTAs, B multicast to both (gluon_kernel._loader)
# CUDA: the CUDA C++ kernel (cuda_kernel.cu; BLOCK_M 256: two 64-row waves a consumer), with num_ctas
# 2 sharing B, or A (SHARE_A = 1), between the cluster's CTAs; with SWAP_AB = 1 the CUDA decode kernel
# (cuda_decode.cu: C^T = B A^T, the weight's rows on the wgmma's 64-row side, split-K)
GPU_SPACE_CUDA = {"TMA": [0, 1], "WS": [0, 1], "CUDA": [0, 1], "OVERLAP": [0, 1], "ORDERED": [0, 1],
                  "PIPE": [0, 1], "SMEM_SCALES": [0, 1, 2], "num_ctas": [1, 2], "SHARE_A": [0, 1], "SWAP_AB": [0, 1],
                  "BLOCK_M": GPU_SPACE["BLOCK_M"] + [192, 256], "BLOCK_N": sorted(GPU_SPACE["BLOCK_N"] + [80])}
WS_SOURCE = "harness.kernels.fp8_blockscale.gluon_kernel:fp8_blockscale_ws_kernel"
CUDA_SOURCE = "harness.kernels.fp8_blockscale.cuda_kernel:" + cuda_kernel.ENTRY
DECODE_SOURCE = "harness.kernels.fp8_blockscale.cuda_decode:" + cuda_decode.ENTRY
GPU_SPACE_HIP = {
    "waves_per_eu": [0, 2],
    "matrix_instr_nonkdim": [16, 32],
    "kpack": [1, 2],
}


def strides(shape) -> dict:
    """Element strides of A (M x K), B (N x K), C (M x N), the two scale matrices and A's scales
    M-major (``a_scale_t``), and KS, the scale blocks along K (that copy's rows)."""
    sk = cdiv(shape.K, SCALE_BLOCK)
    return {"stride_am": shape.K, "stride_ak": 1, "stride_bn": shape.K, "stride_bk": 1,
            "stride_cm": shape.N, "stride_cn": 1, "stride_asm": sk, "stride_ask": 1,
            "stride_bsn": sk, "stride_bsk": 1, "stride_atm": 1, "stride_atk": shape.M, "KS": sk}


def make_data(shape, seed: int) -> dict:
    """Seeded inputs and the reference: A and B (uniform in [-1, 1]) quantized per block as
    DeepSeek-V3 does (scale = block amax / fp8 max, codes = round(x / scale)); ``ref`` is
    dequantize(A) @ dequantize(B)^T computed in float64 from the codes and scales, stored fp32."""
    M, N, K, fmt = shape.M, shape.N, shape.K, shape.dtype
    rng = np.random.default_rng([seed, M, N, K])
    a, a_scale = fp8.quantize_rows(rng.uniform(-1, 1, (M, K)), fmt)
    b, b_scale = fp8.quantize_blocks(rng.uniform(-1, 1, (N, K)), fmt)
    ref = reference(a, a_scale, b, b_scale, fmt)
    return {"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale, "ref": ref.astype(np.float32),
            "a_scale_t": np.ascontiguousarray(a_scale.T)}


def reference(a, a_scale, b, b_scale, fmt: str = "fp8e4m3fn") -> np.ndarray:
    """float64 dequantize(A) @ dequantize(B)^T."""
    a_deq = fp8.dequantize(a, a_scale, 1, SCALE_BLOCK, fmt)
    b_deq = fp8.dequantize(b, b_scale, SCALE_BLOCK, SCALE_BLOCK, fmt)
    return a_deq @ b_deq.T


def bytes_moved(shape) -> int:
    """fp8 A and B, fp32 scales, bf16 C, each once."""
    sk = cdiv(shape.K, SCALE_BLOCK)
    return (shape.M * shape.K + shape.N * shape.K + 4 * (shape.M * sk + cdiv(shape.N, SCALE_BLOCK) * sk)
            + 2 * shape.M * shape.N)


def grid(config: dict, shape, target=None) -> tuple:
    """One program per output tile and split of K (the Triton and CUDA decode kernels); the
    warp-specialized and CUDA prefill kernels' persistent grid: one program per multiprocessor (at
    most one per tile), or with num_ctas one cluster of CTAs per that many multiprocessors (the grid
    counts clusters, as the kernels' program ids do)."""
    if cuda_decode.swap_ab(config):
        return (gemm_tiles.tiles(config, shape), config.get("SPLIT_K", 1), 1)
    if cuda_kernel.cuda_kernel(config):
        ctas = config.get("num_ctas", 1)
        return (min(cuda_kernel.units(config, shape.M, shape.N), gemm_tiles.multiprocessors(target) // ctas), 1, 1)
    if descriptors.warp_specialized(config):
        ctas = config.get("num_ctas", 1)  # a cluster's CTAs share a tile of ctas x BLOCK_M rows
        tiles = gemm_tiles.tiles(dict(config, BLOCK_M=config["BLOCK_M"] * ctas), shape)
        return (min(tiles, gemm_tiles.multiprocessors(target) // ctas), 1, 1)
    return gemm_tiles.grid(config, shape, target)


PROBLEM = Problem(dims=("M", "N", "K"), dtypes=fp8.FORMATS, layouts=())
OPERANDS = (  # in the order the Triton kernel takes its pointers
    Operand("a", "input", ("M", "K")),
    Operand("b", "input", ("N", "K")),
    Operand("c", "output", ("M", "N"), dtype="bf16"),
    Operand("a_scale", "input", lambda s: (s.M, cdiv(s.K, SCALE_BLOCK)), dtype="fp32"),
    Operand("b_scale", "input", lambda s: (cdiv(s.N, SCALE_BLOCK), cdiv(s.K, SCALE_BLOCK)), dtype="fp32"),
    Operand("ref", "reference", ("M", "N"), dtype="fp32"),
    # A's scales again, M-major (as cuBLAS and DeepGEMM take them): the WS kernel's SMEM_SCALES 2
    # loads a K step's scales of a tile's rows with one TMA copy from here
    Operand("a_scale_t", "input", lambda s: (s.M, cdiv(s.K, SCALE_BLOCK)), dtype="fp32", transposed=lambda s: True,
            copy_of="a_scale"),
)
# DeepSeek-V3's linear layers: decode (M = 16) and prefill sizes
DEFAULT_SHAPES = {"gpu": "16x7168x2048,16x2112x7168,128x24576x1536,1024x7168x16384,4096x4096x7168,4096x2112x7168"}

KERNEL = block_scaled_kernel(
    NAME, __doc__, __file__,
    make_data=make_data,
    strides=strides,
    bytes_moved=bytes_moved,
    grid=grid,
    operands=OPERANDS,
    problem=PROBLEM,
    tolerances={name: {f: value for f in fp8.FORMATS} for name, value in TOLERANCE.items()},
    default_shapes=DEFAULT_SHAPES,
    gpu_space=GPU_SPACE,
    gpu_space_cuda=GPU_SPACE_CUDA,
    gpu_space_hip=GPU_SPACE_HIP,
    gpu_rules=rules.GPU_RULES,
    other_source=lambda config: (DECODE_SOURCE if cuda_decode.swap_ab(config)
                                 else CUDA_SOURCE if cuda_kernel.cuda_kernel(config)
                                 else WS_SOURCE if descriptors.warp_specialized(config) else None),
    tensor_descriptors=descriptors.tensor_descriptors,
    seed_configs=seeds.seed_configs,
    gpu_library="torch._scaled_mm",
)
