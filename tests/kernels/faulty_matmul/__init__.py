"""The matmul kernel with faults planted by a FAULT parameter: a variant that really crashes
(segfault), one that really hangs, and one that gives a wrong answer. Tests only."""

import dataclasses
from pathlib import Path

from harness.kernels.matmul import KERNEL as MATMUL

KERNEL = dataclasses.replace(
    MATMUL,
    name="faulty_matmul",
    description=__doc__.splitlines()[0],
    cpu_space={"MR": [1, 2], "NR": [16], "KC": [64], "MC": [16], "NC": [64], "PACK_B": [1],
               "FAULT": ["none", "crash", "hang", "wrong"]},
    cpu_template=Path(__file__).parent / "templates" / "cpu" / "faulty_kernel.cpp.j2",
)
