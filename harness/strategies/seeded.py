"""Warm start: the first round of a search measures configs known to be good for the shape.

Two sources, in this order (``warm_start``):

* the kernel's rules for the shape's class (``Kernel.seed_configs(shape, target)``, e.g. the
  persistent TMA tile for a big square product on sm90, SWAP_AB tiles for a skinny one);
* the winners of the nearest shapes already tuned on the same target
  (``tuned/<target>/<kernel>.json``): same dtype and layout first, then distance in log space
  of the problem's dimensions (matmul: M, N, K).

``Seeded`` wraps any strategy: the first rounds measure the seeds that are feasible (in the
space, not pruned for this shape and target) and not yet measured; then the wrapped strategy
decides, with the seeds in its history (the model-based strategies learn from them, genetic
breeds from them, halving counts them in its first rung: its plan is kept). It stays a function
of (seed, history), so a resumed search asks what an uninterrupted one would.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional, Sequence

from .base import Batch, Strategy, key

NEAREST = 2  # tuned shapes whose winners are seeded
FIRST_ROUND = 8  # the default batch size: the first round, which holds the nearest winners


class Seeded(Strategy):
    """``inner`` preceded by the feasible, unmeasured ``seeds`` (see the module docstring)."""

    def __init__(self, inner: Strategy, seeds: Sequence[dict]):
        super().__init__(inner.seed, inner.batch_size)
        self.inner = inner
        self.name = inner.name
        self.asks_ahead = getattr(inner, "asks_ahead", False)  # a seed in flight counts as measured
        self.seeds = [dict(c) for c in seeds]

    def _propose(self, summary, problem, limit, budget):
        measured = summary.measured()
        todo, seen = [], set()
        for cfg in self.seeds:
            k = key(cfg)
            if problem.contains(cfg) and k not in measured and k not in seen:
                seen.add(k)
                todo.append(problem.candidates[problem.index[k]])
        if not todo:
            return self.inner._propose(summary, problem, limit, budget)
        return Batch([dict(c) for c in todo[:limit]])


def read_tuned(path) -> list:
    """The entries (shape, dims, dtype, layout, config) of a tuned/<target>/<kernel>.json; [] when
    there is none or it cannot be read (a warm start is a hint, never a reason to stop)."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
        return [e for e in data.get("best", []) if isinstance(e, dict) and isinstance(e.get("config"), dict)]
    except (ValueError, AttributeError):
        return []


def nearest_tuned(shape, entries: list, n: int = NEAREST) -> List[dict]:
    """The configs of the ``n`` tuned entries nearest to ``shape``: those of its dtype and layout
    first, then by Euclidean distance of the log2 of its dimensions (matmul: M, N, K); ties keep
    the file's order. Entries without the shape's dimensions are left out."""
    dims = shape.dim_values
    usable = [e for e in entries if all(isinstance(e.get(d), int) and e[d] > 0 for d in dims)]

    def distance(e):
        same = e.get("dtype") == shape.dtype and e.get("layout") == shape.layout
        return (0 if same else 1, math.dist([math.log2(e[d]) for d in dims], [math.log2(v) for v in dims.values()]))

    return [dict(e["config"]) for e in sorted(usable, key=distance)[:n]]


def warm_start(kernel, target, shape, tuned_entries: Optional[list] = None) -> List[dict]:
    """Seed configs for one shape: the kernel's rules for its class, then the nearest tuned
    winners, which keep their places in the first round (of FIRST_ROUND) ahead of any kernel seeds
    past it. Not filtered here: ``Seeded`` keeps only the feasible ones."""
    seeds = list(kernel.seed_configs(shape, target)) if getattr(kernel, "seed_configs", None) else []
    nearest = nearest_tuned(shape, tuned_entries or [])
    head = max(0, FIRST_ROUND - len(nearest))
    return seeds[:head] + nearest + seeds[head:]
