"""Pruning rules for matmul: a config is pruned for a shape when a rule says so."""

from __future__ import annotations

from ...space import Rule

ELEM_BITS = {"fp32": 32, "fp16": 16, "bf16": 16}


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tile_m_too_big(c, s, t, floor=4):
    return c["BLOCK_M"] > max(floor, _pow2_at_least(s.M))


def _tile_n_too_big(c, s, t, floor=8):
    return c["BLOCK_N"] > max(floor, _pow2_at_least(s.N))


def _tile_k_too_big(c, s, t, floor=8):
    # the kernels mask the K tail: BLOCK_K up to the next power of two of K serves any K
    return c["BLOCK_K"] > max(floor, _pow2_at_least(s.K))


def _narrower_than_vector(c, s, t):
    # only where N itself fills a vector register: a narrower N has no full-vector tile at all
    vlen = t.vlen or 0
    bits = ELEM_BITS[s.dtype]
    return vlen > 0 and c["BLOCK_N"] * bits < vlen and s.N * bits >= vlen


def _group_m_useless(c, s, t):
    return c["GROUP_M"] > 1 and _cdiv(s.M, c["BLOCK_M"]) <= 1


CPU_RULES = [
    Rule("tile_m_exceeds_dim", "BLOCK_M larger than the next power of two of M", _tile_m_too_big),
    Rule("tile_n_exceeds_dim", "BLOCK_N larger than the next power of two of N", _tile_n_too_big),
    Rule("tile_k_exceeds_dim", "BLOCK_K larger than the next power of two of K", _tile_k_too_big),
    Rule("narrower_than_vector", "a row of the tile (BLOCK_N elements) is narrower than one vector register (VLEN), "
         "and N is not",
         _narrower_than_vector),
    Rule("group_m_useless", "GROUP_M > 1 with a single row of tiles repeats GROUP_M = 1", _group_m_useless),
]


def _gpu_tile_m_too_big(c, s, t):
    return c["BLOCK_M"] > max(16, _pow2_at_least(s.M))


def _gpu_tile_n_too_big(c, s, t):
    return c["BLOCK_N"] > max(32, _pow2_at_least(s.N))


def _gpu_tile_k_too_big(c, s, t):
    return c["BLOCK_K"] > max(32, _pow2_at_least(s.K))


def _multiprocessors(t) -> int:
    return getattr(t, "multiprocessors", None) or 132


def _tiles(c, s) -> int:
    return _cdiv(s.M, c["BLOCK_M"]) * _cdiv(s.N, c["BLOCK_N"])


def _split_k_too_deep(c, s, t):
    # splits take whole BLOCK_K steps, ceil(steps / SPLIT_K) each: some split would get none
    steps = _cdiv(s.K, c["BLOCK_K"])
    return c["SPLIT_K"] > 1 and _cdiv(steps, _cdiv(steps, c["SPLIT_K"])) < c["SPLIT_K"]


def _split_k_on_big_grid(c, s, t):
    # Split-K pays off when the M x N grid alone leaves the GPU idle.
    return c["SPLIT_K"] > 1 and _tiles(c, s) >= _multiprocessors(t)


def _split_k_overfills(c, s, t):
    # more than four programs per multiprocessor: a smaller split already fills the GPU
    return c["SPLIT_K"] > 1 and _tiles(c, s) * c["SPLIT_K"] > 4 * _multiprocessors(t)


def _gpu_group_m_useless(c, s, t):
    return c["GROUP_M"] > 1 and _cdiv(s.M, c["BLOCK_M"]) <= 1


def _tma_needs_hopper(c, s, t):
    # device-side tensor descriptors (the bulk tensor copy engine) exist on NVIDIA sm90 and newer
    if not c.get("TMA"):
        return False
    arch = str(getattr(t, "gpu_arch", "") or "")
    return getattr(t, "backend", "") != "cuda" or not arch.isdigit() or int(arch) < 90


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


def _accumulator_spills(c, s, t):
    # the fp32 accumulator alone takes BLOCK_M x BLOCK_N / threads registers of each thread; past
    # 128 (the 128 x 256 tile on 8 warps) the next step is 256, more than a thread can hold
    warp = 64 if getattr(t, "backend", "") == "hip" else 32
    return c["BLOCK_M"] * c["BLOCK_N"] > 128 * c["num_warps"] * warp


GPU_RULES = [
    Rule("tile_m_exceeds_dim", "BLOCK_M larger than the next power of two of M", _gpu_tile_m_too_big),
    Rule("tile_n_exceeds_dim", "BLOCK_N larger than the next power of two of N", _gpu_tile_n_too_big),
    Rule("tile_k_exceeds_dim", "BLOCK_K larger than the next power of two of K", _gpu_tile_k_too_big),
    Rule("split_k_too_deep", "some split of K would get no BLOCK_K step", _split_k_too_deep),
    Rule("split_k_on_full_grid", "SPLIT_K > 1 where the M x N grid alone fills the GPU", _split_k_on_big_grid),
    Rule("split_k_overfills", "SPLIT_K > 1 with more than four programs per multiprocessor", _split_k_overfills),
    Rule("group_m_useless", "GROUP_M > 1 with a single row of tiles repeats GROUP_M = 1", _gpu_group_m_useless),
    Rule("tma_needs_sm90", "TMA = 1 (tensor descriptors) on a target that is not NVIDIA sm90 or newer",
         _tma_needs_hopper),
    Rule("tma_unaligned", "TMA = 1 where a row of A, B or C is not a multiple of 16 bytes", _tma_rows_unaligned),
    Rule("persistent_needs_tma", "PERSISTENT = 1 loads through tensor descriptors: TMA = 0 repeats TMA = 1",
         _persistent_without_tma),
    Rule("persistent_one_split", "PERSISTENT = 1 has neither split-K nor SWAP_AB", _persistent_with_split_or_swap),
    Rule("persistent_needs_multiprocessors", "PERSISTENT = 1 on a target without `multiprocessors`",
         _persistent_without_multiprocessors),
    Rule("swap_ab_off_skinny", "SWAP_AB = 1 with BLOCK_M over 64 or M over 128 (the swap is for skinny products)",
         _swap_ab_off_skinny),
    Rule("accumulator_spills", "the fp32 accumulator needs more than 128 registers per thread",
         _accumulator_spills),
]
