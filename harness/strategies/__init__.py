"""Search strategies: find the best config without measuring all of them.

A strategy proposes the next batch of configs from the history of measured configs:

    strategy = get_strategy("bayes", seed=0, batch_size=8)
    batch = strategy.next_batch(history, space, is_pruned, limit, budget)   # -> Batch

and ``tune_rounds`` drives it, calling ``evaluate_batch(configs)`` once per round (the CLI wires
that to a build of exactly those configs + push + run). Every strategy is a pure function of its
seed and the history, so it is deterministic and resumes from the results CSV:
``load_history(results_csv, space, shape_id)``.

Strategies: exhaustive, random, halving, bayes (optuna TPE), genetic. ``Seeded`` (seeded.py)
warm-starts any of them. ``default_for`` picks what ``harness tune`` runs without --strategy.
"""

from __future__ import annotations

from .base import Batch, Problem, Strategy, StrategyError, Trial, best_trial, config_id, key
from .driver import TuneResult, normalize_results, pruning_predicate, tune_rounds
from .history import load_history, read_rows, row_config, trials_from_rows

DEFAULT = "exhaustive"
# Without --strategy: every config where the space is small (CPU spaces: 250 configs), else a
# budgeted search. Warm-started genetic had the smallest worst pick at a budget of 96 on the
# recorded H200 full-space runs (tests/data/gpu_fullspace; docs/gpu.md, "The default search", has
# the replay) and needs no optuna.
DEFAULT_SEARCH = "genetic"
DEFAULT_BUDGET = 96
EXHAUSTIVE_UP_TO = 1000


def default_for(target, space: dict) -> tuple:
    """(strategy, budget per shape) of a tune without --strategy on ``target`` over ``space``."""
    size = 1
    for values in space.values():
        size *= len(values)
    if target.is_gpu or size > EXHAUSTIVE_UP_TO:
        return DEFAULT_SEARCH, DEFAULT_BUDGET
    return "exhaustive", None


def _registry():
    from .bayes import Bayes
    from .exhaustive import Exhaustive
    from .genetic import Genetic
    from .halving import Halving
    from .random import RandomSearch

    return {cls.name: cls for cls in (Exhaustive, RandomSearch, Halving, Bayes, Genetic)}


STRATEGIES = ("exhaustive", "random", "halving", "bayes", "genetic")


def get_strategy(name: str = DEFAULT, seed: int = 0, batch_size: int = 8, **options) -> Strategy:
    """A strategy by its --strategy name; ``options`` go to its constructor (e.g. eta=3)."""
    registry = _registry()
    if name not in registry:
        import difflib

        close = difflib.get_close_matches(name, list(registry), n=1)
        hint = " (did you mean %r?)" % close[0] if close else ""
        raise ValueError("unknown strategy %r%s; choose from %s" % (name, hint, ", ".join(STRATEGIES)))
    return registry[name](seed=seed, batch_size=batch_size, **options)


__all__ = [
    "Batch", "Problem", "Strategy", "StrategyError", "Trial", "TuneResult", "STRATEGIES", "DEFAULT",
    "DEFAULT_BUDGET", "DEFAULT_SEARCH", "best_trial", "config_id", "default_for", "get_strategy", "key",
    "load_history", "normalize_results", "pruning_predicate",
    "read_rows",
    "row_config", "trials_from_rows", "tune_rounds",
]
