"""One-off probe (issue 43): the host's own seconds per round of a GPU tune, which its one
interpreter spends for every round (py-spy --gil on a 4x H200 node put the tune's process at one
core through the search, 38 % of it in writing manifests and the ledger, 16 % in building the
shapes' problems after the pruning).

Times, in this process: building the Problem of a pruned space of 20,000 configs from their
indices (as prepare_problems does for each shape), and saving 190 rounds' manifests (8 variants
each, as a four-GPU tune of ten shapes writes) into one bundle folder, the ledger growing.

    python3 bench/probes/host_round_cost.py
"""

import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.bundle import Manifest, ShapeEntry, Variant  # noqa: E402
from harness.strategies.base import Problem  # noqa: E402

SPACE = {"BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [16, 32, 64, 128, 256, 320], "BLOCK_K": [32, 64, 128, 256],
         "GROUP_M": [1, 4, 8, 16], "SPLIT_K": [1, 2, 4, 8], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5, 6],
         "SWAP_AB": [0, 1], "TMA": [0, 1], "PERSISTENT": [0, 1], "STREAM_K": [0, 1]}


def problem_seconds(configs: int = 20000) -> float:
    size = int(np.prod([len(v) for v in SPACE.values()]))
    feasible = np.array(sorted(random.Random(1).sample(range(size), configs)), dtype=np.int64)
    start = time.perf_counter()
    Problem(SPACE, lambda c: False, feasible)
    return time.perf_counter() - start


def manifest_seconds(rounds: int = 190, per_round: int = 8) -> float:
    rng = random.Random(2)
    shape = ShapeEntry(id="4096x4096x4096_fp16_NN", dims={"M": 4096, "N": 4096, "K": 4096}, dtype="fp16", layout="NN",
                       operands=[{"name": n, "role": "input", "dtype": "fp16", "shape": [4096, 4096],
                                  "strides": [4096, 1], "elements": 1 << 24, "bytes": 1 << 25} for n in "ab"])
    toolchain = {"support": {"fill_fp16": {"artifact": "artifacts/fill.cubin",
                                           "launch": {"params": [{"name": "x%d" % i} for i in range(12)]}}}}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        for r in range(rounds):
            variants = [Variant(id="v%d_%d" % (r, i), config={k: rng.choice(v) for k, v in SPACE.items()}, dtype="fp16",
                                specialization=[], status="ok", artifact="artifacts/v%d_%d.cubin" % (r, i),
                                launch={"entry": "matmul_kernel", "params": [{"name": "p%d" % j} for j in range(20)]})
                        for i in range(per_round)]
            Manifest(kernel="matmul", target={"name": "node"}, toolchain=toolchain, variants=variants, shapes=[shape],
                     jobs=[], pruned=[], seed=0, config_names=list(SPACE), tolerances={}).save(Path(tmp))
        return time.perf_counter() - start


if __name__ == "__main__":
    print("Problem of 20,000 configs from their indices: %.3f s" % min(problem_seconds() for _ in range(3)))
    print("190 rounds' manifests and ledger saved: %.3f s" % min(manifest_seconds() for _ in range(3)))
