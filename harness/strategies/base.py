"""What every search strategy shares: trials, batches, the candidate set, seeded randomness.

A strategy is a pure function of (seed, history): asked twice with the same history it proposes
the same batch. That is what makes it deterministic under a seed and lets it resume from the
rows already on disk: the history *is* the results CSV (see ``trials_from_rows``).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional, Sequence

from ..space import config_id as _config_id
from ..space import expand

OK = "ok"


@dataclass
class Trial:
    """One evaluation of one config: a measured time or a failure status."""

    config: dict
    status: str = OK
    time_ns: Optional[float] = None  # the measured time (the deciding estimator of its samples); None unless ok
    spread_ns: Optional[float] = None  # p80 - p20 of its iterations, where known
    fidelity: int = 1  # how long it was measured, in units of the briefest measurement
    noise: Optional[float] = None  # the noise of its deciding estimator (results column noise), where known
    estimator: Optional[str] = None  # min or median (results column estimator); None: median
    clock_mhz: Optional[float] = None  # the SM clock around the measurement (mean of clock_mhz_before/after), where known

    @property
    def ok(self) -> bool:
        return self.status == OK and self.time_ns is not None and math.isfinite(self.time_ns)


@dataclass
class Batch:
    """What a strategy asks to build and run next; an empty batch means it has finished."""

    configs: List[dict] = field(default_factory=list)
    fidelity: int = 1

    def __len__(self):
        return len(self.configs)


class StrategyError(Exception):
    """A strategy broke its contract (proposed a pruned config, overran its limit)."""


def key(config: dict) -> tuple:
    """A hashable identity of a config (independent of key order)."""
    return tuple(sorted(config.items()))


def config_id(config: dict) -> str:
    return _config_id(dict(config))


def derive_seed(seed, *salt) -> int:
    text = "|".join(str(s) for s in (seed,) + salt)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def rng_for(seed, *salt) -> random.Random:
    """A private RNG: the same (seed, salt) always gives the same stream."""
    return random.Random(derive_seed(seed, *salt))


class Problem:
    """The space, its pruning predicate, and the feasible candidates in a stable order.

    Each config is also coded as a vector of value indices (parameters are ordinal: tile sizes,
    stages), which the model-based strategies search in.
    """

    def __init__(self, space: dict, is_pruned: Callable[[dict], bool], feasible: Optional[Sequence[int]] = None):
        import numpy as np  # (here, not at the top: every command of the CLI imports this module)

        self.space = {name: list(values) for name, values in space.items()}
        self.names = list(self.space)
        self.is_pruned = is_pruned
        self._value_pos = [{_hashable(v): j for j, v in enumerate(self.space[n])} for n in self.names]
        if feasible is None:  # ``feasible``: the indices in expand(space) of the configs is_pruned keeps
            # (a tune passes the pruning's: its whole space is a million dicts, seconds per shape)
            feasible = [i for i, c in enumerate(expand(self.space)) if not is_pruned(c)]
        self.candidates, self.index, self.codes = self._at(feasible)
        sizes = np.array([max(1, len(self.space[n]) - 1) for n in self.names], dtype=np.float64)
        self._scale = 1.0 / sizes  # distances in units of a parameter's whole range
        self.preferred = None  # a mask of the candidates to search first (``prefer``), or None

    def prefer(self, configs) -> None:
        """Search ``configs`` first (those the compile cache holds for this shape: an earlier tune
        built them, harness.compile.cache.built_for): the seeded order starts with them
        (``Strategy._permutation``) and a strategy that repairs a proposal repairs it to one of them
        while any is free (``nearest_free``), so a second tune of a space compiles nothing while
        its budget fits in what the first built. Configs outside the space are ignored."""
        import numpy as np

        mask = np.zeros(len(self.candidates), dtype=bool)
        for cfg in configs:  # (read back from JSON: a tuple value came back a list)
            i = self.index.get(key({n: _hashable(v) for n, v in cfg.items()}))
            if i is not None:
                mask[i] = True
        self.preferred = mask if mask.any() else None

    def _at(self, feasible):
        """(candidates, index, codes) of the configs at ``feasible``, indices in expand(space), in
        their order: made column by column (a tune's host builds ten problems of up to 20,000
        configs while it builds its first rounds, and config by config that took seconds)."""
        import numpy as np

        sizes = [len(self.space[n]) for n in self.names]
        places = np.unravel_index(np.asarray(feasible, dtype=np.int64), sizes) if len(feasible) else \
            [np.zeros(0, dtype=np.int64) for _ in self.names]
        columns, items = [], []  # per parameter: each candidate's value, and its (name, value) item
        codes = np.zeros((len(feasible), len(self.names)), dtype=np.int32)
        for k, name in enumerate(self.names):
            columns.append(_objects(self.space[name])[places[k]].tolist())  # Python objects, not numpy's
            items.append(_objects([(name, v) for v in self.space[name]])[places[k]].tolist())
            first = np.array([self._value_pos[k][_hashable(v)] for v in self.space[name]], dtype=np.int32)
            codes[:, k] = first[places[k]]  # encode's position: a value's first in its list
        candidates = [dict(zip(self.names, row)) for row in zip(*columns)]
        by_name = sorted(range(len(self.names)), key=lambda k: self.names[k])  # key(): the items sorted by name
        index = {row: i for i, row in enumerate(zip(*(items[k] for k in by_name)))}
        return candidates, index, codes

    def __len__(self):
        return len(self.candidates)

    def encode(self, config: dict) -> tuple:
        return tuple(self._value_pos[i][_hashable(config[n])] for i, n in enumerate(self.names))

    def decode(self, code: Sequence[int]) -> dict:
        return {n: self.space[n][int(j)] for n, j in zip(self.names, code)}

    def contains(self, config: dict) -> bool:
        return key(config) in self.index

    def outside_preferred(self, config: dict) -> bool:
        """Some configs are preferred (``prefer``) and ``config`` is not one of them."""
        if self.preferred is None:
            return False
        i = self.index.get(key(config))
        return i is None or not self.preferred[i]

    def nearest_free(self, code: Sequence[int], taken: set, rng: random.Random) -> Optional[dict]:
        """The feasible candidate not in ``taken`` (a set of keys) nearest to ``code`` (L1 over
        value indices, each parameter scaled to its range), a preferred one while any is free
        (``prefer``); ties are broken by ``rng``."""
        import numpy as np

        if not len(self.candidates):
            return None
        free = np.ones(len(self.candidates), dtype=bool)
        for k in taken:
            i = self.index.get(k)
            if i is not None:
                free[i] = False
        if not free.any():
            return None
        if self.preferred is not None and (free & self.preferred).any():
            free &= self.preferred
        dist = (np.abs(self.codes - np.asarray(code, dtype=np.int32)) * self._scale).sum(axis=1)
        dist = np.where(free, dist, np.inf)
        best = np.flatnonzero(dist <= dist.min() + 1e-12)
        return self.candidates[int(best[rng.randrange(len(best))])]


def _objects(values: list):
    """``values`` as a numpy array of the objects themselves (tuples stay whole)."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _hashable(value):
    return value if not isinstance(value, list) else tuple(value)


class Summary:
    """The history condensed per config: every measurement in order, and the current view."""

    def __init__(self, history: Iterable[Trial]):
        self.trials = list(history)
        self.by_key = {}
        for t in self.trials:
            self.by_key.setdefault(key(t.config), []).append(t)

    def measured(self) -> set:
        return set(self.by_key)

    def latest(self, k) -> Optional[Trial]:
        """A config's latest successful measurement at its highest fidelity; None when its latest
        evaluation failed."""
        trials = self.by_key.get(k) or []
        if not trials or not trials[-1].ok:
            return None
        top = max(t.fidelity for t in trials if t.ok)
        return [t for t in trials if t.ok and t.fidelity == top][-1]

    def value(self, k) -> Optional[float]:
        """A config's time: that of ``latest``; None when its latest evaluation failed. Where
        every measurement at that fidelity was decided by its minimum (CPU targets), the lowest of
        them: a neighbour only ever slows a process down, so the lowest floor any process found is
        the config's (``remeasure.sift`` measures doubtful ones in more processes)."""
        trial = self.latest(k)
        if trial is None:
            return None
        peers = [t for t in self.by_key[k] if t.ok and t.fidelity == trial.fidelity]
        if all(t.estimator == "min" for t in peers):
            return min(t.time_ns for t in peers)
        return trial.time_ns

    def ranked(self, problem: Optional[Problem] = None) -> list:
        """(time, config_id, config) of every config measured ok, fastest first."""
        out = []
        for k, trials in self.by_key.items():
            if problem is not None and k not in problem.index:
                continue
            v = self.value(k)
            if v is not None:
                cfg = trials[-1].config
                out.append((v, config_id(cfg), cfg))
        out.sort(key=lambda item: (item[0], item[1]))
        return out


def best_trial(history: Iterable[Trial]) -> Optional[Trial]:
    """The fastest config so far (by ``Summary.value``), as a Trial; None when nothing ran ok."""
    summary = Summary(history)
    ranked = summary.ranked()
    if not ranked:
        return None
    cfg = ranked[0][2]
    last = [t for t in summary.by_key[key(cfg)] if t.ok][-1]
    return Trial(dict(cfg), OK, ranked[0][0], last.spread_ns, last.fidelity)


class Strategy:
    """Subclasses implement ``_propose``; ``next_batch`` checks the contract around it.

    A strategy declares its options once, in ``options``: name -> (help, default, type), the
    type one of int, float, bool, str. They become attributes of the instance (the default
    where not given), ``harness tune --strategy-option NAME=VALUE`` sets them (``parse_option``
    checks the text) and ``harness tune --help`` lists them. ``description`` is its line there."""

    name = "strategy"
    description = ""
    options = {}

    def __init__(self, seed: int = 0, batch_size: int = 8, **options):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError("strategy %s has no option %s; %s" % (self.name, ", ".join(unknown), options_line(type(self))))
        self.seed = seed
        self.batch_size = batch_size
        for option, (_, default, _) in self.options.items():
            setattr(self, option, options.get(option, default))
        self._problem_cache = None

    def has_problem(self, space: dict, is_pruned: Callable[[dict], bool]) -> bool:
        cached = self._problem_cache
        return cached is not None and cached[1] == is_pruned and cached[2] == space

    def problem(self, space: dict, is_pruned: Callable[[dict], bool], feasible=None) -> Problem:
        """The Problem of (space, is_pruned), built once (``feasible``: its configs' indices in
        expand(space), computed elsewhere: ``prepare_problems``)."""
        if not self.has_problem(space, is_pruned):
            problem = Problem(space, is_pruned, feasible)
            self._problem_cache = (space, is_pruned, {k: list(v) for k, v in space.items()}, problem)
            return problem
        return self._problem_cache[3]

    def next_batch(self, history: Sequence[Trial], space: dict, is_pruned: Callable[[dict], bool],
                   limit: Optional[int] = None, budget: Optional[int] = None) -> Batch:
        """At most ``limit`` (default: batch_size) feasible configs to evaluate next, or an
        empty batch when the strategy has nothing left to ask. ``budget`` is the total number
        of evaluations the run may use (history included); strategies that plan ahead use it."""
        limit = self.batch_size if limit is None else min(limit, self.batch_size)
        if limit <= 0:
            return Batch()
        problem = self.problem(space, is_pruned)
        batch = self._propose(Summary(history), problem, limit, budget)
        seen = set()
        for cfg in batch.configs:
            k = key(cfg)
            if k not in problem.index:
                raise StrategyError("%s proposed %r, which is pruned or outside the space" % (self.name, cfg))
            if k in seen:
                raise StrategyError("%s proposed %r twice in one batch" % (self.name, cfg))
            seen.add(k)
        if len(batch.configs) > limit:
            raise StrategyError("%s proposed %d configs, limit %d" % (self.name, len(batch.configs), limit))
        return batch

    def _propose(self, summary: Summary, problem: Problem, limit: int, budget: Optional[int]) -> Batch:
        raise NotImplementedError

    # helpers shared by strategies
    def _permutation(self, problem: Problem) -> list:
        """Candidate indices in a seeded random order, the preferred ones first (``Problem.prefer``;
        the same order for every round, so made once per problem: a shuffle of 20,000 indices at
        every ask was 2 % of a GPU tune's host time)."""
        made = getattr(self, "_order", None)
        if made is None or made[0] is not problem or made[1] is not problem.preferred:
            order = list(range(len(problem)))
            rng_for(self.seed, self.name, "perm", len(problem)).shuffle(order)
            if problem.preferred is not None:
                first = problem.preferred
                order = [i for i in order if first[i]] + [i for i in order if not first[i]]
            made = self._order = (problem, problem.preferred, order)
        return made[2]

    def _unmeasured_in_order(self, order, problem: Problem, measured: set, limit: int) -> list:
        out = []
        for i in order:
            cfg = problem.candidates[i]
            if key(cfg) not in measured:
                out.append(cfg)
                if len(out) >= limit:
                    break
        return out


OPTION_TYPES = (int, float, bool, str)
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def options_line(cls) -> str:
    """``cls``'s options as one line: name (type, default): help; ..."""
    if not cls.options:
        return "it takes no options"
    return "its options: " + "; ".join("%s (%s, default %s): %s" % (name, kind.__name__, default, text)
                                       for name, (text, default, kind) in cls.options.items())


def parse_option(cls, text: str) -> tuple:
    """``NAME=VALUE`` -> (name, value of the option's type) for strategy class ``cls``; a
    ValueError whose message is the whole story for an unknown name or a value of the wrong type."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name:
        raise ValueError("%r: write NAME=VALUE" % text)
    if name not in cls.options:
        raise ValueError("strategy %s has no option %r; %s" % (cls.name, name, options_line(cls)))
    kind = cls.options[name][2]
    try:
        if kind is bool:
            if value.lower() not in TRUE + FALSE:
                raise ValueError(value)
            return name, value.lower() in TRUE
        return name, kind(value)
    except ValueError:
        raise ValueError("%s=%s: %s of strategy %s is %s %s" % (
            name, value, name, cls.name, "an" if kind is int else "a", kind.__name__))


PARALLEL_PRUNING = 50_000  # configs x searches from which prepare_problems prunes in forked processes
_forked_work = None  # (space, predicates) for the forked processes of prepare_problems


def prepare_problems(strategies: Sequence["Strategy"], space: dict, predicates: Sequence[Callable[[dict], bool]],
                     jobs: int = 0) -> None:
    """Build each strategy's Problem for (space, its predicate) at once: pruning a big space is
    pure Python (several seconds of one core per shape for the sm90 matmul space of 1.2 million
    configs), so with several shapes it runs in forked processes on up to ``jobs`` (default: the
    cores) at a time. The space is cut into chunks, about two per core (``pruning_chunks``), and
    each chunk makes each of its configs once and asks every search's predicate about it, so that
    ten shapes do not make the same million configs ten times. Where fork is not available, or the
    work is small, the Problems are built when first asked for."""
    global _forked_work
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    import numpy as np

    todo = [(s, p) for s, p in zip(strategies, predicates) if not s.has_problem(space, p)]
    strategies, predicates = [s for s, _ in todo], [p for _, p in todo]
    size = math.prod(len(v) for v in space.values())
    jobs = jobs or os.cpu_count() or 1
    if jobs < 2 or size * len(strategies) < PARALLEL_PRUNING or "fork" not in multiprocessing.get_all_start_methods():
        return
    tasks = pruning_chunks(size, jobs, len(strategies))
    _forked_work = ({k: list(v) for k, v in space.items()}, list(predicates))
    try:
        with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=multiprocessing.get_context("fork"),
                                 initializer=_lower_priority) as pool:
            parts = list(pool.map(_feasible, tasks))
    finally:
        _forked_work = None
    for i, (strategy, is_pruned) in enumerate(zip(strategies, predicates)):
        mine = [part[i] for part in parts]
        strategy.problem(space, is_pruned, np.concatenate(mine) if mine else np.zeros(0, dtype=np.int64))


def pruning_chunks(size: int, jobs: int, searches: int = 1) -> list:
    """The forked pruning's tasks: (first, end) ranges of the space's ``size`` configs, in order,
    about two per core (so that a slow chunk does not hold the others up), none with fewer than
    ``PARALLEL_PRUNING`` // 4 configs x ``searches`` of work."""
    chunks = max(1, min(2 * jobs, size * max(1, searches) // max(1, PARALLEL_PRUNING // 4)))
    step = -(-size // chunks)
    return [(start, min(size, start + step)) for start in range(0, size, step)]


PRUNING_NICE = 15  # under the compile workers' 10: the agent measuring the seeds, then their compiles, come first


def _lower_priority() -> None:
    """A pruning process yields the cores to the agent on the same node (it measures the seeds
    meanwhile) and to the compile workers (the seeds' compiles, which the devices wait on; once
    they are built the workers idle until the pruned spaces are asked, and the pruning has the
    cores)."""
    import os

    try:
        os.nice(PRUNING_NICE)
    except OSError:
        pass


def _feasible(task) -> list:
    """For each search, the indices of the configs in [first, end) that its predicate keeps."""
    import itertools

    import numpy as np

    first, end = task
    space, predicates = _forked_work
    names = list(space)
    kept = [[] for _ in predicates]
    chunk = itertools.islice(itertools.product(*(space[n] for n in names)), first, end)  # expand's order
    for j, values in enumerate(chunk, first):
        config = dict(zip(names, values))
        for mine, is_pruned in zip(kept, predicates):
            if not is_pruned(config):
                mine.append(j)
    return [np.array(mine, dtype=np.int64) for mine in kept]
