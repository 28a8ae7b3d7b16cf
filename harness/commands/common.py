"""What every command shares: the project folder, picking the target, kernel and shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import state
from ..errors import HarnessError

ROOT = Path(".")
DEFAULT_SHAPES = {"cpu": "64x64x64,128x128x128,256x256x128",
                  "gpu": "4096x4096x4096:fp16,64x4096x4096:fp16,1024x1024x1024:fp16"}

TargetsOpt = typer.Option(None, "--targets", help="targets.yaml to use (default: ./targets.yaml or $HARNESS_TARGETS)")


def pick_target(name: Optional[str], targets_file: Optional[str], command: str):
    from ..targets import get_target

    if not name:
        name, _ = state.get(ROOT, None)
    if not name:
        raise HarnessError("which target? pass --target NAME (see: harness targets)")
    return get_target(name, targets_file)


def shapes_from_options(target, shapes: Optional[str], shapes_file: Optional[str], shapes_format: str, dtype: Optional[str]):
    from ..shapes import parse_shape_list, read_shapes_file

    default_dtype = dtype or ("fp16" if target.is_gpu else "fp32")
    if shapes_file:
        return read_shapes_file(shapes_file, shapes_format, default_dtype)
    return parse_shape_list(shapes or DEFAULT_SHAPES["gpu" if target.is_gpu else "cpu"], default_dtype)


def kernel_of(target_name: str, kernel: Optional[str]) -> str:
    if kernel:
        return kernel
    _, facts = state.get(ROOT, target_name)
    if not facts.get("kernel"):
        raise HarnessError("nothing built for %s yet; run: harness build KERNEL --target %s" % (target_name, target_name))
    return facts["kernel"]
