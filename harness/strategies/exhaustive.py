"""Every feasible config, in the space's own order (the default strategy)."""

from __future__ import annotations

from .base import Batch, Strategy


class Exhaustive(Strategy):
    name = "exhaustive"
    description = "every config"
    asks_ahead = True  # pending configs are skipped (see strategies.driver.drive)

    def _propose(self, summary, problem, limit, budget):
        measured = summary.measured()
        return Batch(self._unmeasured_in_order(range(len(problem)), problem, measured, limit))
