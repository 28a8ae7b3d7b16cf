"""Drive a strategy in rounds: ask a batch, build and run only that batch, record, repeat."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from .base import Batch, Strategy, StrategyError, Trial, best_trial, key
from .history import trials_from_rows

STOP_BUDGET = "budget"  # the evaluations allowed are used up
STOP_TIME = "time_limit"  # time_limit seconds have passed
STOP_FINISHED = "finished"  # the strategy has nothing left to ask
STOP_NO_RESULTS = "no_results"  # a round came back empty (interrupted evaluator)
STOP_REQUESTED = "stopped"  # the caller's stop(history) said so


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
    (dicts with ``status`` and ``cfg_*`` columns; several shapes per config are combined)."""
    results = list(results or [])
    rows = [r for r in results if isinstance(r, dict) and "config" not in r]
    trials = [r for r in results if isinstance(r, Trial)]
    trials += [Trial(dict(r["config"]), r.get("status", "ok"), r.get("time_ns"), r.get("spread_ns"),
                     r.get("fidelity", batch.fidelity))
               for r in results if isinstance(r, dict) and "config" in r]
    if rows:
        trials += [Trial(t.config, t.status, t.time_ns, t.spread_ns, batch.fidelity)
                   for t in trials_from_rows(rows, space or None)]
    wanted = {key(c) for c in batch.configs}
    out, got = [], set()
    for t in trials:
        k = key(t.config)
        if k in wanted and k not in got:
            got.add(k)
            if t.fidelity != batch.fidelity and t.fidelity == 1:
                t = Trial(t.config, t.status, t.time_ns, t.spread_ns, batch.fidelity)
            out.append(t)
    return out


def tune_rounds(strategy: Strategy, space: dict, is_pruned: Callable[[dict], bool],
                evaluate_batch: Callable, budget: Optional[int] = None, time_limit: Optional[float] = None,
                history: Optional[Sequence[Trial]] = None, *,
                on_round: Optional[Callable] = None, stop: Optional[Callable] = None,
                clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """Run ``strategy`` until its budget, the time limit, or the space is spent.

    strategy       a Strategy (see ``get_strategy``)
    space          {parameter: [values]}; is_pruned(config) -> bool for this shape and target
    evaluate_batch evaluate_batch(configs) -> results, or evaluate_batch(configs, fidelity=f)
                   when it accepts ``fidelity`` (halving asks for f-times longer measurements).
                   Results: Trials, {"config", "status", "time_ns"} dicts, or results CSV rows.
    budget         total evaluations, those in ``history`` included (None: no limit)
    time_limit     seconds for this call; the first round always runs, and the last round is
                   shrunk to the time left (from this call's seconds per evaluation so far); no
                   round starts when not even one evaluation is expected to fit
    history        Trials already measured (``load_history(results.csv, ...)``): resume point
    on_round       on_round(round_number, batch, trials) after every round
    stop           stop(history) -> True ends the run (the simulator stops at its target)
    """
    start = clock()
    history = list(history or [])
    new: List[Trial] = []
    with_fidelity = _accepts_fidelity(evaluate_batch)
    rounds, sizes, stopped = 0, [], STOP_FINISHED
    while True:
        if stop is not None and stop(history):
            stopped = STOP_REQUESTED
            break
        limit = strategy.batch_size
        if budget is not None:
            left = budget - len(history)
            if left <= 0:
                stopped = STOP_BUDGET
                break
            limit = min(limit, left)
        if time_limit is not None and rounds:  # the first round always runs
            elapsed = clock() - start
            if elapsed >= time_limit:
                stopped = STOP_TIME
                break
            if new:
                per_eval = elapsed / len(new)
                if per_eval > 0:
                    fit = int((time_limit - elapsed) / per_eval)
                    if fit < 1:  # not even one evaluation is expected to finish in time
                        stopped = STOP_TIME
                        break
                    limit = min(limit, fit)
        batch = strategy.next_batch(history, space, is_pruned, limit, budget)
        if not batch.configs:
            stopped = STOP_FINISHED
            break
        if len(batch.configs) > limit:
            raise StrategyError("%s overran its limit" % strategy.name)
        if with_fidelity:
            results = evaluate_batch(list(batch.configs), fidelity=batch.fidelity)
        else:
            results = evaluate_batch(list(batch.configs))
        trials = normalize_results(results, batch, space)
        rounds += 1
        sizes.append(len(trials))
        history.extend(trials)
        new.extend(trials)
        if on_round is not None:
            on_round(rounds, batch, trials)
        if not trials:
            stopped = STOP_NO_RESULTS
            break
    return TuneResult(history, new, best_trial(history), rounds, stopped, clock() - start, sizes)


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
