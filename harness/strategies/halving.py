"""Successive halving: measure every candidate briefly, re-measure the best fraction longer, repeat.

Rung 0 measures ``n0`` configs (all feasible ones, or as many as the budget allows) at fidelity 1,
in a seeded random order. Rung k re-measures the fastest ``ceil(n_{k-1} / eta)`` configs of rung
k-1 at fidelity ``eta**k`` (the evaluator measures ``eta**k`` times longer: more iterations, or a
longer minimum time). It stops after ``max_rungs`` rungs or when a rung holds one config.

The rungs are rebuilt from the history on every call: a config measured m times has finished
rungs 0..m-1, and its rung-k time is its (k+1)-th measurement. So a resumed run continues the rung
it was in, with nothing but the results rows.
"""

from __future__ import annotations

import math
from typing import Optional

from .base import Batch, Strategy, config_id


class Halving(Strategy):
    name = "halving"
    description = "brief runs, the best re-run longer"
    options = {
        "eta": ("each rung keeps the fastest 1/eta and measures them eta times longer (at least 2)", 3, int),
        "max_rungs": ("at most this many rungs", 4, int),
    }

    def __init__(self, seed: int = 0, batch_size: int = 8, **options):
        super().__init__(seed, batch_size, **options)
        if self.eta < 2:
            raise ValueError("eta must be at least 2 (got %d)" % self.eta)
        self.max_rungs = max(1, self.max_rungs)

    def rung_sizes(self, n0: int) -> list:
        sizes = [n0]
        while len(sizes) < self.max_rungs and sizes[-1] > 1:
            sizes.append(max(1, math.ceil(sizes[-1] / self.eta)))
        return sizes

    def plan_n0(self, n_candidates: int, budget: Optional[int]) -> int:
        """The largest rung 0 whose rungs all fit in the budget."""
        if budget is None or sum(self.rung_sizes(n_candidates)) <= budget:
            return n_candidates
        lo, hi = 0, n_candidates
        while lo < hi:  # total evaluations grow with n0
            mid = (lo + hi + 1) // 2
            if sum(self.rung_sizes(mid)) <= budget:
                lo = mid
            else:
                hi = mid - 1
        return max(1, lo)

    def _propose(self, summary, problem, limit, budget):
        feasible = {k: ts for k, ts in summary.by_key.items() if k in problem.index}
        n0 = self.plan_n0(len(problem), budget)
        # rung 0: what was measured (in history order), then the seeded permutation
        rung0 = list(feasible)
        if len(rung0) < n0:
            todo = self._unmeasured_in_order(self._permutation(problem), problem, set(feasible),
                                             min(limit, n0 - len(rung0)))
            return Batch(todo, fidelity=1)
        sizes = self.rung_sizes(len(rung0))
        members = rung0
        for k in range(1, len(sizes)):
            # rank rung k-1 by each member's k-th measurement; failures drop out
            scored = []
            for m in members:
                trials = feasible[m]
                if len(trials) >= k and trials[k - 1].ok:
                    cfg = trials[k - 1].config
                    scored.append((trials[k - 1].time_ns, config_id(cfg), m, cfg))
            scored.sort(key=lambda s: (s[0], s[1]))
            promoted = scored[:sizes[k]]
            todo = [cfg for _, _, m, cfg in promoted if len(feasible[m]) < k + 1]
            if todo:
                return Batch([dict(c) for c in todo[:limit]], fidelity=self.eta ** k)
            members = [m for _, _, m, _ in promoted]
            if len(members) <= 1:
                break
        return Batch()
