"""Replay a strategy against a recorded full-space results CSV (every config measured once).

evaluate_batch looks each config up in the recording instead of building and running it, so
strategies are compared in seconds and tested deterministically. Optional noise (``noise`` times
the row's own p20..p80 spread, shrinking with the square root of the fidelity) lets the
noise-aware parts be exercised too.

    python -m harness.strategies.simulate tests/data/cpu_fullspace/matmul_local_x86_64.csv \\
        --strategy bayes --seeds 20 --within 0.03
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from remote_agent.contract import CONFIG_PREFIX, PRUNED

from .base import OK, Strategy, Trial, config_id, derive_seed, key
from .driver import tune_rounds
from .history import parse_value, read_rows, row_config, row_trial

NORMAL_P20_P80 = 1.6832  # p80 - p20 of a standard normal


@dataclass
class Recorded:
    """One shape of a recorded full-space run."""

    path: str
    shape_id: str
    space: dict
    table: Dict[tuple, Trial]  # key -> the recorded Trial (status and time)
    pruned: set = field(default_factory=set)  # keys recorded as pruned

    def __post_init__(self):
        times = [t.time_ns for t in self.table.values() if t.ok]
        self.best_ns = min(times) if times else None
        self.best_config = next((t.config for t in self.table.values()
                                 if t.ok and t.time_ns == self.best_ns), None)

    def is_pruned(self, config: dict) -> bool:
        """Pruned, or never recorded (so it cannot be replayed)."""
        k = key(config)
        return k in self.pruned or k not in self.table

    @property
    def feasible(self) -> int:
        return len(self.table)

    @property
    def space_size(self) -> int:
        n = 1
        for values in self.space.values():
            n *= len(values)
        return n

    def true_time(self, config: dict) -> Optional[float]:
        t = self.table.get(key(config))
        return t.time_ns if t is not None and t.ok else None


def space_from_rows(rows: List[dict]) -> dict:
    """The space a recording covers: every value seen per ``cfg_`` column, in sorted order."""
    names = []
    for row in rows[:1]:
        names = [c[len(CONFIG_PREFIX):] for c in row if c and c.startswith(CONFIG_PREFIX)]
    space = {}
    for n in names:
        values = list(dict.fromkeys(parse_value(r[CONFIG_PREFIX + n]) for r in rows
                                    if r.get(CONFIG_PREFIX + n) not in (None, "")))
        try:
            values.sort()
        except TypeError:
            pass
        space[n] = values
    return space


def load_recorded(path, shape_id: Optional[str] = None) -> List[Recorded]:
    """One Recorded per shape in the file (or just ``shape_id``)."""
    rows = read_rows(path)
    if not rows:
        raise ValueError("%s has no results rows" % path)
    space = space_from_rows(rows)
    shapes = list(dict.fromkeys(r["shape_id"] for r in rows))
    if shape_id is not None:
        if shape_id not in shapes:
            raise ValueError("%s has no shape %s (it has %s)" % (path, shape_id, ", ".join(shapes)))
        shapes = [shape_id]
    out = []
    for s in shapes:
        table, pruned = {}, set()
        for r in rows:
            if r["shape_id"] != s:
                continue
            if r["status"] == PRUNED:
                pruned.add(key(row_config(r, space)))
                continue
            t = row_trial(r, space)
            k = key(t.config)
            if k not in table or (t.ok and not table[k].ok):
                table[k] = t  # one row per config; a later ok row wins over a failure
        out.append(Recorded(str(path), s, space, table, pruned))
    return out


class Replay:
    """evaluate_batch over a recording: ``replay(configs, fidelity=1) -> [Trial]``."""

    def __init__(self, recorded: Recorded, noise: float = 0.0, seed: int = 0):
        self.recorded = recorded
        self.noise = noise
        self.seed = seed
        self.calls = 0
        self.evaluations = 0
        self._count: Dict[tuple, int] = {}

    def __call__(self, configs, fidelity: int = 1) -> List[Trial]:
        import random

        self.calls += 1
        out = []
        for cfg in configs:
            k = key(cfg)
            rec = self.recorded.table.get(k)
            if rec is None:
                raise KeyError("config %r was not recorded (pruned or outside the space)" % (cfg,))
            n = self._count.get(k, 0)
            self._count[k] = n + 1
            self.evaluations += 1
            if not rec.ok:
                out.append(Trial(dict(cfg), rec.status, None, None, fidelity))
                continue
            t = rec.time_ns
            spread = rec.spread_ns or 0.0
            if self.noise > 0 and spread > 0:
                sigma = self.noise * spread / t / NORMAL_P20_P80 / math.sqrt(max(1, fidelity))
                rng = random.Random(derive_seed(self.seed, "noise", config_id(cfg), n))
                t = t * math.exp(rng.gauss(0.0, sigma))
            out.append(Trial(dict(cfg), OK, t, spread / math.sqrt(max(1, fidelity)), fidelity))
        return out


@dataclass
class SimResult:
    strategy: str
    seed: int
    shape_id: str
    feasible: int  # configs the strategy could measure
    evaluations: int  # evaluations run
    distinct: int  # distinct configs measured
    to_target: Optional[int]  # evaluations until the strategy's own best was within `within`
    found_ratio: Optional[float]  # true time of the strategy's final pick / true best
    stopped: str

    @property
    def fraction(self) -> Optional[float]:
        return None if self.to_target is None else self.to_target / self.feasible


def evaluations_to_target(history: List[Trial], recorded: Recorded, within: float) -> Optional[int]:
    """The first n such that, after n evaluations, the config the strategy would pick (its best
    measured so far) is truly within ``within`` of the recording's best. None if never."""
    if recorded.best_ns is None:
        return None
    target = recorded.best_ns * (1.0 + within)
    values: Dict[tuple, tuple] = {}  # key -> (fidelity, measured value or None)
    best_k, best_v = None, math.inf
    for n, t in enumerate(history, 1):
        k = key(t.config)
        fid = t.fidelity if t.ok else 0
        old = values.get(k)
        if old is None or fid >= old[0] or not t.ok:
            values[k] = (fid, t.time_ns if t.ok else None)
        v = values[k][1]
        if k == best_k and (v is None or v > best_v):
            # the incumbent got worse (a longer re-measure): look again
            live = [(vv, config_id(dict(kk)), kk) for kk, (_, vv) in values.items() if vv is not None]
            best_v, _, best_k = min(live) if live else (math.inf, "", None)
        elif v is not None and v < best_v:
            best_k, best_v = k, v
        if best_k is not None:
            truth = recorded.table[best_k].time_ns if best_k in recorded.table else None
            if truth is not None and truth <= target:
                return n
    return None


def simulate(strategy: Strategy, recorded: Recorded, budget: Optional[int] = None, within: float = 0.03,
             noise: float = 0.0, stop_at_target: bool = True, history: Optional[List[Trial]] = None) -> SimResult:
    """Run ``strategy`` against the recording; stop once its pick is within ``within`` (or at
    the budget, or when it finishes)."""
    replay = Replay(recorded, noise=noise, seed=strategy.seed)
    stop = None
    if stop_at_target:
        stop = lambda h: evaluations_to_target(h, recorded, within) is not None  # noqa: E731
    result = tune_rounds(strategy, recorded.space, recorded.is_pruned, replay, budget=budget,
                         history=history, stop=stop)
    best = result.best
    ratio = None
    if best is not None and recorded.best_ns:
        ratio = recorded.true_time(best.config) / recorded.best_ns
    return SimResult(strategy.name, strategy.seed, recorded.shape_id, recorded.feasible,
                     len(result.history), len({key(t.config) for t in result.history}),
                     evaluations_to_target(result.history, recorded, within), ratio, result.stopped)


def sweep(strategy_name: str, recorded: Recorded, seeds=range(20), within: float = 0.03,
          batch_size: int = 8, noise: float = 0.0, budget: Optional[int] = None, **options) -> List[SimResult]:
    from . import get_strategy

    return [simulate(get_strategy(strategy_name, seed=s, batch_size=batch_size, **options), recorded,
                     budget=budget, within=within, noise=noise) for s in seeds]


def median_to_target(results: List[SimResult]) -> Optional[float]:
    """Median evaluations to the target; a run that never got there counts as infinite."""
    values = [r.to_target if r.to_target is not None else math.inf for r in results]
    m = statistics.median(values)
    return None if math.isinf(m) else m


def main(argv=None) -> int:
    from . import names as strategy_names

    parser = argparse.ArgumentParser(prog="python -m harness.strategies.simulate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="recorded full-space results CSV(s)")
    parser.add_argument("--shape", default=None)
    parser.add_argument("--strategy", default="all", help="a name, comma-separated names, or all")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--within", type=float, default=0.03)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--noise", type=float, default=0.0)
    args = parser.parse_args(argv)
    names = strategy_names() if args.strategy == "all" else args.strategy.split(",")
    print("%-28s %-10s %8s %8s %9s %9s" % ("shape", "strategy", "feasible", "median", "fraction", "reached"))
    for path in args.results:
        for rec in load_recorded(path, args.shape):
            for name in names:
                res = sweep(name, rec, range(args.seeds), args.within, args.batch_size, args.noise, args.budget)
                med = median_to_target(res)
                reached = sum(r.to_target is not None for r in res)
                print("%-28s %-10s %8d %8s %9s %6d/%d" % (
                    rec.shape_id, name, rec.feasible, "-" if med is None else "%g" % med,
                    "-" if med is None else "%.1f%%" % (100.0 * med / rec.feasible), reached, len(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
