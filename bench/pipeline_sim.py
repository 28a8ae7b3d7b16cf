"""How many configs/s a GPU tune's pipeline sustains on a node, one GPU against several, modelled
without a GPU: the real search (``strategies.driver.drive`` with the default genetic strategy and
its warm start, ten shapes, budget 96, batch 8) and the real build planning (which variants each
round compiles, shared across rounds by content), on a simulated clock that models the rest:

- compiles: ``--cores`` compile slots, one shared queue (first come, first served); a variant
  takes ``--compile-s`` core-seconds times a per-variant factor (log-normal, sigma
  ``--compile-spread``: some configs compile much longer); a variant compiled before is free;
- each round's build: ``--round-s`` of host work that overlaps nothing of its own (planning,
  manifest, hashes, sending) besides its compiles; asking the strategies: ``--ask-s`` per shape;
- measuring: the agent runs rounds one after another in the order they were sent; within a
  round each job goes to the first free device and takes ``--measure-s`` (times a factor
  uniform in 0.7-1.3), plus ``--agent-round-s`` per round.

Pipelines compared (each for 1 and for ``--devices`` GPUs):
  before       every config of a round compiled for every shape's specialization (the
               build of ``only_configs``), the build on the search's thread, 2 rounds in flight
  pairs        each config compiled for its own shape only, otherwise as before
  async        pairs, and rounds built in threads of their own (their compiles overlap), with
               devices + 1 rounds in flight (the default now); ``--depth`` adds fixed depths

The defaults are calibrated on the H200 measurements in docs/throughput.md: ``--measure-s``
0.055 (one GPU 64 % busy at 11.7 configs/s), and ``--compile-s`` chosen so that ``before``
gives the measured 11.7 (one GPU) and 12.9 (two GPUs) configs/s on 32 cores; ``--calibrate``
prints ``before`` over a range of compile costs to check that choice.

    python3 bench/pipeline_sim.py                       # 32 cores, 1 vs 2 GPUs
    python3 bench/pipeline_sim.py --cores 16 --devices 1
    python3 bench/pipeline_sim.py --calibrate
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import math
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NODE_YAML = ("node:\n  backend: cuda\n  arch: x86_64\n  gpu_arch: 90\n  shared_mem_max: 232448\n"
             "  multiprocessors: 132\n  profiler: events\n")


def _unit(text: str) -> float:
    """A deterministic number in [0, 1) for ``text``."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / float(1 << 48)


class Setup:
    """The real kernel, target, shapes, strategies and build planning of the modelled tune."""

    def __init__(self, shapes_file: str, workdir: Path):
        from harness import kernels
        from harness.build import compiler_for
        from harness.api.build import read_shapes
        from harness.targets import get_target

        (workdir / "targets.yaml").write_text(NODE_YAML)
        self.target = get_target("node", str(workdir / "targets.yaml"))
        self.kernel = kernels.get("matmul")
        self.shapes = read_shapes(self.target, None, shapes_file, "auto", None, 0.1, None, self.kernel)
        self.space = self.kernel.space_for(self.target)
        self.compiler = compiler_for(self.kernel, self.target, workdir / "bundle")
        self.rules = self.kernel.rules_for(self.target)
        self.memo = {}  # (config, shape id) -> the variant ids it plans
        self.feasible = {}  # shape id -> its Problem's configs (indices in expand(space))
        self.positions = None  # config key -> index in expand(space)

    def searches(self, budget: int, batch: int, seed: int):
        from harness.strategies import get_strategy, pruning_predicate
        from harness.strategies.driver import ShapeSearch
        from harness.space import expand
        from harness.strategies import key
        from harness.strategies.base import prepare_problems
        from harness.strategies.seeded import Seeded, warm_start

        out = []
        for shape in self.shapes:
            strategy = Seeded(get_strategy("genetic", seed=seed, batch_size=batch),
                              warm_start(self.kernel, self.target, shape, []))
            is_pruned = pruning_predicate(self.rules, [shape], self.target, self.compiler.resource_rule)
            out.append(ShapeSearch(strategy, is_pruned, [], shape=shape))
        missing = [s for s in out if s.shape.id not in self.feasible]
        prepare_problems([s.strategy for s in missing], self.space, [s.is_pruned for s in missing])
        for s in out:  # pruned once for every simulation: the model counts --prune-s instead
            if s.shape.id not in self.feasible:
                if self.positions is None:
                    self.positions = {key(c): i for i, c in enumerate(expand(self.space))}
                problem = s.strategy.problem(self.space, s.is_pruned)
                self.feasible[s.shape.id] = [self.positions[key(c)] for c in problem.candidates]
            s.strategy.problem(self.space, s.is_pruned, self.feasible[s.shape.id])
        return out

    def variants(self, pairs, per_pair: bool) -> list:
        """The variant ids a round's build compiles: per pair (now) or per config and every shape
        of the round (before)."""
        if per_pair:
            wanted = pairs
        else:
            shapes = list({s.id: s for _, s in pairs}.values())
            configs = list({tuple(sorted(c.items())): c for c, _ in pairs}.values())
            wanted = [(cfg, shape) for cfg in configs for shape in shapes]
        return list(dict.fromkeys(v for cfg, shape in wanted for v in self._planned(cfg, shape)))

    def _planned(self, cfg, shape) -> list:
        from harness.build import plan_pairs

        k = (tuple(sorted(cfg.items())), shape.id)
        if k not in self.memo:
            self.memo[k] = list(plan_pairs(self.kernel, self.target, [(cfg, [shape])], self.compiler)[0])
        return self.memo[k]


class Node:
    """The simulated host and node: compile slots, builds, and the agent's devices."""

    def __init__(self, args, devices: int, shapes: int, per_pair: bool, overlap: bool):
        self.a = args
        self.devices = devices
        self.per_pair = per_pair
        self.overlap = overlap  # builds in threads of their own (else on the search's thread)
        # pruning every shape's space before the first round: one after another, or (now) at once
        self.now = args.prune_s * (math.ceil(shapes / args.cores) if overlap else shapes)
        self.asking = 0.0  # the strategies' real asking time here
        self.slots = [0.0] * args.cores  # when each compile slot is free
        heapq.heapify(self.slots)
        self.compiled = {}  # variant id -> when its artifact is there
        self.sent_at = 0.0  # when the last round reached the agent
        self.agent_free = 0.0  # when the agent ends the last round sent
        self.busy = 0.0  # device seconds measuring
        self.build_busy = []  # (start, end) of each build
        self.compiles = 0

    def ask(self, shapes: int, seconds: float) -> None:
        self.asking += seconds
        self.now += self.a.ask_s * shapes + seconds * self.a.host_factor

    def submit(self, setup: Setup, pairs) -> float:
        """Build and send a round at ``now``; returns when its rows are back."""
        a = self.a
        start = self.now
        ready = start
        for vid in setup.variants(pairs, self.per_pair):
            if vid in self.compiled:
                ready = max(ready, self.compiled[vid])
                continue
            factor = math.exp(a.compile_spread * _gauss(vid))
            slot = heapq.heappop(self.slots)
            begin = max(slot, start)
            end = begin + a.compile_s * factor
            heapq.heappush(self.slots, end)
            self.compiled[vid] = end
            self.compiles += 1
            ready = max(ready, end)
        built = ready + a.round_s
        self.build_busy.append((start, built))
        if not self.overlap:
            self.now = built  # the search waited for its build
        sent = max(built, self.sent_at)  # rounds reach the agent in order
        self.sent_at = sent
        devices = [max(sent, self.agent_free) + a.agent_round_s] * self.devices
        for cfg, shape in pairs:
            t = a.measure_s * (0.7 + 0.6 * _unit("m" + repr(sorted(cfg.items())) + shape.id))
            i = devices.index(min(devices))
            devices[i] += t
            self.busy += t
        self.agent_free = max(devices)
        return self.agent_free

    def collect(self, done: float) -> None:
        self.now = max(self.now, done)

    def build_wall(self) -> float:
        total, end = 0.0, 0.0
        for s, e in sorted(self.build_busy):
            if e > end:
                total += e - max(s, end)
                end = e
        return total


def _gauss(text: str) -> float:
    u1, u2 = max(1e-12, _unit("a" + text)), _unit("b" + text)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def simulate(setup: Setup, args, devices: int, mode: str, depth=None) -> dict:
    from harness.strategies import Trial
    from harness.strategies.driver import AskAhead, drive

    per_pair = mode != "before"
    overlap = mode.startswith("async")
    node = Node(args, devices, len(setup.shapes), per_pair, overlap)
    depth = depth or (devices + 1 if overlap else 2)
    searches = setup.searches(args.budget, args.batch, args.seed)
    rng = random.Random(args.seed)
    times = {}

    def time_of(cfg, shape) -> float:  # a made-up kernel time, fixed per (config, shape)
        k = (repr(sorted(cfg.items())), shape.id)
        if k not in times:
            times[k] = 1000.0 * (1.0 + 4.0 * _unit(k[0] + k[1])) * (1.0 + 0.01 * rng.random())
        return times[k]

    last = [time.monotonic()]

    def submit(asks, fidelity):
        node.ask(len(asks), time.monotonic() - last[0])  # the strategies' real asking, scaled
        pairs = [(c, s.shape) for s, b in asks for c in b.configs]
        done = node.submit(setup, pairs)
        last[0] = time.monotonic()
        return done, asks

    def collect(handle):
        done, asks = handle
        node.collect(done)
        last[0] = time.monotonic()
        return [[Trial(c, "ok", time_of(c, s.shape)) for c in b.configs] for s, b in asks]

    rounds = drive(searches, setup.space, AskAhead(submit, collect, depth), args.budget)
    configs = sum(len(s.new) for s in searches)
    return dict(mode=mode, devices=devices, depth=depth, rounds=rounds, configs=configs, seconds=node.now,
                asking=node.asking,
                rate=configs / node.now, busy=node.busy / (devices * node.now), compiles=node.compiles,
                build=node.build_wall())


def line(r: dict) -> str:
    return ("%-7s %d GPU%s depth %d: %4d configs in %6.1fs = %5.1f configs/s; devices busy %3.0f%%; %4d compiles; "
            "building %5.1fs; asking here %4.1fs" % (
                r["mode"], r["devices"], "s" if r["devices"] > 1 else " ", r["depth"], r["configs"], r["seconds"],
                r["rate"], 100 * r["busy"], r["compiles"], r["build"], r["asking"]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes-file", default=str(REPO / "bench/shapes/llm_gemms.txt"))
    p.add_argument("--budget", type=int, default=96)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cores", type=int, default=32, help="compile slots (the node's cores)")
    p.add_argument("--devices", type=int, default=2, help="GPUs to compare with one")
    p.add_argument("--compile-s", type=float, default=0.33, help="core-seconds per compile (median)")
    p.add_argument("--compile-spread", type=float, default=0.5, help="sigma of the log-normal compile factor")
    p.add_argument("--round-s", type=float, default=0.4, help="host seconds per round besides compiling")
    p.add_argument("--prune-s", type=float, default=2.5,
                   help="seconds to prune one shape's space on one core (before the first round)")
    p.add_argument("--ask-s", type=float, default=0.0, help="model seconds per shape asked (besides the real asking)")
    p.add_argument("--host-factor", type=float, default=0.5,
                   help="the strategies' real asking time here counts this much (the node's CPU is faster)")
    p.add_argument("--measure-s", type=float, default=0.055, help="device seconds per config")
    p.add_argument("--agent-round-s", type=float, default=0.05, help="the agent's own seconds per round")
    p.add_argument("--modes", default="before,pairs,async", help="which pipelines (see above)")
    p.add_argument("--depth", default="", help="also async with these fixed depths, e.g. 2,4")
    p.add_argument("--calibrate", action="store_true", help="before, over compile costs 0.4-1.0 s")
    args = p.parse_args(argv)
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="harness-sim-"))
    os.environ.setdefault("HARNESS_KERNELS_PATH", str(REPO / "tests" / "kernels"))
    setup = Setup(args.shapes_file, workdir)
    print("modelled: %d cores, compile %.2f core-s (spread %.1f), %.2fs per round on the host, pruning %.1fs per "
          "shape, measure %.0f ms per config; %d shapes, genetic, budget %d, batch %d" % (
              args.cores, args.compile_s, args.compile_spread, args.round_s, args.prune_s, 1000 * args.measure_s,
              len(setup.shapes), args.budget, args.batch))
    if args.calibrate:
        for c in (0.2, 0.3, 0.4, 0.5, 0.6):
            args.compile_s = c
            one, two = (simulate(setup, args, d, "before") for d in (1, args.devices))
            print("compile %.2fs: before 1 GPU %.1f configs/s, %d GPUs %.1f configs/s (measured: 11.7, 12.9)"
                  % (c, one["rate"], args.devices, two["rate"]))
        return 0
    rates = {}
    for mode in args.modes.split(","):
        for d in (1, args.devices):
            r = simulate(setup, args, d, mode)
            rates[(mode, d)] = r["rate"]
            print(line(r))
        print("%-7s %d GPUs / 1 GPU: x%.2f" % (mode, args.devices, rates[(mode, args.devices)] / rates[(mode, 1)]))
    for depth in [int(x) for x in args.depth.split(",") if x.strip()]:
        for d in (1, args.devices):
            print(line(simulate(setup, args, d, "async", depth)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
