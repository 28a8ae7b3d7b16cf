"""The matmul kernel with pruning rules of its own, so a test can prune every config of a shape
whatever the matmul's own rules become. Tests only."""

import dataclasses

from harness.kernels.matmul import KERNEL as MATMUL
from harness.space import Rule

RULES = [
    Rule("mr_over_m", "MR larger than M", lambda c, s, t: c["MR"] > s.M),
    Rule("k_not_multiple", "K is not a multiple of KC", lambda c, s, t: s.K % c["KC"] != 0),
]

KERNEL = dataclasses.replace(MATMUL, name="pruned_matmul", description=__doc__.splitlines()[0], cpu_rules=RULES)
