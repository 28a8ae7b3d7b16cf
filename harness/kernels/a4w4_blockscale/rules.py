"""Pruning rules for the MXFP4 GEMM: a config is pruned for a shape when a rule says so."""

from __future__ import annotations

from ...space import Rule
from ..gemm_tiles import ACCUMULATOR_SPILLS, GROUP_M_USELESS, HIP_MULTIPROCESSORS, split_k_rules, tile_rules
from .mxfp4 import MX_BLOCK

HIP_SCALED_MFMA = ("gfx950",)  # AMD arches with scaled fp4 MFMAs


def _no_scaled_dot(c, s, t):
    # tl.dot_scaled: native on gfx950; on NVIDIA decomposed to bf16 MMAs, built and run here on sm90+
    backend = getattr(t, "backend", "")
    arch = str(getattr(t, "gpu_arch", "") or "")
    if backend == "cuda":
        return not (arch.isdigit() and int(arch) >= 90)
    if backend == "hip":
        return arch not in HIP_SCALED_MFMA
    return True


def _k_not_mx(c, s, t):
    return s.K % MX_BLOCK != 0


GPU_RULES = [
    Rule("no_scaled_dot", "the target runs no MXFP4 dot here (NVIDIA sm90+ and AMD gfx950 do)", _no_scaled_dot),
    Rule("k_not_mx_block", "K is not a multiple of 32 (MXFP4 has one scale per 32 values along K)", _k_not_mx),
    *tile_rules(m_floor=16, n_floor=32),
    *split_k_rules(hip_multiprocessors=HIP_MULTIPROCESSORS, full_grid_fills="the multiprocessors"),
    GROUP_M_USELESS,
    ACCUMULATOR_SPILLS,
]
