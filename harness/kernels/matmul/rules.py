"""Pruning rules for matmul: a config is pruned for a shape when a rule says so."""

from __future__ import annotations

from ...space import Rule
from ..gemm_tiles import ACCUMULATOR_SPILLS, GROUP_M_USELESS, TMA_NEEDS_SM90, split_k_rules, tile_rules

ELEM_BITS = {"fp32": 32, "fp16": 16, "bf16": 16}


def _narrower_than_vector(c, s, t):
    # only where N itself fills a vector register: a narrower N has no full-vector tile at all
    vlen = t.vlen or 0
    bits = ELEM_BITS[s.dtype]
    return vlen > 0 and c["BLOCK_N"] * bits < vlen and s.N * bits >= vlen


CPU_RULES = [
    *tile_rules(m_floor=4, n_floor=8, k_floor=8),
    Rule("narrower_than_vector", "a row of the tile (BLOCK_N elements) is narrower than one vector register (VLEN), "
         "and N is not",
         _narrower_than_vector),
    GROUP_M_USELESS,
]


def _tma_rows_unaligned(c, s, t):
    # a tensor descriptor's row pitch must be a multiple of 16 bytes: rows of A, B (and C when persistent)
    if not c.get("TMA"):
        return False
    e = ELEM_BITS[s.dtype] // 8
    a_row = s.M if s.layout[0] == "T" else s.K
    b_row = s.K if s.layout[1] == "T" else s.N
    rows = (a_row, b_row, s.N) if c.get("PERSISTENT") else (a_row, b_row)
    return any(r * e % 16 for r in rows)


def _persistent_without_tma(c, s, t):
    return bool(c.get("PERSISTENT")) and not c.get("TMA")


def _persistent_with_split_or_swap(c, s, t):
    return bool(c.get("PERSISTENT")) and (c["SPLIT_K"] > 1 or bool(c.get("SWAP_AB")))


def _persistent_without_multiprocessors(c, s, t):
    return bool(c.get("PERSISTENT")) and not getattr(t, "multiprocessors", None)


def _swap_ab_off_skinny(c, s, t):
    # the swap puts BLOCK_M on the MMA's narrow side: it serves skinny tiles of skinny products
    return bool(c.get("SWAP_AB")) and (c["BLOCK_M"] > 64 or s.M > 128)


# matmul's rules count a target without `multiprocessors` as an H100 on AMD too (its seeds: an MI300X)
GPU_RULES = [
    *tile_rules(m_floor=16, n_floor=32, k_floor=32),
    *split_k_rules(hip_multiprocessors=132),
    GROUP_M_USELESS,
    TMA_NEEDS_SM90,
    Rule("tma_unaligned", "TMA = 1 where a row of A, B or C is not a multiple of 16 bytes", _tma_rows_unaligned),
    Rule("persistent_needs_tma", "PERSISTENT = 1 loads through tensor descriptors: TMA = 0 repeats TMA = 1",
         _persistent_without_tma),
    Rule("persistent_one_split", "PERSISTENT = 1 has neither split-K nor SWAP_AB", _persistent_with_split_or_swap),
    Rule("persistent_needs_multiprocessors", "PERSISTENT = 1 on a target without `multiprocessors`",
         _persistent_without_multiprocessors),
    Rule("swap_ab_off_skinny", "SWAP_AB = 1 with BLOCK_M over 64 or M over 128 (the swap is for skinny products)",
         _swap_ab_off_skinny),
    ACCUMULATOR_SPILLS,
]
