"""C = A @ B with fp32 accumulation; A is MxK, B is KxN, C is MxN (row-major).

The layout string gives the storage of A and B: ``N`` as written, ``T`` transposed
(``TN`` = A stored KxM, B stored KxN). Inputs are fp32, fp16 or bf16; C has the input dtype.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...shapes import Problem
from .. import gemm_tiles
from ..base import TEMPLATES, Kernel, Operand
from . import descriptors, rules, seeds

ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

# The packed CPU GEMM (templates/cpu/matmul_kernel.cpp.j2): the MR x NR register micro-tile (NR in fp32
# elements, a multiple of the target's vector lanes), the KC / MC / NC cache blocks, and whether B is
# read in place (PACK_B 0) or packed. The rules (rules.py) prune by the ISA's vector registers and the
# core's L1d / L2 (harness/cpu_facts.py).
CPU_SPACE = {
    "MR": [1, 2, 4, 6, 8, 12, 14, 16],
    "NR": [4, 8, 12, 16, 24, 32, 48, 64, 128, 256],  # 128, 256: one row of A (decode), B streamed
    "KC": [64, 128, 256, 384, 512],
    "MC": [16, 32, 64, 128, 256, 512],
    "NC": [64, 128, 256, 512, 1024, 2048, 4096],
    "PACK_B": [1, 0],
}
# the library build (lib:reference) of CPU targets: a register tile that fits every ISA's registers
CPU_REFERENCE = {"MR": 4, "NR": 16, "KC": 256, "MC": 64, "NC": 1024, "PACK_B": 1}

GPU_SPACE = {
    "BLOCK_M": [16, 32, 64, 128, 256],
    "BLOCK_N": [32, 64, 128, 256],
    "BLOCK_K": [32, 64, 128, 256],
    "GROUP_M": [1, 8],
    "SPLIT_K": [1, 2, 3, 4, 6, 8, 12, 16],  # deterministic split-K: any count
    "num_warps": [2, 4, 8],
    "num_stages": [2, 3, 4, 5, 6],
}
GPU_SPACE_CUDA = {  # NVIDIA: 144-, 192-, 288- and 320-wide tiles, 192-row tiles, the tile transposed for skinny
    # products, tensor descriptors, a persistent grid
    "BLOCK_M": [16, 32, 64, 128, 192, 256],  # 192 = 128 + 64: two MMAs a tile on the TMA path (wide_tile_needs_tma)
    "BLOCK_N": [32, 64, 128, 144, 192, 256, 288, 320],  # 144, 192, 288, 320: two MMAs a tile on the TMA path (rule
    # wide_tile_needs_tma)
    "SWAP_AB": [0, 1],
    "TMA": [0, 1],
    "PERSISTENT": [0, 1],
    "STREAM_K": [0, 1],
    # sm90's 227 KiB hold 7 stages of 64 x 192 x 64 tiles, 9 of 64 x 128 x 64 (fp16/bf16); the deeper
    # pipeline wins on long K; compile() prunes what does not fit
    "num_stages": [2, 3, 4, 5, 6, 7, 8, 9],
}
GPU_SPACE_HIP = {
    "waves_per_eu": [0, 2],
    "matrix_instr_nonkdim": [16, 32],
    "kpack": [1, 2],
}


PROBLEM = Problem(dims=("M", "N", "K"), dtypes=("fp32", "fp16", "bf16"), layouts=("NN", "NT", "TN", "TT"),
                  max_dim=65536)  # the README's range: edges masked, offsets 64-bit
OPERANDS = (
    Operand("a", "input", ("M", "K"), transposed=lambda s: s.layout[0] == "T"),
    Operand("b", "input", ("K", "N"), transposed=lambda s: s.layout[1] == "T"),
    Operand("c", "output", ("M", "N")),
    Operand("ref", "reference", ("M", "N"), dtype="fp32"),
)
DEFAULT_SHAPES = {"cpu": "64x64x64,128x128x128,256x256x128",
                  "gpu": "4096x4096x4096:fp16,64x4096x4096:fp16,1024x1024x1024:fp16"}


GLUON_SOURCE = "harness.kernels.matmul.gluon_kernel:matmul_ws_kernel"  # the 192 x 192 tile, warp-specialized


def strides(shape) -> dict:
    """Element strides of A (MxK), B (KxN) and C (MxN) for the shape's layout."""
    a_t, b_t = shape.layout[0] == "T", shape.layout[1] == "T"
    return {
        "stride_am": 1 if a_t else shape.K,
        "stride_ak": shape.M if a_t else 1,
        "stride_bk": 1 if b_t else shape.N,
        "stride_bn": shape.K if b_t else 1,
        "stride_cm": shape.N,
        "stride_cn": 1,
    }


def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """float array -> the bytes the kernel reads (bf16 as the high half of fp32, rounded)."""
    if dtype == "fp32":
        return x.astype(np.float32)
    if dtype == "fp16":
        return x.astype(np.float16)
    bits = x.astype(np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def from_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return x.astype(np.float32)


def make_data(shape, seed: int) -> dict:
    """Seeded inputs in their stored layout and the fp32 reference (computed in fp64)."""
    rng = np.random.default_rng([seed, shape.M, shape.N, shape.K])
    a = to_storage(rng.uniform(-1, 1, (shape.M, shape.K)), shape.dtype)
    b = to_storage(rng.uniform(-1, 1, (shape.K, shape.N)), shape.dtype)
    ref = from_storage(a, shape.dtype).astype(np.float64) @ from_storage(b, shape.dtype).astype(np.float64)
    a_stored = a.T if shape.layout[0] == "T" else a
    b_stored = b.T if shape.layout[1] == "T" else b
    return {
        "a": np.ascontiguousarray(a_stored),
        "b": np.ascontiguousarray(b_stored),
        "ref": ref.astype(np.float32),
    }


def bytes_moved(shape) -> int:
    e = ELEM_BYTES[shape.dtype]
    return e * (shape.M * shape.K + shape.K * shape.N + shape.M * shape.N)


def cpu_blocks(config: dict) -> tuple:
    """(MC, NC) as the CPU template uses them: multiples of MR and NR, at least one micro-tile."""
    mr, nr = config["MR"], config["NR"]
    return max(config["MC"] // mr, 1) * mr, max(config["NC"] // nr, 1) * nr


def cpu_grid(config: dict, shape, target=None) -> tuple:
    """The packed CPU GEMM: one program per NC columns of C; with threads > 1 the MC blocks of M are
    shared among up to ``threads`` programs per column block too (the launcher's OpenMP loop)."""
    mc, nc = cpu_blocks(config)
    threads = getattr(target, "threads", 1) or 1
    split_m = min(threads, gemm_tiles.cdiv(shape.M, mc)) if threads > 1 else 1
    return (gemm_tiles.cdiv(shape.N, nc), max(split_m, 1), 1)


def grid(config: dict, shape, target=None) -> tuple:
    if "NC" in config:
        return cpu_grid(config, shape, target)
    if config.get("STREAM_K"):  # every multiprocessor, also where there are fewer tiles: they share K steps
        return (target.multiprocessors, 1, 1)
    if config.get("PERSISTENT"):  # one program per multiprocessor walks the tiles (rules: the target has the count)
        return (min(gemm_tiles.tiles(config, shape), target.multiprocessors), 1, 1)
    return gemm_tiles.grid(config, shape, target)


KERNEL = Kernel(
    name="matmul",
    description=__doc__.strip().splitlines()[0],
    cpu_space=CPU_SPACE,
    cpu_rules=rules.CPU_RULES,
    cpu_template=TEMPLATES / "cpu" / "matmul_kernel.cpp.j2",
    make_data=make_data,
    operands=OPERANDS,
    problem=PROBLEM,
    default_shapes=DEFAULT_SHAPES,
    device_reference="matmul",
    device_plugin=Path(__file__).with_name("device.py"),
    cpu_library="openblas",
    strides=strides,
    flops=gemm_tiles.flops,
    bytes_moved=bytes_moved,
    grid=grid,
    gpu_space=GPU_SPACE,
    gpu_space_cuda=GPU_SPACE_CUDA,
    gpu_space_hip=GPU_SPACE_HIP,
    gpu_rules=rules.GPU_RULES,
    triton_module="harness.kernels.matmul.triton_kernel:matmul_kernel",
    other_source=lambda config: GLUON_SOURCE if descriptors.warp_specialized(config) else None,
    tensor_descriptors=descriptors.tensor_descriptors,
    seed_configs=seeds.seed_configs,
    reference_config=lambda target: None if target.is_gpu else dict(CPU_REFERENCE),
)
