"""Build the GPU bundles for the real-hardware validation on the CPU host, and measure compile
throughput (configs per second per host core) and how many compiles reuse across shapes saved.

    python3 -m bench.probes.gpu_device_build --root .devcarry/gpu --jobs 2 [--target gpu-node]

Two bundles (build/<target>/matmul under each root):
  fullspace/  the space of the first full-space run (RECORDED_SPACE below: GPU_SPACE before SWAP_AB,
              TMA and PERSISTENT joined it), pruned by the kernel's rules
              and by the target's shared memory, for four fp16 NN shapes, skinny and large: they
              share one specialization class, so one artifact per config serves all four
  tuned/      a curated space for four more shapes (bf16, the NT and TN layouts, M = 64 and 128),
              with split-K and 2-warp configs for the skinny ones
  extra/      skinny-M configs outside GPU_SPACE (1-2 warps, BLOCK_K 256, split-K 16, 5-6 stages)
              for the four skinny shapes
  tma/        TMA = 1 (device-side tensor descriptors, sm90) configs for all eight shapes
  skinny2/    SWAP_AB = 1 (pointers and TMA), 2-4 warps, 4-6 stages, and the earlier winners, for
              the four skinny shapes
  large2/     PERSISTENT = 1 (one program per multiprocessor, flattened pipeline) over tile shapes
              and GROUP_M, and the earlier winners, for the four large shapes
  skinny3/    for M = 64 and 128 (64x8192x8192, 128x4096x8192): split-K over wider tiles, and
              deeper 64-row tiles, with pointers and TMA
  nt4/        the two NT shapes (2048^3, 128x4096x8192): 128-row tiles 32 to 128 wide with and
              without split-K 2, 64 x 256 tiles, 128 x 128 tiles (two programs per multiprocessor)
  edges/      shapes whose M and N are not multiples of the tiles (1000x1000x1024, 3000x3000x512,
              200x3000x512 TN, 24x1000x4096 NT) under PERSISTENT, SWAP_AB (with split-K), TMA and plain configs:
              the agent's answer checks cover the clipped edge tiles
  large3/     the large shapes again: split-K 2 and BLOCK_K 128 on 128 x 256 tiles, GROUP_M 1 to 32,
              256 x 128 tiles, with and without PERSISTENT
  odd/        1000x1000x999 fp16: K off every BLOCK_K (the masked K tail; rows of 999 elements are
              not 16-byte multiples, so pointers only), M and N off the tiles
  winners/    the best config per shape of the fifth run, for the eight shapes of the earlier runs
  longk/      small M x N with a long K (128x1536x7168 bf16 NN, 64x2048x8192 fp16 NT,
              32x1024x16384 bf16 NN: 16 to 48 tiles of 64 x 64 for 132 multiprocessors): the
              deterministic split-K (3 to 16 splits; pointers and TMA, SWAP_AB for the skinny ones)
              and the earlier skinny winners without split-K
Prints one line per bundle and a summary; ``--json`` writes the numbers.
"""

import argparse
import itertools
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FULLSPACE_SHAPES = ["16x4096x4096:fp16:NN", "32x14336x4096:fp16:NN", "4096x4096x4096:fp16:NN",
                    "8192x8192x8192:fp16:NN"]
TUNED_SHAPES = ["4096x4096x4096:bf16:TN", "2048x2048x2048:fp16:NT", "64x8192x8192:bf16:NN",
                "128x4096x8192:fp16:NT"]


def tuned_configs():
    large = []
    for bm, bn, w, s in itertools.product((128, 256), (128, 256), (4, 8), (3, 4, 5)):
        large.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=w, num_stages=s))
    for bm, bn, bk, w, s in ((128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 256, 64, 4, 4), (128, 128, 32, 4, 4),
                             (128, 128, 128, 8, 3), (256, 128, 128, 8, 3), (128, 256, 128, 8, 3),
                             (64, 64, 64, 4, 5), (128, 256, 32, 8, 4)):
        large.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1, num_warps=w, num_stages=s))
    skinny = []
    for bm, bn, bk, sk, w in itertools.product((16, 32, 64), (64, 128, 256), (64, 128), (1, 2, 4, 8), (2, 4)):
        skinny.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=w, num_stages=4))
    return large + skinny


EXTRA_SHAPES = ["16x4096x4096:fp16:NN", "32x14336x4096:fp16:NN", "64x8192x8192:bf16:NN", "128x4096x8192:fp16:NT"]


def extra_configs():
    """Skinny-M configs outside GPU_SPACE: 1 and 2 warps, BLOCK_K 256, deeper pipelines, split-K 16."""
    out = []
    for bm, bn, bk, sk, w in itertools.product((16, 32), (64, 128), (128, 256), (2, 4, 8, 16), (1, 2, 4)):
        if bm * bn < w * 1024:  # the kernel's too_many_warps rule would prune it anyway
            continue
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=w, num_stages=4))
    for bn, bk, sk, s in itertools.product((64, 128), (128, 256), (1, 2), (5, 6)):
        out.append(dict(BLOCK_M=64, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=4, num_stages=s))
    return out


TMA_SHAPES = FULLSPACE_SHAPES + TUNED_SHAPES
SKINNY_SHAPES = EXTRA_SHAPES
LARGE_SHAPES = ["4096x4096x4096:fp16:NN", "8192x8192x8192:fp16:NN", "4096x4096x4096:bf16:TN",
                "2048x2048x2048:fp16:NT"]
# the space of the first full-space run (tests/data/gpu_fullspace): GPU_SPACE before SWAP_AB, TMA,
# PERSISTENT, 2 warps and 6 stages joined it
RECORDED_SPACE = {"BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128],
                  "GROUP_M": [1, 8], "SPLIT_K": [1, 2, 4, 8], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}
EARLIER_WINNERS = [  # the best config per shape of the first runs (docs/notes/2026-11-26-gpu-runs.md)
    dict(BLOCK_M=16, BLOCK_N=256, BLOCK_K=64, GROUP_M=1, SPLIT_K=8, num_warps=4, num_stages=3),
    dict(BLOCK_M=32, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=5),
    dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=5),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=5),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1),
]


def skinny2_configs():
    """SWAP_AB with pointers over narrow tiles, deep pipelines and little or no split-K; a few with
    TMA; the plain kernel with 2 warps and 6 stages; and the earlier winners."""
    out = []
    for bm, bn, bk, sk, w, s in itertools.product((16, 32, 64), (32, 64, 128), (128, 256), (1, 2), (2, 4), (4, 6)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=w, num_stages=s,
                        SWAP_AB=1))
    for bm, bn, sk, s in itertools.product((16, 32, 64), (64, 128), (1, 2), (4, 6)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=1, SPLIT_K=sk, num_warps=4, num_stages=s,
                        SWAP_AB=1, TMA=1))
    for bm, bn, w, s in itertools.product((16, 32, 64), (64, 128), (2, 4), (4, 5, 6)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=w, num_stages=s))
    return out + [c for c in EARLIER_WINNERS if c["BLOCK_M"] <= 64]


def large2_configs():
    """PERSISTENT = 1 over tile shapes, pipeline depths and GROUP_M, and the earlier winners."""
    out = []
    for (bm, bn, bk, w, s), gm in itertools.product(
            ((128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 64, 4, 5),
             (128, 128, 64, 8, 4), (128, 128, 64, 8, 5), (128, 256, 32, 8, 4), (128, 256, 32, 8, 5),
             (128, 128, 128, 8, 3), (256, 128, 32, 8, 4), (128, 256, 64, 4, 3)), (4, 8, 16)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, SPLIT_K=1, num_warps=w, num_stages=s,
                        TMA=1, PERSISTENT=1))
    return out + [c for c in EARLIER_WINNERS if c["BLOCK_M"] > 64]


SKINNY3_SHAPES = ["64x8192x8192:bf16:NN", "128x4096x8192:fp16:NT"]


def skinny3_configs():
    out = []
    for (bm, bn), bk, sk, s, tma in itertools.product(((64, 128), (64, 256), (128, 64), (128, 128), (128, 256)),
                                                      (64, 128), (2, 4, 8), (3, 4, 5), (0, 1)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk,
                        num_warps=4 if bm * bn <= 8192 else 8, num_stages=s, TMA=tma))
    for (bn, bk, s), w, tma in itertools.product(((64, 256, 3), (64, 256, 4), (32, 128, 6), (32, 256, 4)), (2, 4),
                                                 (0, 1)):
        out.append(dict(BLOCK_M=64, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma))
    return out


NT4_SHAPES = ["2048x2048x2048:fp16:NT", "128x4096x8192:fp16:NT"]


def nt4_configs():
    out = []
    for bk, w, s, tma in itertools.product((128, 256), (2, 4), (4, 5, 6), (0, 1)):
        out.append(dict(BLOCK_M=128, BLOCK_N=32, BLOCK_K=bk, GROUP_M=1, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma))
    for bk, sk, s, tma in itertools.product((64, 128), (1, 2), (3, 4, 5, 6), (0, 1)):
        out.append(dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=4, num_stages=s, TMA=tma))
    for w, s, tma, gm in itertools.product((4, 8), (3, 4), (0, 1), (1, 8)):
        out.append(dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=gm, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma))
    for w, s, tma in itertools.product((4, 8), (3, 4), (0, 1)):
        out.append(dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma))
    return out


EDGE_SHAPES = ["1000x1000x1024:fp16:NN", "3000x3000x512:fp16:NN", "200x3000x512:bf16:TN",
               "24x1000x4096:fp16:NT"]


def edges_configs():
    return [dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1,
                 PERSISTENT=1),
            dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=4, TMA=1,
                 PERSISTENT=1),
            dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=4, TMA=1),
            dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=4, SWAP_AB=1),
            dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4, num_stages=4, SWAP_AB=1),
            dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4, num_stages=4, SWAP_AB=1,
                 TMA=1),
            dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=3)]


def large3_configs():
    out = []
    for sk, s, tma in itertools.product((1, 2), (3, 4), (0, 1)):
        out.append(dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=sk, num_warps=8, num_stages=s, TMA=tma))
    for gm, s in itertools.product((1, 4, 16, 32), (3, 4)):
        out.append(dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=gm, SPLIT_K=1, num_warps=8, num_stages=s, TMA=1))
    for gm in (1, 2, 32):
        out.append(dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=gm, SPLIT_K=1, num_warps=8, num_stages=3,
                        TMA=1, PERSISTENT=1))
    for persistent, gm in itertools.product((0, 1), (8, 16)):
        out.append(dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=gm, SPLIT_K=1, num_warps=8, num_stages=2,
                        TMA=1, PERSISTENT=persistent))
        out.append(dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=gm, SPLIT_K=1, num_warps=8, num_stages=4,
                        TMA=1, PERSISTENT=persistent))
    return out


ODD_SHAPES = ["1000x1000x999:fp16:NN"]


def odd_configs():
    """Pointer tiles (TMA cannot describe rows of 999 fp16 elements), GROUP_M 8."""
    out = []
    for (bm, bn, bk, w), s in itertools.product(((128, 256, 64, 8), (256, 128, 64, 8), (128, 128, 64, 4),
                                                  (128, 128, 64, 8), (128, 64, 64, 4), (64, 128, 64, 4),
                                                  (64, 64, 64, 4), (128, 128, 32, 4), (128, 256, 32, 8),
                                                  (64, 64, 128, 4)), (3, 4, 5)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1, num_warps=w, num_stages=s))
    return out


LONGK_SHAPES = ["128x1536x7168:bf16:NN", "64x2048x8192:fp16:NT", "32x1024x16384:bf16:NN"]


def longk_configs():
    """Split-K over tiles that leave most multiprocessors idle without it (the rules keep the
    splits that give 132 to 528 programs per shape), pointers and TMA; SWAP_AB for M <= 64; and
    the earlier skinny winners (no split)."""
    out = []
    for (bm, bn), sk, tma in itertools.product(((64, 64), (64, 128), (128, 64), (128, 128)), (3, 4, 6, 8, 12, 16),
                                               (0, 1)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, GROUP_M=1, SPLIT_K=sk,
                        num_warps=8 if bm * bn > 8192 else 4, num_stages=4, TMA=tma))
    for (bm, bn), sk in itertools.product(((64, 64), (64, 128)), (3, 4, 6, 8)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=1, SPLIT_K=sk, num_warps=4, num_stages=3))
    for (bm, bn), sk, tma in itertools.product(((16, 64), (32, 64), (16, 128)), (2, 4, 8, 16), (0, 1)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=1, SPLIT_K=sk, num_warps=4, num_stages=4,
                        SWAP_AB=1, TMA=tma))
    out += [dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=6),
            dict(BLOCK_M=32, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=5),
            dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=4, SWAP_AB=1),
            dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=4, TMA=1)]
    return out


def winners_configs():
    """The best config per shape of the fifth run (docs/notes/2026-11-26-gpu-runs.md, geomean 1.006), rebuilt with the
    current kernel: on the eight shapes of the earlier runs, a check that nothing regressed."""
    return [dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=4, SWAP_AB=1),
            dict(BLOCK_M=32, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=5),
            dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=6)] + [
        dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=gm, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1,
             PERSISTENT=1) for gm in (16, 32)] + [
        dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1)]


def tma_configs():
    """TMA = 1: the large tiles that won with pointers, and skinny split-K tiles."""
    out = []
    for bm, bn, bk, w, s in ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3),
                             (256, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
                             (128, 128, 64, 4, 5), (128, 256, 32, 8, 4), (64, 128, 64, 4, 4)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1, num_warps=w, num_stages=s, TMA=1))
    for bm, bn, bk, sk, w, s in ((16, 128, 128, 4, 2, 4), (16, 256, 64, 8, 4, 5), (16, 64, 128, 4, 1, 4),
                                 (16, 128, 256, 4, 2, 3), (16, 128, 128, 8, 4, 4), (16, 64, 256, 2, 1, 4),
                                 (32, 128, 128, 2, 4, 4), (32, 128, 64, 1, 4, 5), (32, 64, 128, 2, 2, 5),
                                 (64, 64, 128, 1, 4, 5), (64, 64, 128, 1, 4, 6), (64, 128, 128, 1, 4, 4),
                                 (64, 128, 64, 1, 4, 5)):
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=w, num_stages=s, TMA=1))
    return out


def build_one(name, shapes_text, root, jobs, target_name, space=None, only=None):
    from harness.build import BuildOptions, build
    from harness.kernels import get
    from harness.shapes import parse_shape
    from harness.targets import load_targets

    target = load_targets(ROOT / "targets.yaml")[target_name]
    kernel = get("matmul")
    shapes = [parse_shape(s) for s in shapes_text]
    start = time.monotonic()
    summary = build(kernel, target, shapes, Path(root) / name,
                    BuildOptions(jobs=jobs, space=space, only_configs=only, compile_timeout=300))
    wall = time.monotonic() - start
    m = summary.manifest
    compile_s = sum(v.compile_seconds for v in m.variants)
    out = {"bundle": str(summary.bundle), "shapes": len(shapes), "variants": len(m.variants),
           "jobs": len(m.jobs), "pruned_pairs": summary.pruned_pairs, "compiled": summary.compiled,
           "cached": summary.cached, "failed": summary.failed, "statuses": summary.statuses,
           "reused_across_shapes": summary.reused_across_shapes, "wall_s": wall,
           "compile_process_s": compile_s, "host_cores": jobs}
    if summary.compiled:
        out["configs_per_s"] = summary.compiled / wall
        out["configs_per_s_per_core"] = summary.compiled / wall / jobs
        out["mean_compile_s"] = compile_s / max(1, len(m.variants))
    print("%-10s %4d variants for %d jobs (%d compiles saved by reuse), %d pruned pairs, %s; %.0f s wall%s"
          % (name, len(m.variants), len(m.jobs), summary.reused_across_shapes, summary.pruned_pairs,
             summary.statuses, wall, (", %.2f configs/s/core" % out["configs_per_s_per_core"])
             if summary.compiled else " (all cached)"), flush=True)
    return out


# bundle name -> (shapes, configs or None for RECORDED_SPACE), in build order
BUNDLES = {
    "tuned": (TUNED_SHAPES, tuned_configs), "extra": (EXTRA_SHAPES, extra_configs), "tma": (TMA_SHAPES, tma_configs),
    "skinny2": (SKINNY_SHAPES, skinny2_configs), "large2": (LARGE_SHAPES, large2_configs),
    "skinny3": (SKINNY3_SHAPES, skinny3_configs), "large3": (LARGE_SHAPES, large3_configs),
    "nt4": (NT4_SHAPES, nt4_configs), "edges": (EDGE_SHAPES, edges_configs), "fullspace": (FULLSPACE_SHAPES, None),
    "odd": (ODD_SHAPES, odd_configs), "longk": (LONGK_SHAPES, longk_configs),
    "winners": (TMA_SHAPES, winners_configs),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", default=".devcarry/gpu")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--target", default="gpu-node")
    p.add_argument("--only", choices=tuple(BUNDLES), default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    results = {}
    for name, (shapes, configs) in BUNDLES.items():
        if args.only in (None, name):
            if configs is None:
                results[name] = build_one(name, shapes, args.root, args.jobs, args.target, space=RECORDED_SPACE)
            else:
                results[name] = build_one(name, shapes, args.root, args.jobs, args.target, only=configs())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
