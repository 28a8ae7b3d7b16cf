"""Configs known to be good for the MXFP4 GEMM's shape classes: the first round of every search
(harness.strategies.seeded).

From aiter's tuned Triton configs for ``gemm_afp4wfp4`` (aiter/ops/triton/configs/gemm/
{arch}-GEMM-AFP4WFP4*.json: BLOCK_SIZE_K 256, 4 warps, 16 to 128 rows, a K split for small M)
and the fp8 block-scaled GEMM's tiles on sm90:

* **skinny** (M <= 64, decode): the narrowest BLOCK_M that covers M, 64 or 128 columns, BLOCK_K
  256, 4 warps, K split so that tiles x splits about fills the multiprocessors;
* **large** (128 x 128 tiles alone fill every multiprocessor, prefill): 128 x 128 and 128 x 256
  tiles on 8 warps, and 64 x 128 on 4 warps;
* **medium**: 64 x 128 and 128 x 128 tiles, with a split of K where the tiles are few.

On AMD (hip) the stage count is the AMD pipeliner's 2. Every seed is completed with the first
value of each parameter it does not name, and kept only when its values are in the target's space
and no pruning rule rejects it for the shape.
"""

from __future__ import annotations

from typing import List

from ..blockscale import gpu_seed_configs, nearest_split, shape_class
from ..gemm_tiles import cdiv, skinny_tile

LARGE = [
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=256, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=256, GROUP_M=8, num_warps=4, num_stages=3),
]
MEDIUM = [
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=256, GROUP_M=8, num_warps=4, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=256, GROUP_M=8, num_warps=8, num_stages=3),
]


SPLITS = (1, 2, 4, 8, 16)


def rule_seeds(shape, multiprocessors: int) -> List[dict]:
    kind = shape_class(shape, multiprocessors)
    if kind == "large":
        return LARGE
    if kind == "medium":
        out = list(MEDIUM)
        split = nearest_split(cdiv(shape.M, 64) * cdiv(shape.N, 128), multiprocessors, SPLITS)
        if split > 1:
            out.append(dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=3, SPLIT_K=split))
        return out
    bm = skinny_tile(shape.M)
    out = []
    for bn in (64, 128):
        split = nearest_split(cdiv(shape.M, bm) * cdiv(shape.N, bn), multiprocessors, SPLITS)
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=3, SPLIT_K=split))
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=3))
    return out


def _for_hip(seeds: List[dict]) -> List[dict]:
    """AMD: the AMD pipeliner's two stages."""
    return [dict(seed, num_stages=2) for seed in seeds]


def seed_configs(shape, target) -> List[dict]:
    """The seeds of ``shape``'s class on ``target`` that are in its space and pass every rule."""
    from . import KERNEL

    return gpu_seed_configs(KERNEL, rule_seeds, shape, target, _for_hip)
