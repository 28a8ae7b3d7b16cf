"""What the block-scaled GEMMs (fp8_blockscale, a4w4_blockscale) share on the host: their Kernel
declaration (GPU only, a Triton kernel ``<name>_kernel`` in the folder's triton_kernel.py, the
folder's device.py as the agent's plug-in, the GEMM's flops), the shape classes their seeds are
chosen by and the completion of those seeds against a target. Their Triton side shares
blockscale_triton.py."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, List

from . import gemm_tiles
from .base import Kernel
from .gemm_tiles import cdiv, complete_seeds


def block_scaled_kernel(name: str, doc: str, init_file: str, **fields) -> Kernel:
    """The Kernel of a block-scaled GEMM whose package is ``harness.kernels.<name>`` (its
    ``__init__.py`` is ``init_file``, its docstring ``doc``); ``fields``: the rest of the Kernel's."""
    return Kernel(name=name, description=doc.strip().splitlines()[0], cpu_space={}, cpu_rules=[], cpu_template=None,
                  flops=gemm_tiles.flops, device_reference=name,
                  device_plugin=Path(init_file).with_name("device.py"),
                  triton_module="harness.kernels.%s.triton_kernel:%s_kernel" % (name, name), **fields)


def shape_class(shape, multiprocessors: int) -> str:
    """``skinny`` (M <= 64, decode), ``large`` (128 x 128 tiles alone fill the multiprocessors,
    prefill) or ``medium``."""
    if shape.M <= 64:
        return "skinny"
    if cdiv(shape.M, 128) * cdiv(shape.N, 128) >= multiprocessors:
        return "large"
    return "medium"


def nearest_split(tiles: int, multiprocessors: int, splits=(1, 2, 4, 8)) -> int:
    """The split of K (of ``splits``) that brings tiles x splits nearest to the multiprocessors."""
    return min(splits, key=lambda s: abs(tiles * s - multiprocessors))


def gpu_seed_configs(kernel: Kernel, rule_seeds: Callable, shape, target, for_hip: Callable) -> List[dict]:
    """``rule_seeds(shape, multiprocessors)`` on a GPU target (``for_hip(seeds)`` on AMD), each
    completed against the target's space and kept where no rule prunes it (none on CPUs)."""
    if not target.is_gpu:
        return []
    seeds = rule_seeds(shape, gemm_tiles.multiprocessors(target))
    if target.backend == "hip":
        seeds = for_hip(seeds)
    return complete_seeds(seeds, kernel, shape, target)
