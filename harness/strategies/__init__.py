"""Search strategies: find the best config without measuring all of them.

A strategy proposes the next batch of configs from the history of measured configs:

    strategy = get_strategy("bayes", seed=0, batch_size=8)
    batch = strategy.next_batch(history, space, is_pruned, limit, budget)   # -> Batch

and ``tune_rounds`` drives it, calling ``evaluate_batch(configs)`` once per round (the CLI wires
that to a build of exactly those configs + push + run). Every strategy is a pure function of its
seed and the history, so it is deterministic and resumes from the results CSV:
``load_history(results_csv, space, shape_id)``.

Strategies: exhaustive, random, halving, bayes (optuna TPE), genetic, and those of your own:
folders named by $HARNESS_STRATEGIES_PATH (``:``-separated) hold modules ``<name>.py`` or
packages ``<name>/__init__.py`` exporting ``STRATEGY``, a ``base.Strategy`` subclass whose
``name`` is what --strategy takes. ``registry()`` is the one table of them all; each class
declares its options (``Strategy.options``). ``Seeded`` (seeded.py) warm-starts any of them.
``default_for`` picks what ``harness tune`` runs without --strategy.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from ..errors import HarnessError
from .base import (Batch, Problem, Strategy, StrategyError, Trial, best_trial, config_id, key, options_line,
                   parse_option)
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


STRATEGIES_PATH_ENV = "HARNESS_STRATEGIES_PATH"
# the strategies of the tree: --strategy name -> "module:Class" (the module relative to this package)
BUILTIN = {
    "exhaustive": ".exhaustive:Exhaustive",
    "random": ".random:RandomSearch",
    "halving": ".halving:Halving",
    "bayes": ".bayes:Bayes",
    "genetic": ".genetic:Genetic",
}


def registry() -> dict:
    """--strategy name -> Strategy class: the tree's, then those of $HARNESS_STRATEGIES_PATH (a
    strategy of your own with a built-in's name takes its place)."""
    table = {}
    for name, spec in BUILTIN.items():
        module, cls = spec.split(":")
        table[name] = getattr(importlib.import_module(module, __package__), cls)
    for path in _plugin_files():
        cls = _load_plugin(path)
        table[cls.name] = cls
    return table


def names() -> list:
    """Every --strategy name, the tree's first."""
    return list(registry())


def strategy_class(name: str):
    """The class of a --strategy name; a ValueError naming the close ones for an unknown name."""
    table = registry()
    if name not in table:
        import difflib

        close = difflib.get_close_matches(name, list(table), n=1)
        hint = " (did you mean %r?)" % close[0] if close else ""
        raise ValueError("unknown strategy %r%s; choose from %s" % (name, hint, ", ".join(table)))
    return table[name]


def get_strategy(name: str = DEFAULT, seed: int = 0, batch_size: int = 8, **options) -> Strategy:
    """A strategy by its --strategy name; ``options`` are its declared options (e.g. eta=3)."""
    return strategy_class(name)(seed=seed, batch_size=batch_size, **options)


def parse_options(name: str, texts) -> dict:
    """``NAME=VALUE`` texts -> the options of strategy ``name``, typed as it declares them."""
    cls = strategy_class(name)
    return dict(parse_option(cls, text) for text in texts or ())


def _plugin_files() -> list:
    files = []
    for folder in (Path(p) for p in os.environ.get(STRATEGIES_PATH_ENV, "").split(os.pathsep) if p):
        if not folder.is_dir():
            raise HarnessError("%s names %s, which is not a folder" % (STRATEGIES_PATH_ENV, folder))
        for entry in sorted(folder.iterdir()):
            if entry.suffix == ".py" and not entry.name.startswith("_"):
                files.append(entry)
            elif (entry / "__init__.py").is_file():
                files.append(entry / "__init__.py")
    return files


def _load_plugin(path: Path):
    """The ``STRATEGY`` class of a strategy file of your own (loaded once per process)."""
    stem = path.parent.name if path.name == "__init__.py" else path.stem
    module_name = "harness_user_strategies.%s" % stem
    module = sys.modules.get(module_name)
    if module is None or getattr(module, "__file__", None) != str(path):
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise HarnessError("cannot load strategy %s: %s: %s" % (path, type(exc).__name__, exc))
    cls = getattr(module, "STRATEGY", None)
    if not (isinstance(cls, type) and issubclass(cls, Strategy)) or cls.name == Strategy.name:
        raise HarnessError("%s: STRATEGY must be a harness.strategies.base.Strategy subclass with a name of "
                           "its own" % path)
    return cls


def options_help() -> str:
    """Each strategy's options, for --help."""
    return " ".join("%s: %s." % (name, options_line(cls)[len("its options: "):])
                    for name, cls in registry().items() if cls.options)


def strategies_help() -> str:
    """Each strategy's name and line, for --help."""
    return ", ".join("%s (%s)" % (name, cls.description) if cls.description else name
                     for name, cls in registry().items())


__all__ = [
    "Batch", "Problem", "Strategy", "StrategyError", "Trial", "TuneResult", "DEFAULT",
    "DEFAULT_BUDGET", "DEFAULT_SEARCH", "best_trial", "config_id", "default_for", "get_strategy", "key",
    "names", "options_help", "parse_options", "registry", "strategies_help", "strategy_class",
    "load_history", "normalize_results", "pruning_predicate",
    "read_rows",
    "row_config", "trials_from_rows", "tune_rounds",
]
