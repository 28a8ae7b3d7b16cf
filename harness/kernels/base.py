"""What a kernel package provides."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"


@dataclass
class Kernel:
    name: str
    description: str
    cpu_space: dict  # parameter -> values for CPU builds
    cpu_rules: list  # harness.space.Rule
    cpu_template: Path  # Jinja template of the kernel's C++ source
    make_data: Callable  # (shape, seed) -> {"a": ndarray, "b": ndarray, "ref": ndarray}
    strides: Callable  # shape -> dict of stride name -> value
    flops: Callable  # shape -> floating point operations
    bytes_moved: Callable  # shape -> fewest bytes through memory
    grid: Callable  # (config, shape, target) -> (grid_x, grid_y, grid_z)
    gpu_space: dict = field(default_factory=dict)
    gpu_space_cuda: dict = field(default_factory=dict)  # extra parameters on NVIDIA
    gpu_space_hip: dict = field(default_factory=dict)  # extra parameters on AMD
    gpu_rules: list = field(default_factory=list)
    triton_module: Optional[str] = None  # "package.module:function" of the Triton kernel
    # (shape, target) -> [config]: configs known to be good for the shape's class, measured in the
    # first round of every search (harness.strategies.seeded); None: no rules of thumb
    seed_configs: Optional[Callable] = None

    def space_for(self, target) -> dict:
        if target.is_gpu:
            space = dict(self.gpu_space)
            space.update(self.gpu_space_hip if target.backend == "hip" else self.gpu_space_cuda)
            return space
        return dict(self.cpu_space)

    def rules_for(self, target) -> list:
        return self.gpu_rules if target.is_gpu else self.cpu_rules
