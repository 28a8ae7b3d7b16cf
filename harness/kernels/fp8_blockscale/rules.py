"""Pruning rules for the fp8 block-scaled GEMM: a config is pruned for a shape when a rule says so."""

from __future__ import annotations

from ...space import Rule
from ..gemm_tiles import (ACCUMULATOR_SPILLS, GROUP_M_USELESS, HIP_MULTIPROCESSORS, TMA_NEEDS_SM90, split_k_rules,
                          tile_rules)
from .fp8 import SCALE_BLOCK

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


def _block_k_splits_scale(c, s, t):
    # one K step must lie inside one 128-wide scale block: BLOCK_K divides 128
    return SCALE_BLOCK % c["BLOCK_K"] != 0


def _no_fp8_mma(c, s, t):
    # NVIDIA before sm89 and AMD other than gfx942 / gfx950 have no fp8 matrix instructions
    return native_format(t) is None


def _format_not_native(c, s, t):
    # gfx942 multiplies e4m3fnuz only (Triton would upcast e4m3fn to fp16 MMAs); NVIDIA e4m3fn only
    native = native_format(t)
    return native is not None and s.dtype != native


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
    *tile_rules(m_floor=16, n_floor=32),
    *split_k_rules(hip_multiprocessors=HIP_MULTIPROCESSORS, full_grid_fills="the multiprocessors"),
    GROUP_M_USELESS,
    TMA_NEEDS_SM90,
    Rule("tma_unaligned", "TMA = 1 where a row of A or B (K bytes) is not a multiple of 16 bytes", _tma_rows_unaligned),
    ACCUMULATOR_SPILLS,
]
