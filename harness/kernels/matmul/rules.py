"""Pruning rules for matmul: a config is pruned for a shape when a rule says so."""

from __future__ import annotations

from remote_agent.contract import DTYPE_BYTES

from ...space import Rule
from ...cpu_facts import cache_sizes, vector_isa
from ..gemm_tiles import (ACCUMULATOR_SPILLS, GROUP_M_USELESS, TMA_NEEDS_SM90, cdiv, multiprocessors, pow2_at_least,
                          shared_memory, split_k_rules, tile_rules, tiles)
from .descriptors import tensor_descriptors, warp_specialized, wide_tile
from .stream_k import pieces_per_tile

ELEM_BITS = {"fp32": 32, "fp16": 16, "bf16": 16}


def _lanes(t) -> int:
    return vector_isa(t).lanes(4)  # fp32 lanes: the micro-kernel computes in fp32 whatever the inputs


def _nr_off_vectors(c, s, t):
    return c["NR"] % _lanes(t) != 0


def vector_registers_needed(mr: int, nv: int) -> int:
    """Vector registers of an MR x NV-vector micro-tile: the accumulators, one broadcast of A and the NV
    vectors of B that every row reuses; a single row uses each B vector once, so two registers take
    B's loads in turn (x86 folds them into the FMA)."""
    return mr * nv + 1 + (nv if mr > 1 else 1)


def _registers_exceeded(c, s, t):
    isa = vector_isa(t)
    return vector_registers_needed(c["MR"], c["NR"] // isa.lanes(4)) > isa.registers


def _over_dim(param: str, dim: str, floor: int):
    # a block past the next power of two of its dimension repeats a smaller block of the space
    return lambda c, s, t: c[param] > max(floor, pow2_at_least(getattr(s, dim)))


def _b_panel_over_l1(c, s, t):
    # the KC x NR micro-panel of B is reused by every MR-row micro-kernel of an MC block, from L1 where it
    # fits; a panel somewhat over L1 still streams well from L2 (KC 256 x NR 64, 64 KiB, ran fastest on a
    # 48 KiB L1d at 128^3 to 384^3), one over twice L1d is not tried
    # (M within one MR tile: no reuse, no rule)
    return s.M > c["MR"] and c["KC"] * c["NR"] * 4 > 2 * cache_sizes(t).l1d


def _a_block_over_l2(c, s, t):
    # the packed MC x KC block of A is reread for every NR columns of the NC block from L2
    return c["MC"] * c["KC"] * 4 > cache_sizes(t).l2


def _pack_b_moot(c, s, t):
    # B is read in place only as fp32: stored K x N (layout ?N, its rows feed the micro-kernel) or N x K
    # with A stored M x K (layout NT, dot products along K); else PACK_B 0 repeats 1
    return not c["PACK_B"] and (s.dtype != "fp32" or s.layout not in ("NN", "TN", "NT"))


def _kc_moot_for_dots(c, s, t):
    # the dot products of PACK_B 0 on layout NT run over the whole of K: KC does not change them
    return not c["PACK_B"] and s.dtype == "fp32" and s.layout == "NT" and c["KC"] > 64


PACKED_RULES = [
    Rule("nr_off_vectors", "NR is not a multiple of the target's fp32 vector lanes", _nr_off_vectors),
    Rule("registers_exceeded", "MR x NR/lanes accumulators, NR/lanes vectors of B (two for one row) and a broadcast "
         "of A need more vector registers than the ISA has", _registers_exceeded),
    Rule("mr_exceeds_m", "MR larger than the next power of two of M", _over_dim("MR", "M", 1)),
    Rule("nr_exceeds_n", "NR larger than the next power of two of N (and than 16)", _over_dim("NR", "N", 16)),
    Rule("kc_exceeds_k", "KC larger than the next power of two of K (and than 64)", _over_dim("KC", "K", 64)),
    Rule("mc_exceeds_m", "MC larger than the next power of two of M (and than 16)", _over_dim("MC", "M", 16)),
    Rule("nc_exceeds_n", "NC larger than the next power of two of N (and than 64)", _over_dim("NC", "N", 64)),
    Rule("mc_under_mr", "MC smaller than MR", lambda c, s, t: c["MC"] < c["MR"]),
    Rule("nc_under_nr", "NC smaller than NR", lambda c, s, t: c["NC"] < c["NR"]),
    Rule("b_panel_over_l1", "the KC x NR fp32 micro-panel of B exceeds twice the core's L1 data cache",
         _b_panel_over_l1),
    Rule("a_block_over_l2", "the MC x KC fp32 block of A exceeds the core's L2 cache", _a_block_over_l2),
    Rule("pack_b_moot", "PACK_B 0 where B cannot be read in place (not fp32, or both A and B transposed): it "
         "repeats PACK_B 1", _pack_b_moot),
    Rule("kc_moot_for_dots", "KC over 64 with PACK_B 0 on layout NT (dot products over the whole of K): it repeats "
         "KC 64", _kc_moot_for_dots),
]


def _narrower_than_vector(c, s, t):
    # only where N itself fills a vector register: a narrower N has no full-vector tile at all
    vlen = t.vlen or 0
    bits = ELEM_BITS[s.dtype]
    return vlen > 0 and c["BLOCK_N"] * bits < vlen and s.N * bits >= vlen


# Triton-CPU matmuls (--frontend triton-cpu, --from-ir) are tiles of BLOCK_M x BLOCK_N x BLOCK_K
TILE_RULES = [
    *tile_rules(m_floor=4, n_floor=8, k_floor=8),
    Rule("narrower_than_vector", "a row of the tile (BLOCK_N elements) is narrower than one vector register (VLEN), "
         "and N is not", _narrower_than_vector),
    GROUP_M_USELESS,
]


def _for_configs_with(key: str, rule: Rule) -> Rule:
    """``rule`` judging only the configs that have ``key`` (the other family's rules let them pass)."""
    return Rule(rule.name, rule.why, lambda c, s, t: key in c and rule.prunes(c, s, t))


# the C++ template's packed GEMM (MR, NR, ...) and Triton-CPU's tiles (BLOCK_M, ...), each by its own rules
CPU_RULES = [_for_configs_with("MR", r) for r in PACKED_RULES] + [_for_configs_with("BLOCK_M", r) for r in TILE_RULES]


def _tma_rows_unaligned(c, s, t):
    # a tensor descriptor's row pitch must be a multiple of 16 bytes: the rows of every operand the
    # config views through one (descriptors.py; which operands does not depend on the orientation)
    a_t, b_t = s.layout[0] == "T", s.layout[1] == "T"
    rows = {"a": s.M if a_t else s.K, "b": s.K if b_t else s.N, "c": s.N}
    e = ELEM_BITS[s.dtype] // 8
    return any(rows[d.operand] * e % 16 for d in tensor_descriptors(c, a_t, b_t))


def _wide_tile_off_tma(c, s, t):
    # the tile in parts (BLOCK_N 3, 5 or 9 x 2^k, BLOCK_M 3 x 2^k) exists on the TMA path, no split and
    # no swap; on the persistent grid it is the warp-specialized kernel (rule warp_specialized_tile)
    if not wide_tile(c):
        return False
    bm, bn = c["BLOCK_M"], c["BLOCK_N"]  # an edge over its lowest set bit: 1 for a power of two
    return (bn // (bn & -bn) not in (1, 3, 5, 9) or bm // (bm & -bm) not in (1, 3) or not c.get("TMA")
            or c["SPLIT_K"] > 1 or bool(c.get("SWAP_AB")))


WARP_SPECIALIZED_TILE = (192, 192)  # (BLOCK_M, BLOCK_N): three warpgroups of 64 rows, 128 + 64 columns


def _warp_specialized_off_tile(c, s, t):
    # the Gluon kernel (gluon_kernel.py) runs 192 x 192 tiles of 16-bit inputs on num_warps 4 (the first
    # of its three consumer warpgroups), with Hopper's wgmma: sm90 only, no stream-K
    if not warp_specialized(c):
        return False
    arch = str(getattr(t, "gpu_arch", "") or "")
    return ((c["BLOCK_M"], c["BLOCK_N"]) != WARP_SPECIALIZED_TILE or c["num_warps"] != 4 or bool(c.get("STREAM_K"))
            or s.dtype not in ("fp16", "bf16") or getattr(t, "backend", "") != "cuda" or arch != "90")


def _warp_specialized_over_shared(c, s, t):
    # its shared memory is known: every ring slot (A's three 64-row blocks, B's two parts) and C's tile
    limit = shared_memory(t)
    if not warp_specialized(c) or not limit:
        return False
    e = DTYPE_BYTES[s.dtype]
    ring = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * e
    return ring + c["BLOCK_M"] * c["BLOCK_N"] * e > limit


def _accumulator_spills_one_warpgroup(c, s, t):
    # the warp-specialized kernel's accumulator is spread over three warpgroups besides num_warps
    return not warp_specialized(c) and ACCUMULATOR_SPILLS.prunes(c, s, t)


def _persistent_without_tma(c, s, t):
    return bool(c.get("PERSISTENT")) and not c.get("TMA")


def _persistent_with_split_or_swap(c, s, t):
    return bool(c.get("PERSISTENT")) and (c["SPLIT_K"] > 1 or bool(c.get("SWAP_AB")))


def _persistent_without_multiprocessors(c, s, t):
    return bool(c.get("PERSISTENT")) and not getattr(t, "multiprocessors", None)


def _swap_ab_off_skinny(c, s, t):
    # the swap puts BLOCK_M on the MMA's narrow side: it serves skinny tiles of skinny products
    return bool(c.get("SWAP_AB")) and (c["BLOCK_M"] > 64 or s.M > 128)


def _stream_k_without_persistent(c, s, t):
    return bool(c.get("STREAM_K")) and not c.get("PERSISTENT")


def idle_share(n_tiles: int, programs: int) -> float:
    """The share of the multiprocessors' time a persistent grid of ``programs`` leaves idle with
    ``n_tiles`` equal tiles: the empty places of the last wave over all places of all waves."""
    waves = -(-n_tiles // programs)
    return (waves * programs - n_tiles) / (waves * programs)


# stream-K costs a busy program an fp32 partial tile written (the last piece of a tile reads the
# pieces back and sums them) and a second pipeline (fill and drain); where waves quantized to
# whole waves idle the multiprocessors less than this, that cost eats the gain
STREAM_K_MIN_IDLE = 0.05


def _stream_k_little_idle(c, s, t):
    return bool(c.get("STREAM_K")) and idle_share(tiles(c, s), multiprocessors(t, 132)) < STREAM_K_MIN_IDLE


def _stream_k_unsplit(c, s, t):
    # one piece per stream-K tile (a last wave over half full, or one K step): STREAM_K = 0's work
    return bool(c.get("STREAM_K")) and pieces_per_tile(tiles(c, s), multiprocessors(t, 132),
                                                       cdiv(s.K, c["BLOCK_K"])) == 1


# matmul's rules count a target without `multiprocessors` as an H100 on AMD too (its seeds: an MI300X)
GPU_RULES = [
    # first the rules that read the config alone: cheap, and they prune two thirds of the space
    Rule("persistent_needs_tma", "PERSISTENT = 1 loads through tensor descriptors: TMA = 0 repeats TMA = 1",
         _persistent_without_tma),
    Rule("persistent_one_split", "PERSISTENT = 1 has neither split-K nor SWAP_AB", _persistent_with_split_or_swap),
    Rule("stream_k_needs_persistent", "STREAM_K > 0 shares the persistent grid's last tiles: PERSISTENT = 0 repeats "
         "STREAM_K = 0", _stream_k_without_persistent),
    Rule("wide_tile_needs_tma", "BLOCK_N not a power of two must be 3, 5 or 9 x 2^k and BLOCK_M 3 x 2^k (an MMA per "
         "part of the tile); such a tile needs TMA = 1 and has no split-K or SWAP_AB",
         _wide_tile_off_tma),
    Rule("warp_specialized_tile", "PERSISTENT = 1 on a tile in parts is the warp-specialized kernel: %d x %d, "
         "num_warps 4, fp16 or bf16, sm90, no stream-K" % WARP_SPECIALIZED_TILE, _warp_specialized_off_tile),
    *tile_rules(m_floor=16, n_floor=32, k_floor=32),
    *split_k_rules(hip_multiprocessors=132),
    GROUP_M_USELESS,
    TMA_NEEDS_SM90,
    Rule("tma_unaligned", "TMA = 1 where a row of A, B or C is not a multiple of 16 bytes", _tma_rows_unaligned),
    Rule("warp_specialized_over_shared", "the warp-specialized kernel's ring of num_stages A and B tiles and its C "
         "tile exceed the target's shared memory", _warp_specialized_over_shared),
    Rule("persistent_needs_multiprocessors", "PERSISTENT = 1 on a target without `multiprocessors`",
         _persistent_without_multiprocessors),
    Rule("stream_k_little_idle", "STREAM_K > 0 where whole waves of tiles leave the multiprocessors idle under %d %% "
         "of the time (none when the tiles are a multiple of the multiprocessors)" % round(100 * STREAM_K_MIN_IDLE),
         _stream_k_little_idle),
    Rule("stream_k_unsplit", "STREAM_K = 1 where the last wave's tiles get one K piece each (the wave over half "
         "full, or K one BLOCK_K step): it repeats STREAM_K = 0", _stream_k_unsplit),
    Rule("swap_ab_off_skinny", "SWAP_AB = 1 with BLOCK_M over 64 or M over 128 (the swap is for skinny products)",
         _swap_ab_off_skinny),
    Rule(ACCUMULATOR_SPILLS.name, ACCUMULATOR_SPILLS.why, _accumulator_spills_one_warpgroup),
]
