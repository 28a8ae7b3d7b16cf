"""Feasible configs in a seeded random order, without repeats."""

from __future__ import annotations

from .base import Batch, Strategy


class RandomSearch(Strategy):
    name = "random"
    description = "configs in a seeded random order"
    asks_ahead = True  # pending configs are skipped (see strategies.driver.drive)

    def _propose(self, summary, problem, limit, budget):
        measured = summary.measured()
        return Batch(self._unmeasured_in_order(self._permutation(problem), problem, measured, limit))
