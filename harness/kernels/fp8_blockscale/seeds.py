"""Configs known to be good for the fp8 block-scaled GEMM's shape classes: the first round of
every search (harness.strategies.seeded).

From aiter's tuned Triton configs for this kernel (aiter/ops/triton/configs/gemm/
gfx942-GEMM-A8W8_BLOCKSCALE-N=*-K=*.json) and the usual sm90 fp8 tiles (vLLM's and DeepSeek's
Triton fp8 GEMMs: BLOCK_K 128, one scale per K step):

* **skinny** (M <= 64, decode): the narrowest BLOCK_M that covers M, 64 or 128 columns, BLOCK_K
  128, 4 warps; where the columns of tiles leave most multiprocessors idle, K split so that tiles
  x splits about fills them (aiter: 16-row tiles with K split 7 to 14 ways for N=2112, K=7168);
* **large** (128 x 128 tiles alone fill every multiprocessor, prefill): 128 x 128 and 128 x 256
  tiles on 8 warps through TMA, and 64 x 128 on 4 warps;
* **medium**: 64 x 128 and 128 x 128 tiles, with a split of K where the tiles are few.

On sm90 the skinny class starts with the CUDA decode kernel (CUDA = 1, SWAP_AB = 1, cuda_decode.cu:
cuda_decode_seeds), the large class with the CUDA C++ kernel (CUDA = 1, cuda_kernel.cu: CUDA_LARGE),
the medium class with its 128 x 128 tile. On sm90 the large and medium classes also get the
persistent warp-specialized kernel (WS = 1, gluon_kernel.py), its BLOCK_N chosen by the waves it
takes (ws_seeds): of 96, 128, 160 and 192 columns (128 rows; 64 rows in the medium class), the two
with the least estimated time, where a tile costs its width plus a fixed 32 columns' worth and the
program count is the multiprocessors, and always 128 x 128; the stages are the most that fit 227
KiB of shared memory beside the C tile.

Large shapes also get the 192 x 128 WS tile (three consumers) and, where K has 32 steps of 128 or
more, 128 x 128 with PIPE = 1 (each promotion under the next step's MMA; a PIPE tile runs one MMA
step more than its K has, a cost of 1 / steps: on an H200 PIPE was 2 to 7 % faster at 56 to 128
steps and 4 % slower at 16) and 192 x 128 and 128 x 128 with SMEM_SCALES = 1 (A's scales staged
in shared memory: on an H200, staged 16 steps at a time, 4 to 15 % faster than the same tiles
without at 57 and 128 steps, within 1.5 % at 56 and 2 to 5 % slower at 12 and 16, where a tile's
first chunk of scales is waited for), and those two (PIPE and 192 x 128) with SMEM_SCALES = 2
(A's scales copied into each ring slot by TMA, from their M-major copy). OVERLAP = 1 and ORDERED = 1 stay in
the space but seed nothing: on an H200 OVERLAP ran 4 to 15 % slower than the same tiles without it
on six prefill shapes, ORDERED 2 to 8 % slower on eleven of twelve tile-and-shape pairs
(docs/notes/2026-11-27-fp8-promotion.md). Decode shapes get one 64-row WS
tile (ws_decode_seed) where a single wave of its columns of tiles fills most multiprocessors.

On AMD (hip) the space has no TMA and the stage count of the AMD pipeliner (2). Every seed is
completed with the first value of each parameter it does not name, and kept only when its values
are in the target's space and no pruning rule rejects it for the shape.
"""

from __future__ import annotations

from typing import List

from ..blockscale import gpu_seed_configs, nearest_split, shape_class
from ..gemm_tiles import cdiv, skinny_tile

LARGE = [
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=5, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4, TMA=1),
]
MEDIUM = [
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4, TMA=1),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4, TMA=1),
]


WS_STAGES = {96: 6, 128: 5, 160: 4, 192: 4}  # ring slots that fit beside the C tile (128-row tiles)
WS_TILE_COST = 32  # a tile's fixed cost (epilogue, A loads), in columns' worth of MMA time


def ws_seeds(shape, multiprocessors: int, block_m: int = 128) -> List[dict]:
    """The warp-specialized kernel's seeds: 128 x 128, and the two BLOCK_N of 96, 128, 160, 192 whose
    whole waves of tiles take the least estimated time (waves x (BLOCK_N + WS_TILE_COST))."""
    def cost(bn):
        tiles = cdiv(shape.M, block_m) * cdiv(shape.N, bn)
        return cdiv(tiles, multiprocessors) * (bn + WS_TILE_COST)

    widths = sorted(WS_STAGES, key=lambda bn: (cost(bn), -bn))[:2]
    if 128 not in widths:
        widths.append(128)
    stages = lambda bn: WS_STAGES[bn] + (1 if block_m == 64 else 0)  # noqa: E731 (half the A tile a slot)
    return [dict(BLOCK_M=block_m, BLOCK_N=bn, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=stages(bn), TMA=1,
                 WS=1) for bn in widths]


# 192 x 128: three consumer warpgroups share each B slot (a third more MMA work a slot than 128 x
# 128's two); four ring slots fit beside its 48 KiB C tile
WS_TALL = dict(BLOCK_M=192, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4, TMA=1, WS=1)
# 128 x 128 with PIPE = 1: two partials a consumer, five ring slots (six and the C tile exceed 227 KiB)
WS_PIPE = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=5, TMA=1, WS=1, PIPE=1)
PIPE_MIN_STEPS = 32  # K steps from which PIPE's one extra MMA step a tile (1 / steps) is worth it
# A's scales staged in shared memory (a tile's first steps wait for theirs): the tall tile and
# 128 x 128 (five slots: six, the C tile and the scales exceed 227 KiB), seeded from the same 32 steps
WS_SMEM_SCALES = [dict(WS_TALL, SMEM_SCALES=1),
                  dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=5, TMA=1, WS=1,
                       SMEM_SCALES=1)]
# A's scales copied into each ring slot by TMA from their M-major copy: PIPE 128 x 128 and the tall
# tile, seeded from the same 32 steps (an H200, one call: up to 16 % faster than the same tiles
# without on five shapes of 56 to 128 steps, in all but one of 15 pairs; up to 7 % slower at 12 and 16)
WS_RING_SCALES = [dict(WS_PIPE, SMEM_SCALES=2), dict(WS_TALL, SMEM_SCALES=2)]
# the CUDA C++ kernel (cuda_kernel.cu), first in the large class: on an H200, over 18 prefill
# shapes with all of its 51 configs measured by the agent (docs/fp8.md), the best was 256 x 128 x 3
# on 12 (alone on 9, sharing A in a cluster of two on 2, sharing B on 1) and 128 x 192 on the other
# 6 (3 or 4 slots, alone or sharing B); 128 x 128 with PIPE was best on a ragged 1000x2000x1152.
# 128 x 256 (two halves a consumer), added later, was best in 5 of 16 shape-and-run pairs of eight
# prefill shapes (two runs, docs/notes/2026-11-28-fp8-tile-overlap.md)
CUDA_TILE = dict(BLOCK_K=128, GROUP_M=8, num_warps=4, TMA=1, CUDA=1)
CUDA_MEDIUM = [dict(CUDA_TILE, BLOCK_M=128, BLOCK_N=128, num_stages=5),
               dict(CUDA_TILE, BLOCK_M=128, BLOCK_N=128, num_stages=5, PIPE=1)]
CUDA_LARGE = [dict(CUDA_TILE, BLOCK_M=256, BLOCK_N=128, num_stages=3),
              dict(CUDA_TILE, BLOCK_M=256, BLOCK_N=128, num_stages=3, num_ctas=2, SHARE_A=1),
              dict(CUDA_TILE, BLOCK_M=256, BLOCK_N=128, num_stages=3, num_ctas=2),
              dict(CUDA_TILE, BLOCK_M=128, BLOCK_N=256, num_stages=3),
              dict(CUDA_TILE, BLOCK_M=128, BLOCK_N=192, num_stages=4),
              dict(CUDA_TILE, BLOCK_M=128, BLOCK_N=192, num_stages=4, num_ctas=2)] + CUDA_MEDIUM
# the CUDA decode kernel (cuda_decode.cu, SWAP_AB = 1: C^T = B A^T), first in the skinny class: 64- and
# 128-row tiles of the weight, the split of K (one that leaves no split empty) that brings the CTAs
# nearest to DECODE_CTAS_PER_MP a multiprocessor (decode streams B once: every multiprocessor needs
# copies in flight; a grid of tiles that fills the multiprocessors alone is not split: rule
# split_k_on_full_grid), for 16-token tiles only; over 32 tokens also 32-token tiles of 64 rows. On
# an H200 (one call, every decode config on ten decode shapes of DeepSeek-V3, Qwen3, Llama-4) a split
# of K ran 1.6 to 1.8 times slower than none with 32 or 64 tokens a tile, and 32-token tiles were
# best or within 2 % of it at M of 32 to 64
DECODE_TILE = dict(BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=6, TMA=1, CUDA=1, SWAP_AB=1)
DECODE_CTAS_PER_MP = 2


def cuda_decode_seeds(shape, multiprocessors: int) -> List[dict]:
    bm, steps = skinny_tile(shape.M), cdiv(shape.K, 128)
    splits = [s for s in (1, 2, 4, 8, 16) if cdiv(steps, cdiv(steps, s)) == s]
    out = []
    for bn in (64, 128):
        tiles = cdiv(shape.M, bm) * cdiv(shape.N, bn)
        few = tiles < multiprocessors and bm == 16
        split = nearest_split(tiles, DECODE_CTAS_PER_MP * multiprocessors, splits) if few else 1
        out.append(dict(DECODE_TILE, BLOCK_M=bm, BLOCK_N=bn, SPLIT_K=split))
    if bm > 32:
        out.append(dict(DECODE_TILE, BLOCK_M=32, BLOCK_N=64, SPLIT_K=1))
    return out


WS_DECODE_WIDTHS = (64, 80, 96, 128)  # 64-row WS tiles for M <= 64: the narrowest in one wave


def ws_decode_seed(shape, multiprocessors: int) -> List[dict]:
    """Decode streams B once: the 64-row WS tile of the narrowest width whose columns of tiles fit
    one wave (10240 columns: 128 tiles of 80, where 64 takes 160, two waves), six ring slots of B
    in flight; none where that wave would leave half the multiprocessors idle (the WS kernel has
    no split of K: the Triton kernel's split-K seeds cover those)."""
    fits = [bn for bn in WS_DECODE_WIDTHS if cdiv(shape.N, bn) <= multiprocessors]
    if not fits or cdiv(shape.N, fits[0]) * 2 < multiprocessors:
        return []
    return [dict(BLOCK_M=64, BLOCK_N=fits[0], BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=6, TMA=1, WS=1)]


def rule_seeds(shape, multiprocessors: int) -> List[dict]:
    kind = shape_class(shape, multiprocessors)
    if kind == "large":
        long_k = cdiv(shape.K, 128) >= PIPE_MIN_STEPS
        long_k_seeds = [dict(WS_PIPE)] + [dict(c) for c in WS_SMEM_SCALES + WS_RING_SCALES] if long_k else []
        cuda = [dict(c) for c in CUDA_LARGE]
        return cuda + ws_seeds(shape, multiprocessors) + [dict(WS_TALL)] + long_k_seeds + LARGE
    if kind == "medium":
        out = [dict(c) for c in CUDA_MEDIUM] + ws_seeds(shape, multiprocessors, 64) + list(MEDIUM)
        tiles = cdiv(shape.M, 64) * cdiv(shape.N, 128)
        split = nearest_split(tiles, multiprocessors)
        if split > 1:
            out.append(dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4, SPLIT_K=split))
        return out
    bm = skinny_tile(shape.M)
    out = cuda_decode_seeds(shape, multiprocessors) + ws_decode_seed(shape, multiprocessors)
    for bn in (64, 128):
        split = nearest_split(cdiv(shape.M, bm) * cdiv(shape.N, bn), multiprocessors)
        for tma in (0, 1):
            out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=5, SPLIT_K=split,
                            TMA=tma))
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=5))
    return out


def _for_hip(seeds: List[dict]) -> List[dict]:
    """AMD: no tensor descriptors nor the warp-specialized or CUDA kernels, the AMD pipeliner's two stages."""
    return [dict({name: value for name, value in seed.items() if name != "TMA"}, num_stages=2) for seed in seeds
            if not seed.get("WS") and not seed.get("CUDA")]


def seed_configs(shape, target) -> List[dict]:
    """The seeds of ``shape``'s class on ``target`` that are in its space and pass every rule."""
    from . import KERNEL

    return gpu_seed_configs(KERNEL, rule_seeds, shape, target, _for_hip)
