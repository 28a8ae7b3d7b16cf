"""A genetic search over value indices: tournament selection, uniform crossover, local mutation.

The population is the ``population`` fastest configs measured so far (so it is rebuilt from the
history on every call, and a resumed run continues where it stopped). Until that many configs
have run, it samples in a seeded random order. A child is made from two parents picked by
tournament; each gene comes from either parent, and mutates with probability ``1/len(genes)``
(or at least once, when the child equals a parent): usually one step up or down the parameter's
ordered values, sometimes any value. A child that is pruned, already measured or already in the
batch is repaired to the nearest feasible unmeasured config; so is one outside the preferred
configs while any of them is free (``Problem.prefer``: those an earlier tune built for the shape).
A fraction of each batch are random immigrants, which keeps it from settling in one valley.
"""

from __future__ import annotations

from .base import Batch, Strategy, key, rng_for


class Genetic(Strategy):
    name = "genetic"
    asks_ahead = True  # pending configs are skipped and never parents (see strategies.driver.drive)
    description = "tournament selection, crossover and mutation over the fastest configs so far"
    options = {
        "population": ("how many of the fastest configs are parents (at least 2)", 8, int),
        "tournament": ("configs drawn per parent pick, the fastest wins", 3, int),
        "step_mutation": ("share of mutations that step one value up or down (else any value)", 0.8, float),
        "immigrants": ("share of each batch drawn at random", 0.1, float),
    }

    def __init__(self, seed: int = 0, batch_size: int = 8, **options):
        super().__init__(seed, batch_size, **options)
        self.population = max(2, self.population)
        self.tournament = max(1, self.tournament)

    def _propose(self, summary, problem, limit, budget):
        measured = {k for k in summary.measured() if k in problem.index}
        if len(measured) >= len(problem):
            return Batch()
        ranked = summary.ranked(problem)
        if len(ranked) < self.population:
            order = self._permutation(problem)
            return Batch(self._unmeasured_in_order(order, problem, measured, limit))
        rng = rng_for(self.seed, self.name, len(summary.trials))
        pool = [problem.encode(cfg) for _, _, cfg in ranked[:self.population]]
        sizes = [len(problem.space[n]) for n in problem.names]
        taken = set(measured)
        batch = []
        while len(batch) < limit:
            if rng.random() < self.immigrants:
                code = [rng.randrange(s) for s in sizes]
            else:
                a, b = self._select(pool, rng), self._select(pool, rng)
                code = [a[i] if rng.random() < 0.5 else b[i] for i in range(len(sizes))]
                self._mutate(code, sizes, rng, force=tuple(code) in (a, b))
            cfg = problem.decode(code)
            if key(cfg) in taken or not problem.contains(cfg) or problem.outside_preferred(cfg):
                cfg = problem.nearest_free(code, taken, rng)
                if cfg is None:
                    break
            taken.add(key(cfg))
            batch.append(dict(cfg))
        return Batch(batch)

    def _select(self, pool, rng):
        """Tournament: the best (lowest rank) of ``tournament`` random members."""
        return pool[min(rng.randrange(len(pool)) for _ in range(self.tournament))]

    def _mutate(self, code, sizes, rng, force=False):
        genes = [i for i, s in enumerate(sizes) if s > 1]
        if not genes:
            return
        p = 1.0 / len(genes)
        hit = [i for i in genes if rng.random() < p]
        if force and not hit:
            hit = [genes[rng.randrange(len(genes))]]
        for i in hit:
            if rng.random() < self.step_mutation:
                step = -1 if rng.random() < 0.5 else 1
                code[i] = min(sizes[i] - 1, max(0, code[i] + step))
            else:
                code[i] = rng.randrange(sizes[i])
