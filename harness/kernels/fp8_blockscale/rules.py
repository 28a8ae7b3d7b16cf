"""Pruning rules for the fp8 block-scaled GEMM: a config is pruned for a shape when a rule says so."""

from __future__ import annotations

from ...space import Rule
from .fp8 import SCALE_BLOCK, cdiv

# AMD arches with fp8 matrix instructions, and the e4m3 format each takes (NVIDIA sm89+: e4m3fn)
HIP_FP8 = {"gfx942": "fp8e4m3fnuz", "gfx950": "fp8e4m3fn"}


def native_format(target):
    """The e4m3 format the target's fp8 matrix instructions take (None: it has none)."""
    backend = getattr(target, "backend", "")
    arch = str(getattr(target, "gpu_arch", "") or "")
    if backend == "cuda":
        return "fp8e4m3fn" if arch.isdigit() and int(arch) >= 89 else None
    if backend == "hip":
        return HIP_FP8.get(arch)
    return None


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _tile_m_too_big(c, s, t):
    return c["BLOCK_M"] > max(16, _pow2_at_least(s.M))


def _tile_n_too_big(c, s, t):
    return c["BLOCK_N"] > max(32, _pow2_at_least(s.N))


def _block_k_splits_scale(c, s, t):
    # one K step must lie inside one 128-wide scale block: BLOCK_K divides 128
    return SCALE_BLOCK % c["BLOCK_K"] != 0


def _multiprocessors(t) -> int:
    return getattr(t, "multiprocessors", None) or (304 if getattr(t, "backend", "") == "hip" else 132)


def _tiles(c, s) -> int:
    return cdiv(s.M, c["BLOCK_M"]) * cdiv(s.N, c["BLOCK_N"])


def _split_k_too_deep(c, s, t):
    # splits take whole BLOCK_K steps, ceil(steps / SPLIT_K) each: some split would get none
    steps = cdiv(s.K, c["BLOCK_K"])
    return c["SPLIT_K"] > 1 and cdiv(steps, cdiv(steps, c["SPLIT_K"])) < c["SPLIT_K"]


def _split_k_on_full_grid(c, s, t):
    # split-K pays off when the M x N grid alone leaves multiprocessors idle
    return c["SPLIT_K"] > 1 and _tiles(c, s) >= _multiprocessors(t)


def _split_k_overfills(c, s, t):
    # more than four programs per multiprocessor: a smaller split already fills the GPU
    return c["SPLIT_K"] > 1 and _tiles(c, s) * c["SPLIT_K"] > 4 * _multiprocessors(t)


def _group_m_useless(c, s, t):
    return c["GROUP_M"] > 1 and cdiv(s.M, c["BLOCK_M"]) <= 1


def _accumulator_spills(c, s, t):
    # the fp32 accumulator alone takes BLOCK_M x BLOCK_N / threads registers of each thread
    warp = 64 if getattr(t, "backend", "") == "hip" else 32
    return c["BLOCK_M"] * c["BLOCK_N"] > 128 * c["num_warps"] * warp


def _no_fp8_mma(c, s, t):
    # NVIDIA before sm89 and AMD other than gfx942 / gfx950 have no fp8 matrix instructions
    return native_format(t) is None


def _format_not_native(c, s, t):
    # gfx942 multiplies e4m3fnuz only (Triton would upcast e4m3fn to fp16 MMAs); NVIDIA e4m3fn only
    native = native_format(t)
    return native is not None and s.dtype != native


def _tma_needs_hopper(c, s, t):
    # device-side tensor descriptors (the bulk tensor copy engine) exist on NVIDIA sm90 and newer
    arch = str(getattr(t, "gpu_arch", "") or "")
    return bool(c.get("TMA")) and (getattr(t, "backend", "") != "cuda" or not arch.isdigit() or int(arch) < 90)


def _tma_rows_unaligned(c, s, t):
    # a tensor descriptor's row pitch must be a multiple of 16 bytes: K fp8 elements for A and B
    return bool(c.get("TMA")) and s.K % 16 != 0


GPU_RULES = [
    Rule("no_fp8_mma", "the target has no fp8 matrix instructions (NVIDIA sm89+ and AMD gfx942 / gfx950 have)",
         _no_fp8_mma),
    Rule("fp8_format_not_native", "the shape's fp8 format is not the one the target's fp8 MMA takes "
         "(NVIDIA and gfx950: fp8e4m3fn; gfx942: fp8e4m3fnuz)", _format_not_native),
    Rule("block_k_splits_scale", "BLOCK_K does not divide the 128-wide scale block (a K step must have one scale)",
         _block_k_splits_scale),
    Rule("tile_m_exceeds_dim", "BLOCK_M larger than the next power of two of M", _tile_m_too_big),
    Rule("tile_n_exceeds_dim", "BLOCK_N larger than the next power of two of N", _tile_n_too_big),
    Rule("split_k_too_deep", "some split of K would get no BLOCK_K step", _split_k_too_deep),
    Rule("split_k_on_full_grid", "SPLIT_K > 1 where the M x N grid alone fills the multiprocessors",
         _split_k_on_full_grid),
    Rule("split_k_overfills", "SPLIT_K > 1 with more than four programs per multiprocessor", _split_k_overfills),
    Rule("group_m_useless", "GROUP_M > 1 with a single row of tiles repeats GROUP_M = 1", _group_m_useless),
    Rule("tma_needs_sm90", "TMA = 1 (tensor descriptors) on a target that is not NVIDIA sm90 or newer",
         _tma_needs_hopper),
    Rule("tma_unaligned", "TMA = 1 where a row of A or B (K bytes) is not a multiple of 16 bytes", _tma_rows_unaligned),
    Rule("accumulator_spills", "the fp32 accumulator needs more than 128 registers per thread", _accumulator_spills),
]
