"""What every command shares: the project folder, picking the target, kernel and shapes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import typer

from .. import state, ui
from ..errors import HarnessError

ROOT = Path(".")
DEFAULT_SHAPES = {"cpu": "64x64x64,128x128x128,256x256x128",
                  "gpu": "4096x4096x4096:fp16,64x4096x4096:fp16,1024x1024x1024:fp16"}

TARGETS_HELP = "targets.yaml to use (default: ./targets.yaml or $HARNESS_TARGETS); accepted before or after any command"
TargetsOpt = typer.Option(None, "--targets", help=TARGETS_HELP)

# --targets given before the command (harness --targets FILE build ...): the app's callback sets it
targets_before_command: Optional[str] = None


def targets_file_of(targets_file: Optional[str]) -> Optional[str]:
    """--targets given after the command, else before it."""
    return targets_file or targets_before_command


def pick_target(name: Optional[str], targets_file: Optional[str], command: str, last: str = "last_target"):
    """The named target, else the one state remembers under ``last`` (then the last used)."""
    from ..targets import get_target

    name = name or state.last(ROOT, last) or state.last(ROOT, "last_target")
    if not name:
        raise HarnessError("which target? pass --target NAME (see: harness targets)")
    return get_target(name, targets_file_of(targets_file))


def pick_build_target(name: Optional[str], targets_file: Optional[str]):
    """The named target, else targets.yaml's ``default:``, else ``local``; says which it chose."""
    from ..targets import default_target, get_target

    if name:
        return get_target(name, targets_file_of(targets_file))
    tgt, why = default_target(targets_file_of(targets_file))
    ui.out.print("target: %s (%s; --target NAME picks another)" % (tgt.name, why))
    return tgt


def require(module: str, what: str, install: str) -> None:
    """One line naming what to install when an optional dependency is missing."""
    if importlib.util.find_spec(module) is None:
        raise HarnessError("%s needs %s, which is not installed: %s" % (what, module, install))


def require_triton(target) -> None:
    require("triton", "%s is a %s target: compiling for it" % (target.name, target.backend), TRITON_INSTALL)


TRITON_INSTALL = "pip install 'harness[gpu]' (the gpu extra: triton==3.9.0)"


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
