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

- the agent: its GPU workers are ready ``--start-s`` after the first round reaches it;
- the winners' re-measure after the search: each shape's 3 or 4 candidates (the top 3, and the
  fastest seed or the config of the fewest SM cycles where not among them) in 5 rounds, each job
  ``--remeasure-s`` (100 ms of timing and the job's own costs); the rounds run one after another.

Pipelines compared (each for 1 GPU and for every count of ``--devices``):
  before       every config of a round compiled for every shape's specialization (the
               build of ``only_configs``), the build on the search's thread, 2 rounds in flight
  pairs        each config compiled for its own shape only, otherwise as before
  async        pairs, and rounds built in threads of their own (their compiles overlap), with
               devices + 1 rounds in flight; ``--depth`` adds fixed depths
  streams      every shape's search a stream of its own (harness.streams), each batch a round
               sent as soon as built, pruning cut into chunks over every core (see
               ``simulate_streams``); the pipeline now
  streams-whole  streams, each shape's space pruned in one process (as before): what the
               chunked pruning adds
  spread-chunks  spread with the pruning in chunks over every core: what the streams add
  spread       async, the seeds' round sent before the spaces are pruned (its compiles, the
               agent's start and its measuring overlap the pruning), rounds measured as a stream
               (a device takes the next round's jobs when it has none left of the earlier ones,
               instead of waiting for the round's slowest job), and the winners' re-measure
               spread over the devices, every candidate of a shape on one device (every
               mode before it re-measures on one device)

The defaults are calibrated on the H200 measurements in docs/throughput.md: ``--measure-s``
0.055 (one GPU 64 % busy at 11.7 configs/s), and ``--compile-s`` chosen so that ``before``
gives the measured 11.7 (one GPU) and 12.9 (two GPUs) configs/s on 32 cores; ``--calibrate``
prints ``before`` over a range of compile costs to check that choice.

    python3 bench/pipeline_sim.py                       # 32 cores, 1 vs 2 GPUs, every mode
    python3 bench/pipeline_sim.py --cores 64 --devices 2,4,8 --modes async,spread
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

    def __init__(self, args, devices: int, shapes: int, per_pair: bool, overlap: bool, early: bool = False):
        self.a = args
        self.devices = devices
        self.per_pair = per_pair
        self.overlap = overlap  # builds in threads of their own (else on the search's thread)
        # pruning every shape's space before the first round: one after another, or (now) at once
        self.pruning = args.prune_s * (math.ceil(shapes / args.cores) if overlap else shapes)
        self.early = early  # the seeds' round is sent before the pruning (it overlaps it)
        self.now = 0.0 if early else self.pruning
        self.started = None  # when the agent's workers are ready
        self.free = [0.0] * devices  # when each device ends the jobs it was given
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
        if self.early and self.started is None:
            self.now = max(self.now, start + self.pruning)  # the search prunes while its seeds' round is built
        sent = max(built, self.sent_at)  # rounds reach the agent in order
        self.sent_at = sent
        if self.started is None:
            self.started = sent + a.start_s  # the agent and its GPU workers start with the first round
        if self.early:  # a stream: each device takes the round's jobs as soon as it is free
            devices = [max(sent, free, self.started) for free in self.free]
        else:  # the round starts when the last one ended on every device
            devices = [max(sent, self.agent_free, self.started) + a.agent_round_s] * self.devices
        done = 0.0
        for cfg, shape in pairs:
            t = a.measure_s * (0.7 + 0.6 * _unit("m" + repr(sorted(cfg.items())) + shape.id))
            i = devices.index(min(devices))
            devices[i] += t
            done = max(done, devices[i])
            self.busy += t
        self.free = devices
        self.agent_free = max(self.agent_free, done)
        return done

    def collect(self, done: float) -> None:
        self.now = max(self.now, done)

    def remeasure(self, shapes: list, spread: bool) -> float:
        """The winners' re-measure after the search: each shape's candidates, 5 rounds one after
        another; all on one device, or (``spread``) each shape's on one device, the shapes
        balanced over the devices by their jobs. Returns its seconds."""
        from harness.remeasure import spread_shapes

        a = self.a
        jobs = {s.id: 3 + (_unit("cands" + s.id) < 0.5) for s in shapes}
        slots = spread_shapes(jobs, self.devices if spread else 1)
        start = max(self.now, self.agent_free)
        t = start
        for _ in range(5):
            load = [0.0] * self.devices
            for sid, n in jobs.items():
                for j in range(n):
                    d = a.remeasure_s * (0.9 + 0.2 * _unit("r%s%d" % (sid, j)))
                    load[slots[sid]] += d
                    self.busy += d
            t += max(load) + a.agent_round_s
        self.now = self.agent_free = t
        return t - start

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

    chunked = mode == "spread-chunks"
    mode = "spread" if chunked else mode
    per_pair = mode != "before"
    overlap = mode in ("async", "spread")
    spread = mode == "spread"
    node = Node(args, devices, len(setup.shapes), per_pair, overlap, early=spread)
    if chunked:  # the pruning cut into chunks over every core
        node.pruning = args.prune_s * len(setup.shapes) / args.cores
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

    first = None
    if spread:
        from harness.rounds import seeds_round

        first = lambda live: seeds_round(live, setup.space, args.budget)  # noqa: E731
    rounds = drive(searches, setup.space, AskAhead(submit, collect, depth), args.budget, first_round=first)
    configs = sum(len(s.new) for s in searches)
    search_s, search_busy = node.now, node.busy
    remeasure_s = node.remeasure(setup.shapes, spread) if args.remeasure_s > 0 else 0.0
    return dict(mode="spread-chunks" if chunked else mode, devices=devices, depth=depth, rounds=rounds, configs=configs, seconds=search_s,
                asking=node.asking, rate=configs / search_s, busy=search_busy / (devices * search_s),
                compiles=node.compiles, build=node.build_wall(), remeasure=remeasure_s, wall=node.now,
                busy_all=node.busy / (devices * node.now))


def simulate_streams(setup: Setup, args, devices: int, chunked: bool = True) -> dict:
    """The pipeline now (``streams``): every shape's search a stream of its own with
    ``harness.streams.ahead_for`` batches in flight, asked right after each of its batches is told
    (the real strategies and the real ``_tell``); each batch a round built as soon as asked (its
    compiles in the shared slots, ``--batch-round-s`` of host work) and queued for the agent as
    soon as built; a device takes the next queued job as soon as it is free; the seeds' batches go
    out before the pruning, which is cut into chunks over every core (``--prune-s`` per shape
    over ``--cores``); the winners' re-measure spread over the devices."""
    from harness.strategies import Trial
    from harness.strategies.driver import PENDING, _tell
    from harness.rounds import seeds_round
    from harness.streams import ahead_for

    a = args
    node = Node(args, devices, len(setup.shapes), True, True, early=True)
    node.now = 0.0
    shapes = len(setup.shapes)  # pruned in chunks over every core, or (before) one process per shape
    pruned_at = a.prune_s * (shapes / a.cores if chunked else math.ceil(shapes / a.cores))
    searches = setup.searches(a.budget, a.batch, a.seed)
    ahead = ahead_for(devices, len(searches))
    rng = random.Random(a.seed)
    times = {}
    events = []  # (time, order, kind, payload)
    order = [0]
    queue = []  # built jobs waiting for a device: [(available, cfg, shape, flight)]
    flights = {id(s): [] for s in searches}
    host = [0.0]  # the search's thread: asks one at a time

    def push(t, kind, payload):
        order[0] += 1
        heapq.heappush(events, (t, order[0], kind, payload))

    def time_of(cfg, shape) -> float:
        k = (repr(sorted(cfg.items())), shape.id)
        if k not in times:
            times[k] = 1000.0 * (1.0 + 4.0 * _unit(k[0] + k[1])) * (1.0 + 0.01 * rng.random())
        return times[k]

    def submit(s, batch, now):
        s.pending += [dict(c) for c in batch.configs]
        flight = {"search": s, "batch": batch, "left": len(batch.configs), "back": False}
        flights[id(s)].append(flight)
        ready = now
        for vid in setup.variants([(c, s.shape) for c in batch.configs], True):
            if vid in node.compiled:
                ready = max(ready, node.compiled[vid])
                continue
            slot = heapq.heappop(node.slots)
            begin = max(slot, now)
            end = begin + a.compile_s * math.exp(a.compile_spread * _gauss(vid))
            heapq.heappush(node.slots, end)
            node.compiled[vid] = end
            node.compiles += 1
            ready = max(ready, end)
        built = ready + a.batch_round_s
        if node.started is None:
            node.started = built + a.start_s
        push(max(built, node.started), "built", flight)

    def ask(s, now):
        if now < pruned_at:
            return
        while s.stopped is None and len(flights[id(s)]) < ahead:
            left = a.budget - len(s.history) - len(s.pending)
            if left <= 0:
                if not s.pending:
                    s.stopped = "budget"
                return
            began = time.monotonic()
            batch = s.strategy.next_batch(s.history + [Trial(c, PENDING) for c in s.pending], setup.space,
                                          s.is_pruned, min(a.batch, left), a.budget)
            spent = time.monotonic() - began
            node.asking += spent
            host[0] = max(host[0], now) + spent * a.host_factor + a.ask_s
            if not batch.configs:
                if not s.pending:
                    s.stopped = "finished"
                return
            submit(s, batch, host[0])

    def dispatch(now):
        while queue:
            i = node.free.index(min(node.free))
            if node.free[i] > now:
                push(node.free[i], "free", None)
                return
            avail, cfg, shape, flight = queue.pop(0)
            t = a.measure_s * (0.7 + 0.6 * _unit("m" + repr(sorted(cfg.items())) + shape.id))
            node.free[i] = max(now, avail) + t
            node.busy += t
            flight["left"] -= 1
            if not flight["left"]:
                push(node.free[i], "done", flight)

    for s, batch in seeds_round(searches, setup.space, a.budget):
        submit(s, batch, 0.0)
    push(pruned_at, "pruned", None)
    end = 0.0
    while events:
        now, _, kind, payload = heapq.heappop(events)
        end = max(end, now)
        if kind == "pruned":
            for s in searches:
                if not flights[id(s)]:  # a shape with seeds out asks once they are told
                    ask(s, now)
        elif kind == "built":
            queue += [(now, c, payload["search"].shape, payload) for c in payload["batch"].configs]
        elif kind == "done":
            payload["back"] = True
            s = payload["search"]
            mine = flights[id(s)]
            while mine and mine[0]["back"]:
                f = mine.pop(0)
                del s.pending[:len(f["batch"].configs)]
                _tell([(s, f["batch"])], [[Trial(c, "ok", time_of(c, s.shape)) for c in f["batch"].configs]],
                      setup.space)
                ask(s, max(now, host[0]))
        dispatch(now)
    node.now = node.agent_free = end
    configs = sum(len(s.new) for s in searches)
    search_s, search_busy = node.now, node.busy
    remeasure_s = node.remeasure(setup.shapes, True) if a.remeasure_s > 0 else 0.0
    return dict(mode="streams" if chunked else "streams-whole", devices=devices, depth=ahead, rounds=sum(len(s.round_sizes) for s in searches),
                configs=configs, seconds=search_s, asking=node.asking, rate=configs / search_s,
                busy=search_busy / (devices * search_s), compiles=node.compiles, build=0.0, remeasure=remeasure_s,
                wall=node.now, busy_all=node.busy / (devices * node.now))


def line(r: dict) -> str:
    return ("%-7s %d GPU%s depth %d: %4d configs in %6.1fs = %5.1f configs/s, busy %3.0f%%; re-measure %5.1fs; "
            "wall %6.1fs, busy %3.0f%%; %4d compiles; building %5.1fs; asking here %4.1fs" % (
                r["mode"], r["devices"], "s" if r["devices"] > 1 else " ", r["depth"], r["configs"], r["seconds"],
                r["rate"], 100 * r["busy"], r["remeasure"], r["wall"], 100 * r["busy_all"], r["compiles"],
                r["build"], r["asking"]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes-file", default=str(REPO / "bench/shapes/llm_gemms.txt"))
    p.add_argument("--budget", type=int, default=96)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cores", type=int, default=32, help="compile slots (the node's cores)")
    p.add_argument("--devices", default="2", help="GPU counts to compare with one, e.g. 2 or 2,4,8")
    p.add_argument("--compile-s", type=float, default=0.33, help="core-seconds per compile (median)")
    p.add_argument("--compile-spread", type=float, default=0.5, help="sigma of the log-normal compile factor")
    p.add_argument("--round-s", type=float, default=0.4, help="host seconds per round besides compiling")
    p.add_argument("--prune-s", type=float, default=20.0,
                   help="seconds to prune one shape's space on one core (before the first round); the sm90 "
                        "matmul space has 1.2 million configs; 20 s reproduces the 4x H200 node's before-numbers")
    p.add_argument("--ask-s", type=float, default=0.0, help="model seconds per shape asked (besides the real asking)")
    p.add_argument("--host-factor", type=float, default=0.5,
                   help="the strategies' real asking time here counts this much (the node's CPU is faster)")
    p.add_argument("--measure-s", type=float, default=0.055, help="device seconds per config")
    p.add_argument("--agent-round-s", type=float, default=0.05, help="the agent's own seconds per round")
    p.add_argument("--start-s", type=float, default=2.0,
                   help="seconds from the first round reaching the agent to its GPU workers being ready")
    p.add_argument("--remeasure-s", type=float, default=0.15,
                   help="device seconds per job of the winners' re-measure (0: no re-measure)")
    p.add_argument("--batch-round-s", type=float, default=0.05,
                   help="streams: host seconds per batch's round besides compiling (one shape's pairs)")
    p.add_argument("--modes", default="before,pairs,async,spread,streams", help="which pipelines (see above)")
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
    counts = [1] + [int(x) for x in str(args.devices).split(",") if x.strip() and int(x) > 1]
    if args.calibrate:
        for c in (0.2, 0.3, 0.4, 0.5, 0.6):
            args.compile_s = c
            one, two = (simulate(setup, args, d, "before") for d in counts[:2])
            print("compile %.2fs: before 1 GPU %.1f configs/s, %d GPUs %.1f configs/s (measured: 11.7, 12.9)"
                  % (c, one["rate"], counts[1], two["rate"]))
        return 0
    for mode in args.modes.split(","):
        runs = {d: simulate_streams(setup, args, d, mode == "streams") if mode.startswith("streams")
                else simulate(setup, args, d, mode) for d in counts}
        for d in counts:
            print(line(runs[d]))
        print("%-7s %s" % (mode, "; ".join("%d GPUs: search configs/s x%.2f, wall %.3f of one GPU's (x%.2f)" % (
            d, runs[d]["rate"] / runs[1]["rate"], runs[d]["wall"] / runs[1]["wall"], runs[1]["wall"] / runs[d]["wall"])
            for d in counts[1:])))
    for depth in [int(x) for x in args.depth.split(",") if x.strip()]:
        for d in counts:
            print(line(simulate(setup, args, d, "async", depth)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
