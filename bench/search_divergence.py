"""Why a second tune of the same space compiles something: how many (config, shape) pairs a second
search asks that the first did not, when the two differ only in the order results come back or
in the measurement noise. The real default search (genetic, warm-started, budget 96, batch 8) on
the real pruned sm90 spaces of some shapes of bench/shapes/llm_gemms.txt, driven the way a GPU
tune drives it now (``harness.streams.drive_streams``) and before (``strategies.driver.drive``
in lockstep rounds); the kernel times are made up (a smooth, deterministic function of the
config, so that the best configs lie within a few per cent of each other, as real tiles do)
times a log-normal noise factor.

    python3 bench/search_divergence.py [--shapes-file F] [--shapes 3] [--noise 0.003]

Prints, per driver: pairs asked by run 2 and not by run 1 (what run 2 compiles when run 1's
compile cache is kept) with other noise, with the same noise, and without noise.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _unit(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / float(1 << 48)


def base_time(cfg: dict, shape_id: str) -> float:
    """A made-up kernel time: the tile decides most of it, the other parameters up to 3 %."""
    tile = repr((cfg.get("BLOCK_M"), cfg.get("BLOCK_N"), cfg.get("BLOCK_K"), shape_id))
    rest = repr(sorted(cfg.items())) + shape_id
    return 1000.0 * (1 + 2.0 * _unit(tile)) * (1 + 0.03 * _unit(rest))


class Measure:
    """Results of a batch at once, each time ``base_time`` times exp(N(0, sigma))."""

    def __init__(self, sigma: float, seed: int):
        self.sigma, self.rng = sigma, random.Random(seed)

    def results(self, shape_id, configs):
        return [{"config": c, "status": "ok", "time_ns": base_time(c, shape_id) * math.exp(self.rng.gauss(0, self.sigma))}
                for c in configs]

    # harness.streams' evaluator
    def submit(self, asks, fidelity):
        ((s, b),) = asks
        return self.results(s.shape.id, b.configs)

    def wait(self, handle):
        return handle

    def finish(self, handle, waited):
        return [waited]


def run(setup, driver: str, sigma: float, seed: int, budget: int, devices: int) -> set:
    from harness.rounds import seeds_round
    from harness.strategies import key
    from harness.strategies.driver import AskAhead, drive
    from harness.streams import ahead_for, drive_streams

    searches = setup.searches(budget, 8, 0)
    measure = Measure(sigma, seed)
    first = lambda live: seeds_round(live, setup.space, budget)  # noqa: E731
    if driver == "streams":
        drive_streams(searches, setup.space, measure, budget, ahead=ahead_for(devices, len(searches)),
                      first_round=first)
    else:
        evaluate = AskAhead(lambda asks, f: [measure.results(s.shape.id, b.configs) for s, b in asks],
                            lambda handle: handle, depth=devices + 1)
        drive(searches, setup.space, evaluate, budget, first_round=first)
    return {(s.shape.id, key(t.config)) for s in searches for t in s.history}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes-file", default=str(REPO / "bench/shapes/llm_gemms.txt"))
    p.add_argument("--shapes", type=int, default=3, help="the first N shapes of the file (pruning takes long)")
    p.add_argument("--noise", type=float, default=0.003, help="sigma of the log-normal noise (0.003: 0.3 %%)")
    p.add_argument("--budget", type=int, default=96)
    p.add_argument("--devices", type=int, default=4)
    args = p.parse_args(argv)
    import pipeline_sim

    os.environ.setdefault("HARNESS_KERNELS_PATH", str(REPO / "tests" / "kernels"))
    work = Path(tempfile.mkdtemp(prefix="harness-divergence-"))
    lines = [l for l in Path(args.shapes_file).read_text().splitlines() if l.split("#")[0].strip()]
    (work / "shapes.txt").write_text("\n".join(lines[:args.shapes]) + "\n")
    setup = pipeline_sim.Setup(str(work / "shapes.txt"), work)
    print("%d shapes, genetic, budget %d, %d devices, noise %.2f %%" % (
        len(setup.shapes), args.budget, args.devices, 100 * args.noise))
    for driver in ("streams", "lockstep"):
        one = run(setup, driver, args.noise, 1, args.budget, args.devices)
        other = run(setup, driver, args.noise, 2, args.budget, args.devices)
        same = run(setup, driver, args.noise, 1, args.budget, args.devices)
        quiet = run(setup, driver, 0.0, 1, args.budget, args.devices), run(setup, driver, 0.0, 2, args.budget,
                                                                            args.devices)
        print("%-8s run 2 asked %d of its %d pairs that run 1 did not (other noise); same noise: %d; no noise: %d" % (
            driver, len(other - one), len(other), len(same - one), len(quiet[1] - quiet[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
