"""The one search loop: ask each strategy for a batch, evaluate only those configs, record, repeat.

``drive`` runs any number of searches (one per shape) in lockstep rounds; ``harness.rounds``
evaluates a round by building, pushing and running it on a target, the simulator by replaying a
recording, ``tune_rounds`` wraps one search with a plain ``evaluate_batch(configs)``.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from remote_agent.contract import PRUNED

from .base import Batch, Strategy, StrategyError, Trial, best_trial, key, prepare_problems
from .history import row_config, trials_from_rows

STOP_BUDGET = "budget"  # the evaluations allowed are used up
STOP_TIME = "time_limit"  # time_limit seconds have passed
STOP_FINISHED = "finished"  # the strategy has nothing left to ask
STOP_NO_RESULTS = "no_results"  # a round came back empty (interrupted evaluator)
STOP_REQUESTED = "stopped"  # the caller's stop(history) said so
PENDING = "pending"  # a Trial's status while it is being measured (asking ahead)


@dataclass
class TuneResult:
    history: List[Trial]  # everything: the history passed in, then this call's trials
    new: List[Trial]  # this call's trials only
    best: Optional[Trial]
    rounds: int
    stopped: str
    seconds: float
    round_sizes: List[int] = field(default_factory=list)

    @property
    def evaluations(self) -> int:
        return len(self.history)


def _accepts_fidelity(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "fidelity" or p.kind == p.VAR_KEYWORD for p in params)


def normalize_results(results, batch: Batch, space: dict) -> List[Trial]:
    """What evaluate_batch returned -> one Trial per config of the batch that has a result.

    It may return Trials, dicts with ``config``/``status``/``time_ns``, or results CSV rows
    (dicts with ``status`` and ``cfg_*`` columns; several shapes per config are combined; a
    ``pruned`` row is a failed trial of its config)."""
    results = list(results or [])
    rows = [r for r in results if isinstance(r, dict) and "config" not in r]
    trials = [r for r in results if isinstance(r, Trial)]
    trials += [Trial(dict(r["config"]), r.get("status", "ok"), r.get("time_ns"), r.get("spread_ns"),
                     r.get("fidelity", batch.fidelity))
               for r in results if isinstance(r, dict) and "config" in r]
    if rows:
        trials += [dataclasses.replace(t, fidelity=batch.fidelity) for t in trials_from_rows(rows, space or None)]
    # a config asked for and pruned by the build (a resource only the compile could count) is a
    # failed trial: the strategy learns it, and the search goes on
    trials += [Trial(row_config(r, space or None), PRUNED, None, None, batch.fidelity)
               for r in rows if r.get("status") == PRUNED]
    wanted = {key(c) for c in batch.configs}
    out, got = [], set()
    for t in trials:
        k = key(t.config)
        if k in wanted and k not in got:
            got.add(k)
            if t.fidelity != batch.fidelity and t.fidelity == 1:
                t = dataclasses.replace(t, fidelity=batch.fidelity)
            out.append(t)
    return out


@dataclass
class ShapeSearch:
    """One strategy searching one shape: what it has measured (``history``: the rows on disk it
    resumed from, then this call's trials, ``new``) and why it stopped (None while it runs)."""

    strategy: Strategy
    is_pruned: Callable[[dict], bool]
    history: List[Trial] = field(default_factory=list)
    shape: object = None  # a harness.shapes.Shape, where the search has one
    resumed: int = 0  # trials found on disk
    new: List[Trial] = field(default_factory=list)
    stopped: Optional[str] = None
    round_sizes: List[int] = field(default_factory=list)
    pending: List[dict] = field(default_factory=list)  # configs submitted and not yet told (drive ahead)
    prefer: List[dict] = field(default_factory=list)  # configs to search first (Problem.prefer)

    @property
    def best(self) -> Optional[Trial]:
        return best_trial(self.history)


def apply_preferences(searches: Sequence[ShapeSearch], space: dict) -> None:
    """Give each search's Problem the configs it is to search first (``ShapeSearch.prefer``)."""
    for s in searches:
        if s.prefer:
            s.strategy.problem(space, s.is_pruned).prefer(s.prefer)


@dataclass
class AskAhead:
    """An evaluator ``drive`` asks ahead of: ``submit(asks, fidelity) -> handle`` starts a round,
    ``collect(handle)`` returns one result list per ask. ``depth``: rounds submitted and not yet
    told at most (an int, or a callable asked before each round: the devices may be learned
    from the first round); 2: the next round is asked while one is measured."""

    submit: Callable
    collect: Callable
    depth: object = 2

    def rounds_in_flight(self) -> int:
        return max(1, int(self.depth() if callable(self.depth) else self.depth))


def drive(searches: Sequence[ShapeSearch], space: dict, evaluate: Callable, budget: Optional[int] = None,
          time_limit: Optional[float] = None, *, on_round: Optional[Callable] = None,
          stop: Optional[Callable] = None, clock: Callable[[], float] = time.monotonic,
          first_round: Optional[Callable] = None) -> int:
    """The search loop: drive every search in lockstep rounds until each is spent. Returns the
    number of rounds.

    A search stops when ``stop(history)`` says so, when its ``budget`` of evaluations (its
    history included) is used, when its strategy has nothing left to ask, or when a round brings
    nothing back for it. All stop at ``time_limit`` seconds: the first round always runs (nothing
    is known of its length yet, so no round is asked ahead of its results); a later one starts
    only where at least one evaluation is expected to fit in the time left at this call's pace
    (the evaluations in flight counted), and it is shrunk to what fits.

    evaluate(asks, fidelity) -> one result list per ask, where ``asks`` is [(ShapeSearch, Batch)]
    of one fidelity (halving asks for f-times longer measurements, so a round of mixed fidelities
    is evaluated once per fidelity). Results: Trials, {"config", "status", "time_ns"} dicts, or
    results CSV rows. on_round(round_number, fidelity, asks) after each evaluation.

    Asking ahead: when ``evaluate`` is an ``AskAhead`` (``submit(asks, fidelity) -> handle``,
    ``collect(handle) -> results per ask``, ``depth``), up to ``depth`` rounds are submitted
    before the oldest is collected, so later rounds are built while earlier ones are measured;
    rounds are told in the order they were submitted. A strategy with ``asks_ahead`` is asked
    with the configs in flight as ``pending`` trials (never proposed again, counted against the
    budget, told like the liar values of a batch); any other waits for its last batch to be told.

    ``first_round(searches) -> [(ShapeSearch, Batch)]`` (asking ahead only): a round known
    before any space is pruned (the warm start's seeds, each checked by its search's predicate),
    submitted first, so that its build, the agents' start and its measuring overlap the pruning
    of every shape's space; its configs are pending like any round's.
    """
    start = clock()
    number = 0
    ahead = hasattr(evaluate, "submit")
    live = [s for s in searches if s.stopped is None]
    in_flight = []  # ahead: [(round number, fidelity, asks, handle)] submitted, results not yet told
    if ahead and first_round is not None:
        asks = [(s, b) for s, b in first_round(live) if b.configs]
        if asks:
            number += 1
            for s, b in asks:
                s.pending += [dict(c) for c in b.configs]
            in_flight.append((number, 1, asks, evaluate.submit(asks, 1)))
    prepare_problems([s.strategy for s in live], space, [s.is_pruned for s in live])
    apply_preferences(live, space)
    told = 0  # ahead: rounds told
    while True:
        waiting = {id(s) for _, _, group, _ in in_flight for s, _ in group}
        limits = []
        for s in searches:
            if s.stopped is not None:
                continue
            if id(s) in waiting and not getattr(s.strategy, "asks_ahead", False):
                continue  # it asks again once its last batch is told
            if stop is not None and stop(s.history):
                s.stopped = STOP_REQUESTED
                continue
            limit = batch_limit(s, budget)
            if limit:
                limits.append((s, limit))
        if limits and time_limit is not None and number:  # the first round always runs
            fit = _evaluations_that_fit(clock() - start, time_limit, sum(len(s.new) for s in searches))
            if fit is not None:
                fit -= sum(len(s.pending) for s in searches)
            if fit is not None and fit < 1:
                for s, _ in limits:
                    s.stopped = STOP_TIME
                limits = []
            if fit is not None:
                limits = [(s, min(limit, max(1, fit // len(limits)))) for s, limit in limits]
        asks = []
        for s, limit in limits:
            batch = s.strategy.next_batch(s.history + [Trial(c, PENDING) for c in s.pending], space, s.is_pruned,
                                          limit, budget)
            if not batch.configs:
                if not s.pending:
                    s.stopped = STOP_FINISHED
                continue
            if len(batch.configs) > limit:
                raise StrategyError("%s overran its limit" % s.strategy.name)
            asks.append((s, batch))
        if asks:
            number += 1
        for fidelity in sorted({b.fidelity for _, b in asks}):
            group = [(s, b) for s, b in asks if b.fidelity == fidelity]
            if not ahead:
                _tell(group, evaluate(group, fidelity), space)
                if on_round is not None:
                    on_round(number, fidelity, group)
                continue
            for s, b in group:
                s.pending += [dict(c) for c in b.configs]
            in_flight.append((number, fidelity, group, evaluate.submit(group, fidelity)))
        if not in_flight:
            if not asks:
                break
            continue
        # ahead: up to depth rounds in flight; the oldest is told before the next is asked. With
        # a time limit, none is asked ahead of the first results (nothing is known of the pace)
        depth = (evaluate.rounds_in_flight() if hasattr(evaluate, "rounds_in_flight") else 2) if asks else 0
        if time_limit is not None and not told:
            depth = 1
        while in_flight and len(in_flight) >= depth:
            told += 1
            n, fidelity, group, handle = in_flight.pop(0)
            for s, b in group:
                del s.pending[:len(b.configs)]
            _tell(group, evaluate.collect(handle), space)
            if on_round is not None:
                on_round(n, fidelity, group)
    return number


def _tell(group, results_per_ask, space) -> None:
    for (s, b), results in zip(group, results_per_ask):
        trials = normalize_results(results, b, space)
        s.history.extend(trials)
        s.new.extend(trials)
        s.round_sizes.append(len(trials))
        if not trials:
            s.stopped = STOP_NO_RESULTS


def batch_limit(s, budget: Optional[int]) -> int:
    """How many configs search ``s`` may ask next: its batch size, cut to what is left of
    ``budget`` (its history and its pending asks count). 0 once the budget is spent; then, with
    nothing pending either, the search stops with STOP_BUDGET."""
    limit = s.strategy.batch_size
    if budget is None:
        return limit
    left = budget - len(s.history) - len(s.pending)
    if left <= 0:
        if not s.pending:
            s.stopped = STOP_BUDGET
        return 0
    return min(limit, left)


def _evaluations_that_fit(elapsed: float, time_limit: float, done: int) -> Optional[int]:
    """How many more evaluations fit in the time left at the pace so far (None: unknown)."""
    if elapsed >= time_limit:
        return 0
    if not done or elapsed <= 0:
        return None
    return int((time_limit - elapsed) / (elapsed / done))


def tune_rounds(strategy: Strategy, space: dict, is_pruned: Callable[[dict], bool],
                evaluate_batch: Callable, budget: Optional[int] = None, time_limit: Optional[float] = None,
                history: Optional[Sequence[Trial]] = None, *,
                on_round: Optional[Callable] = None, stop: Optional[Callable] = None,
                clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """``drive`` one strategy on one problem until its budget, the time limit, or the space is spent.

    strategy       a Strategy (see ``get_strategy``)
    space          {parameter: [values]}; is_pruned(config) -> bool for this shape and target
    evaluate_batch evaluate_batch(configs) -> results, or evaluate_batch(configs, fidelity=f)
                   when it accepts ``fidelity`` (halving asks for f-times longer measurements).
                   Results: Trials, {"config", "status", "time_ns"} dicts, or results CSV rows.
    budget         total evaluations, those in ``history`` included (None: no limit)
    time_limit     seconds for this call (see ``drive``)
    history        Trials already measured (``load_history(results.csv, ...)``): resume point
    on_round       on_round(round_number, batch, trials) after every round
    stop           stop(history) -> True ends the run (the simulator stops at its target)
    """
    with_fidelity = _accepts_fidelity(evaluate_batch)
    search = ShapeSearch(strategy, is_pruned, list(history or []))

    def evaluate(asks, fidelity):
        ((_, batch),) = asks
        configs = list(batch.configs)
        return [evaluate_batch(configs, fidelity=fidelity) if with_fidelity else evaluate_batch(configs)]

    def each_round(number, fidelity, asks):
        ((s, batch),) = asks
        on_round(number, batch, s.new[len(s.new) - s.round_sizes[-1]:])

    begin = clock()
    rounds = drive([search], space, evaluate, budget, time_limit, on_round=each_round if on_round else None,
                   stop=stop, clock=clock)
    return TuneResult(search.history, search.new, search.best, rounds, search.stopped or STOP_FINISHED,
                      clock() - begin, search.round_sizes)


def pruning_predicate(rules, shapes, target, resource_rule: Optional[Callable] = None) -> Callable[[dict], bool]:
    """is_pruned(config) for a search over several shapes at once: a config is pruned when every
    shape prunes it (by ``rules`` via harness.space.first_pruning_rule, or by
    ``resource_rule(config, shape)``, e.g. a compiler's ``resource_rule``, returning a Rule)."""
    from ..space import first_pruning_rule

    shapes = list(shapes)

    def is_pruned(config: dict) -> bool:
        for shape in shapes:
            if first_pruning_rule(rules, config, shape, target) is not None:
                continue
            if resource_rule is not None and resource_rule(config, shape) is not None:
                continue
            return False
        return True

    return is_pruned
