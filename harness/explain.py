"""Why a shape has no config left after pruning, and the nearest change that would leave one.

Generic over the kernel's rules: the counts come from the manifest's ``pruned`` entries (the
first rule that pruned each config), the suggestions from trying the kernel's rules on a space
with one more value of one parameter, or on the shape with one dimension moved.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional

from .space import expand, first_pruning_rule

MAX_CHECKS = 50000  # configs tried per search (space, shape) before it gives up


@dataclasses.dataclass
class Explanation:
    shape: str
    configs: int
    rules: list  # [(rule name, why, count)], most first
    changes: list  # ["add BLOCK_K 8 to the space", "use K=64"], nearest first

    def line(self) -> str:
        rules = "; ".join("%s %d (%s)" % (name, count, why) for name, why, count in self.rules)
        text = "%s: all %d configs pruned: %s" % (self.shape, self.configs, rules)
        if self.changes:
            text += "; nearest change: %s" % ", or ".join(self.changes)
        return text


def all_pruned_shapes(manifest) -> list:
    """Ids of the manifest's shapes that have no job: every config was pruned for them."""
    with_jobs = {j.shape for j in manifest.jobs}
    pruned = {p.shape for p in manifest.pruned}
    return [s.id for s in manifest.shapes if s.id not in with_jobs and s.id in pruned]


def explain(manifest, kernel, target, shape_id: str) -> Explanation:
    """The rules that pruned every config of the shape, with counts, and the nearest change to
    the space or the shape after which the kernel's rules leave a config."""
    entries = [p for p in manifest.pruned if p.shape == shape_id]
    counts = Counter((p.rule, p.why) for p in entries)
    rules = sorted(((name, why, n) for (name, why), n in counts.items()), key=lambda r: (-r[2], r[0]))
    s = next(s for s in manifest.shapes if s.id == shape_id)
    shape = s.to_shape(kernel.problem)
    space = _space_of(manifest)
    changes = nearest_changes(kernel.rules_for(target), target, shape, space, kernel.space_for(target))
    return Explanation(shape_id, len(entries), rules, changes)


def nearest_changes(rules, target, shape, space: dict, kernel_space: dict) -> list:
    """The nearest new value of one parameter, and the nearest move of one dimension, that leave a config."""
    found = []
    budget = [MAX_CHECKS]
    for name, value in _value_candidates(space, kernel_space):
        if _any_valid(rules, target, shape, dict(space, **{name: [value]}), budget):
            found.append("add %s %s to the space" % (name, value))
            break
    budget = [MAX_CHECKS]
    for dim, value in _dim_candidates(shape):
        moved = tuple((d, value if d == dim else v) for d, v in shape.dims)
        if _any_valid(rules, target, dataclasses.replace(shape, dims=moved), space, budget):
            found.append("use %s=%d" % (dim, value))
            break
    return found


def _any_valid(rules, target, shape, space: dict, budget: list) -> bool:
    for config in expand(space):
        if budget[0] <= 0:
            return False
        budget[0] -= 1
        if first_pruning_rule(rules, config, shape, target) is None:
            return True
    return False


def _space_of(manifest) -> dict:
    """Every value each parameter took in the build (variants and pruned configs)."""
    configs = [v.config for v in manifest.variants] + [p.config for p in manifest.pruned]
    space = {}
    for config in configs:
        for name, value in config.items():
            values = space.setdefault(name, [])
            if value not in values:
                values.append(value)
    return space


def _value_candidates(space: dict, kernel_space: dict) -> list:
    """(parameter, value) not in the space, nearest to its values first: the kernel's own values
    and halves and doubles of whole numbers."""
    out = []
    for name, values in space.items():
        numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        candidates = set(kernel_space.get(name, [])) | {v // 2 for v in numbers if v > 1} | {v * 2 for v in numbers}
        for value in candidates - set(values):
            distance = _distance(value, numbers)
            if distance is not None:
                out.append((distance, name, value))
    return [(name, value) for _, name, value in sorted(out, key=lambda t: (t[0], str(t[1]), str(t[2])))]


def _distance(value, numbers: list) -> Optional[float]:
    """How far a new value is from the nearest old one, as a ratio (2 for a halving or doubling)."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or not numbers:
        return None
    return min(max(value, n) / max(1, min(value, n)) for n in numbers)


def _dim_candidates(shape) -> list:
    """(dimension, value): each dimension (matmul M, N, K) rounded up and down to multiples of 2,
    4, ... 256, nearest first."""
    out = set()
    for dim, size in shape.dims:
        for step in (2 ** i for i in range(1, 9)):
            for value in (size // step * step, -(-size // step) * step):
                if value > 0 and value != size:
                    out.add((abs(value - size), dim, value))
    return [(dim, value) for _, dim, value in sorted(out)]
