"""Configs known to be good for matmul's shape classes: the first round of every search.

A seed is a config that won its class on an H200 (by hand at first, then in the default search's
runs and the probes); docs/notes/2026-11-26-gpu-runs.md has the measurements behind each rule.
The search starts from them, so a class whose good tile is rare in the space is not left to luck.

* **large** (the 128 x 256 tiles alone fill every multiprocessor): the persistent TMA kernel,
  128 x 256 x 64, 8 warps, 3-4 stages, GROUP_M 8, and the non-persistent TMA tile;
* **skinny** (M <= 64): the tile transposed (SWAP_AB) with a long BLOCK_K, 16 x 64 x 256 on 4
  warps, and the plain 32 x 128 x 64 / 64 x 64 x 128 tiles. These shapes are memory-bound: the TMA
  forms of the transposed tile and of 64 x 64 x 128 are seeded with as many stages as shared
  memory holds (``deepest``), which is what the search found on its own when it won;
* **split-K** (few output tiles, long K: the M x N grid leaves most multiprocessors idle): K split
  so that tiles x splits about fills the GPU;
* **medium**: the rest, the 128 x 256 TMA tile, 128 x 128 and 64 x 128 tiles; the 64 x 128 x 64
  TMA tile also as deep as shared memory holds (9 stages of fp16/bf16 on sm90), which pays on
  long K.

Across the classes (M over 64, NVIDIA), each where the shape's waves of tiles call for it:
* **wave-quantized** shapes: the persistent 128 x 128 and 128 x 256 tiles with STREAM_K = 1 where
  the stream-K plan (stream_k.py) spares each busy program at least 64 K steps of the last wave
  (the last wave at most half full, and K long enough that the steps spared pay for the partials
  and their reduction);
* the **192-wide** TMA tile, 128 x 192 x 64 on 4 warps and 4 stages, where it needs no more waves
  of tiles than the 128 x 256 tile (a 192-wide wave costs more than the 3/4 its work would say, so
  one more wave loses; one warpgroup beats two on this tile); and 64 x 192 x 64 on 4 warps and 7
  stages (as many as fit) where its waves hold less work per multiprocessor (waves x tile area)
  than those of the 128-row tiles 128, 192 and 256 wide: few rows of tiles, where the 128-row
  tiles leave half the GPU idle;
* the **288-wide** tile (256 + 32: two MMAs), 64 x 288 x 64 on 4 warps and 5 stages, where B is
  stored N x K (NT, TT) and its tiles fit one wave holding less work a multiprocessor than the
  waves of the 128-row tiles 128 to 256 wide; with B stored K x N (NN, TN) the 64 x 320 tile wins
  those shapes, and it is seeded there already (FEW_WAVES_CUDA);
* the **320-wide** tiles, 64 x 320 x 64 on 4 warps and 4 stages and 128 x 320 x 32 on 8 warps and 5
  stages, where their waves hold less work a multiprocessor than those of the 128-row tiles 128,
  192 and 256 wide; the 128 x 320 tile also wherever the 128 x 192 one is seeded: its 256-wide
  MMA does more per cycle than the 192-wide tile's 128-wide one, which can outweigh a last wave's
  idle places;
* the **192-row** tiles: 192 x 256 x 64 (128 + 64 rows) on 8 warps and 3 stages where its waves
  hold less work a multiprocessor than those of the 128 x 256 and 128 x 320 tiles, which load about
  as much a K step per element of C; and 192 x 128 x 64 on 4 warps and 4 stages (one warpgroup,
  three 128-wide MMAs on one B tile) where its tiles fit one wave holding no more work a
  multiprocessor than the waves of the 128-row tiles 128 to 256 wide;
* on Hopper, the **warp-specialized** 192 x 192 tile (the Gluon kernel, gluon_kernel.py),
  BLOCK_K 32 and 6 stages, where its waves hold no more work a multiprocessor than the waves of
  every 128-row tile 128 to 256 wide (where a 128-row tile's waves hold less, e.g. M = 1024 with a
  third-full last row of 192-row tiles, it loses);
* where few rows and columns of tiles leave most of the GPU idle and K is long (M of 65 to about
  200 on long-K weights: memory-bound or nearly), the 64 x 128 and 64 x 256 TMA tiles as deep as
  shared memory holds, with the most splits of K (2 to 4) that keep tiles x splits within one wave
  and 32 K steps a split.

On AMD (hip) the space has no SWAP_AB, TMA or PERSISTENT: the classes get plain tiles with the
stage count the AMD pipeliner uses (2). On CPU targets there are no seeds. Every seed is completed
with the first value of each parameter it does not name, and kept only when its values are in
the target's space and no pruning rule of the kernel rejects it for the shape.
"""

from __future__ import annotations

from typing import List

from remote_agent.contract import DTYPE_BYTES

from .. import gemm_tiles
from ..gemm_tiles import cdiv, complete_seeds, skinny_tile
from .rules import vector_registers_needed
from .stream_k import steps_saved

DEEPEST = "deepest"  # num_stages of a seed: as many stages as the target's shared memory holds (deepest())

LARGE_CUDA = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, TMA=1, PERSISTENT=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4, TMA=1, PERSISTENT=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, TMA=1),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, TMA=1, PERSISTENT=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
]
MEDIUM_CUDA = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, TMA=1, PERSISTENT=1),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4, TMA=1, PERSISTENT=1),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4, TMA=1),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=DEEPEST, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4),
]
LARGE_HIP = [
    dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=2, kpack=2),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=2, kpack=2),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=2, kpack=2),
]
MEDIUM_HIP = [
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=2, kpack=2),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=2, kpack=2),
]


STREAM_K_CUDA = [  # the persistent tiles of the prefill shapes, seeded with STREAM_K = 1
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4, TMA=1, PERSISTENT=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, TMA=1, PERSISTENT=1),
]
# K steps the stream-K phase must spare each busy program to be seeded: the partial tile it
# writes, the reduction and the second pipeline cost about as much as tens of steps
STREAM_K_MIN_STEPS_SAVED = 64


def _swizzled(seed: dict, shape) -> dict:
    """``seed`` with GROUP_M 1 where one row of its tiles covers M (nothing to swizzle)."""
    return dict(seed, GROUP_M=seed["GROUP_M"] if shape.M > seed["BLOCK_M"] else 1)


def _stream_k_seeds(shape, multiprocessors: int) -> List[dict]:
    out = []
    for base in STREAM_K_CUDA:
        saved = steps_saved(gemm_tiles.tiles(base, shape), multiprocessors, cdiv(shape.K, base["BLOCK_K"]))
        if saved >= STREAM_K_MIN_STEPS_SAVED:
            out.append(_swizzled(dict(base, STREAM_K=1), shape))
    return out


WIDE_CUDA = dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4, TMA=1)
WIDER_CUDA = dict(BLOCK_M=128, BLOCK_N=320, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=5, TMA=1)
# seeded where B is stored N x K and its tiles fit one wave holding less work a multiprocessor than every
# 128-row tile 128 to 256 wide; with B stored K x N the 64 x 320 tile (FEW_WAVES_CUDA) won those shapes
ONE_WAVE_CUDA = dict(BLOCK_M=64, BLOCK_N=288, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=5, TMA=1)
# seeded where their waves hold less work a multiprocessor than those of every 128-row tile 128 to 256 wide
FEW_WAVES_CUDA = [
    dict(BLOCK_M=64, BLOCK_N=192, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=DEEPEST, TMA=1),
    dict(BLOCK_M=64, BLOCK_N=320, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4, TMA=1),
    WIDER_CUDA,
]


# seeded where its tiles fit one wave holding no more work a multiprocessor than the waves of every
# 128-row tile 128 to 256 wide: three MMAs 128 wide on one warpgroup (768x4096: 128 tiles)
ONE_WAVE_TALL_CUDA = dict(BLOCK_M=192, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4, TMA=1)
# seeded where its waves hold less work a multiprocessor than those of the 128 x 256 and 128 x 320 tiles,
# which load about as much a K step per element of C (1536x4096x14336: 128 tiles in one wave against
# two waves of either; it lost where the 128 x 320 tile fits one wave, 512x10240x8192)
TALL_CUDA = dict(BLOCK_M=192, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, TMA=1)


def _waves(shape, bm: int, bn: int, multiprocessors: int) -> int:
    return cdiv(cdiv(shape.M, bm) * cdiv(shape.N, bn), multiprocessors)


def _wave_work(shape, bm: int, bn: int, multiprocessors: int) -> int:
    """The work a multiprocessor is given, idle places of the last wave included: waves x tile area."""
    return _waves(shape, bm, bn, multiprocessors) * bm * bn


def _least_128_row_work(shape, multiprocessors: int) -> int:
    """The least work a multiprocessor is given by the 128-row tiles 128, 192 and 256 wide."""
    return min(_wave_work(shape, 128, bn, multiprocessors) for bn in (128, 192, 256))


def _wide_seeds(shape, multiprocessors: int) -> List[dict]:
    """The 128 x 192 and 128 x 320 tiles where the 128 x 192 tile needs no more waves than the 128 x 256
    tile; the 64 x 192, 64 x 320 and 128 x 320 tiles where their waves hold less work a multiprocessor
    than those of the 128 x 128, 128 x 192 and 128 x 256 tiles, the 64 x 288 tile where it does so in
    one wave and B is stored N x K, the 192 x 128 tile where its tiles fit one wave holding no more
    than those, and the 192 x 256 tile where its waves hold less than those of the 128 x 256 and 128 x
    320 tiles."""
    def work(c):
        return _wave_work(shape, c["BLOCK_M"], c["BLOCK_N"], multiprocessors)

    def one_wave(c):
        return _waves(shape, c["BLOCK_M"], c["BLOCK_N"], multiprocessors) == 1

    no_more_waves = _waves(shape, 128, 192, multiprocessors) <= _waves(shape, 128, 256, multiprocessors)
    out = [WIDE_CUDA, WIDER_CUDA] if no_more_waves else []
    least = _least_128_row_work(shape, multiprocessors)
    if shape.layout[1] == "T" and one_wave(ONE_WAVE_CUDA) and work(ONE_WAVE_CUDA) < least:
        out.append(ONE_WAVE_CUDA)
    out += [c for c in FEW_WAVES_CUDA if c not in out and work(c) < least]
    if one_wave(ONE_WAVE_TALL_CUDA) and work(ONE_WAVE_TALL_CUDA) <= least:
        out.append(ONE_WAVE_TALL_CUDA)
    if work(TALL_CUDA) < min(_wave_work(shape, 128, 256, multiprocessors), work(WIDER_CUDA)):
        out.append(TALL_CUDA)
    return [_swizzled(c, shape) for c in out]


WARP_SPECIALIZED_CUDA = dict(BLOCK_M=192, BLOCK_N=192, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=6, TMA=1,
                             PERSISTENT=1)


def _warp_specialized_seeds(shape, multiprocessors: int) -> List[dict]:
    """The warp-specialized 192 x 192 tile where its waves hold no more work a multiprocessor than the
    waves of every 128-row tile 128 to 256 wide (its rules keep it to sm90 and 16-bit inputs)."""
    if _wave_work(shape, 192, 192, multiprocessors) <= _least_128_row_work(shape, multiprocessors):
        return [_swizzled(WARP_SPECIALIZED_CUDA, shape)]
    return []


# 64-row TMA tiles as deep as shared memory holds, K split so that one wave holds their tiles
# several times: M over 64 with few rows and columns of tiles and a long K, memory-bound or nearly
# (96x2560x10240: 40 tiles of 64 x 128 in 3 splits; 192x3584x18944: 42 of 64 x 256 in 3)
SPLIT_WAVE_CUDA = [
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=DEEPEST, TMA=1),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=DEEPEST, TMA=1),
]
SPLIT_MIN_K_STEPS = 32  # K steps each split keeps at least


def _split_wave_seeds(shape, multiprocessors: int) -> List[dict]:
    """SPLIT_WAVE_CUDA's tiles with the most splits (2 to 4) that keep tiles x splits within one
    wave and SPLIT_MIN_K_STEPS K steps a split; none where the unsplit tiles fill half a wave or more."""
    out = []
    for base in SPLIT_WAVE_CUDA:
        tiles = gemm_tiles.tiles(base, shape)
        steps = cdiv(shape.K, base["BLOCK_K"])
        fits = [s for s in (2, 3, 4) if tiles * s <= multiprocessors and steps // s >= SPLIT_MIN_K_STEPS]
        if fits:
            out.append(_swizzled(dict(base, SPLIT_K=max(fits)), shape))
    return out


def _splits(tiles: int, multiprocessors: int) -> List[int]:
    """Split counts (2, 4, 8) that bring tiles x splits nearest to the multiprocessors, best first."""
    return sorted((2, 4, 8), key=lambda s: abs(tiles * s - multiprocessors))


def shape_class(shape, multiprocessors: int) -> str:
    """large, skinny, split_k or medium (see the module's docstring)."""
    if shape.M <= 64:
        return "skinny"
    if cdiv(shape.M, 128) * cdiv(shape.N, 256) >= multiprocessors:
        return "large"
    if cdiv(shape.M, 64) * cdiv(shape.N, 128) < multiprocessors // 2 and shape.K >= 2048:
        return "split_k"
    return "medium"


def _rule_seeds(shape, target, multiprocessors: int) -> List[dict]:
    hip = target.backend == "hip"
    kind = shape_class(shape, multiprocessors)
    stages = 2 if hip else 4
    if kind == "large":
        return LARGE_HIP if hip else LARGE_CUDA
    if kind == "medium":
        return MEDIUM_HIP if hip else MEDIUM_CUDA
    if kind == "skinny":
        bm = skinny_tile(shape.M)
        out = [] if hip else [
            dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=4, SWAP_AB=1),
            dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4, SWAP_AB=1),
            dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=DEEPEST, SWAP_AB=1, TMA=1),
            dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=DEEPEST, TMA=1),
        ]
        out += [dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=5 if not hip else 2),
                dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=6 if not hip else 2)]
        tiles = cdiv(shape.N, 64)
        if tiles < multiprocessors // 2:  # a few columns of tiles: split K too
            split = _splits(tiles, multiprocessors)[0]
            out.append(dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=stages,
                            SPLIT_K=split, **({} if hip else {"SWAP_AB": 1})))
        return out
    # split_k: tiles x splits about the multiprocessors; and the tile that won 128x4096x8192 NT unsplit
    out = [dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=6 if not hip else 2)]
    for bm, bn, bk in ((64, 128, 128), (64, 64, 128), (128, 128, 64)):
        tiles = cdiv(shape.M, bm) * cdiv(shape.N, bn)
        for split in _splits(tiles, multiprocessors)[:2]:
            out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=4, num_stages=stages,
                            SPLIT_K=split))
    return out


def deepest(seed: dict, shape, target, most: int) -> dict:
    """``seed`` with as many stages as the target's shared memory holds of its A and B tiles
    (num_stages x (BLOCK_M + BLOCK_N) x BLOCK_K elements; Triton allocates every stage on sm90), at
    most ``most``; with 4 where the target's shared memory is not known."""
    if seed.get("num_stages") != DEEPEST:
        return seed
    stage = (seed["BLOCK_M"] + seed["BLOCK_N"]) * seed["BLOCK_K"] * DTYPE_BYTES[shape.dtype]
    limit = gemm_tiles.shared_memory(target)
    return dict(seed, num_stages=max(1, min(most, limit // stage)) if limit else 4)


def seed_configs(shape, target) -> List[dict]:
    """The seeds of ``shape``'s class on ``target`` that are in its space and pass every rule."""
    from . import KERNEL

    if not target.is_gpu:
        return complete_seeds(cpu_seeds(shape, target), KERNEL, shape, target)
    multiprocessors = gemm_tiles.multiprocessors(target)
    seeds = _rule_seeds(shape, target, multiprocessors)
    if target.backend == "cuda" and shape.M > 64:
        seeds = (seeds + _stream_k_seeds(shape, multiprocessors) + _wide_seeds(shape, multiprocessors)
                 + _split_wave_seeds(shape, multiprocessors) + _warp_specialized_seeds(shape, multiprocessors))
    most = max(KERNEL.space_for(target)["num_stages"])
    return complete_seeds([deepest(s, shape, target, most) for s in seeds], KERNEL, shape, target)


def register_tiles(isa) -> List[tuple]:
    """(MR, NR) micro-tiles that fill the ISA's vector registers: MR x NR/lanes accumulators, NR/lanes
    vectors of B and one broadcast, widest rows of C first (fewest broadcasts per FMA), then the
    tallest tiles for each narrower width."""
    from . import CPU_SPACE

    lanes, out = isa.lanes(4), []
    for nv in (4, 3, 2, 1):
        if nv * lanes not in CPU_SPACE["NR"]:
            continue
        fits = [mr for mr in CPU_SPACE["MR"] if mr > 1 and vector_registers_needed(mr, nv) <= isa.registers]
        if fits:
            out.append((max(fits), nv * lanes))
    return out


def _block(values, want: int, dim: int, floor: int) -> int:
    """The space's value for a cache block of ``want`` on a dimension of ``dim``: the smallest that
    covers the dimension where that is less (the rules prune larger ones as repeats)."""
    cap = max(floor, gemm_tiles.pow2_at_least(dim))
    return min((v for v in values if v >= min(want, cap)), default=max(values))


def _a_block_in_l1(target, kc: int) -> int:
    """MC for ``kc``: the most rows of A whose packed MC x KC fp32 block takes at most a quarter of
    the core's L1d (at least the space's smallest MC)."""
    from ...cpu_facts import cache_sizes
    from . import CPU_SPACE

    quarter = cache_sizes(target).l1d // 4
    return max([v for v in CPU_SPACE["MC"] if v * kc * 4 <= quarter] or [min(CPU_SPACE["MC"])])


DOT_ROWS_MAX = 8  # rows of A a dot-product tile takes at most (each B vector loaded once for all)
DOT_STREAMS = (1, 2, 3, 4)  # rows of B (N x K) a dot-product tile streams at once


def _dot_product_seeds(shape, isa, cfg) -> List[dict]:
    """B stored N x K read in place (PACK_B 0, few rows of A): C as dot products along K, MR rows
    of A against NR/lanes rows of B, one vector accumulator each. Each row of B is a stream of its
    own, K floats from the next, so the tile takes its accumulators from A's rows (every B vector
    loaded once for all of them: as many rows as M gives, up to DOT_ROWS_MAX) and streams one to
    four rows of B at once: more streams alias in L1 where K x 4 bytes is a multiple of 4 KiB and
    outrun the prefetchers. Where the blocks of B pay off depends on N and K, so NC 64 (a row
    block of B that stays in L1 over a KC step) and NC 1024 are both seeded; KC 64, MC 16."""
    from . import CPU_SPACE

    lanes = isa.lanes(4)
    mr = min((v for v in CPU_SPACE["MR"] if v >= min(shape.M, DOT_ROWS_MAX)), default=DOT_ROWS_MAX)
    return [cfg(mr, streams * lanes, 64, 16, nc, 0) for streams in DOT_STREAMS for nc in (64, 1024)
            if streams * lanes in CPU_SPACE["NR"] and vector_registers_needed(mr, streams) <= isa.registers]


def cpu_seeds(shape, target) -> List[dict]:
    """The packed CPU GEMM's rules of thumb: each register tile that fills the ISA's registers with
    cache blocks after BLIS (KC 256, MC 128, NC 1024, or less on smaller dimensions), packed B and
    B read in place (PACK_B 1 and 0). B read in place from rows (stored K x N) is not held in a
    packed panel, so there the packed A block is what the micro-kernels share: it gets MC rows
    that keep it in a quarter of L1 (``_a_block_in_l1``; 16 rows at KC 128 or 256 on a 48 KiB
    L1d) instead of BLIS's L2-sized 128. For few rows of A, B read in place first (decode: packing
    B costs as much as the product there): on B stored N x K the dot-product tiles
    (``_dot_product_seeds``), else also the tile as tall as M (next value of the space), as wide as
    the registers allow, with longer KC and NC."""
    from ...cpu_facts import vector_isa
    from . import CPU_SPACE

    isa = vector_isa(target)
    small_m = shape.M <= 16

    def cfg(mr, nr, kc, mc, nc, pb):
        return {"MR": mr, "NR": nr, "KC": _block(CPU_SPACE["KC"], kc, shape.K, 64),
                "MC": _block(CPU_SPACE["MC"], mc, shape.M, 16), "NC": _block(CPU_SPACE["NC"], nc, shape.N, 64),
                "PACK_B": pb}

    in_place_mc = _a_block_in_l1(target, _block(CPU_SPACE["KC"], 256, shape.K, 64)) if shape.layout[1] == "N" else 128
    seeds = [cfg(mr, nr, 256, 128 if pb else in_place_mc, 1024, pb) for mr, nr in register_tiles(isa)
             for pb in ((0, 1) if small_m else (1, 0))]
    dots = shape.layout == "NT" and shape.dtype == "fp32" and shape.M <= 32
    if dots:
        seeds += _dot_product_seeds(shape, isa, cfg)
    if small_m and not dots:
        mr = min((v for v in CPU_SPACE["MR"] if v >= shape.M), default=max(CPU_SPACE["MR"]))
        widths = [nr for nr in CPU_SPACE["NR"] if nr % isa.lanes(4) == 0
                  and vector_registers_needed(mr, nr // isa.lanes(4)) <= isa.registers]
        for nr in sorted(widths, reverse=True)[:2]:  # the widest rows of C the registers hold
            seeds += [cfg(mr, nr, kc, 16, nc, 0) for kc in (64, 256) for nc in (1024, 4096)]
    return seeds
