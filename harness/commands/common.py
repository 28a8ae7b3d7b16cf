"""What every command shares: the project folder, picking the target, kernel and shapes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import typer

from .. import state, ui
from ..errors import HarnessError

ROOT = Path(".")

TARGETS_HELP = "targets.yaml to use (default: ./targets.yaml or $HARNESS_TARGETS); accepted before or after any command"
TargetsOpt = typer.Option(None, "--targets", help=TARGETS_HELP)

TRITON_INSTALL = "pip install 'harness[gpu]' (the gpu extra: triton==3.9.0)"

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


def shapes_from_options(target, shapes: Optional[str], shapes_file: Optional[str], shapes_format: str,
                        dtype: Optional[str], kernel):
    """The shapes of the options, written as ``kernel`` declares them (its problem's dims);
    none given: the kernel's default shapes for the target's kind."""
    from ..shapes import parse_shape_list, read_shapes_file

    default_dtype = dtype or ("fp16" if target.is_gpu else "fp32")
    if default_dtype not in kernel.problem.dtypes:  # e.g. fp8 kernels: their first dtype
        default_dtype = kernel.problem.dtypes[0]
    if shapes_file:
        return read_shapes_file(shapes_file, shapes_format, default_dtype, problem=kernel.problem)
    if not shapes:
        shapes = kernel.default_shapes.get("gpu" if target.is_gpu else "cpu")
        if not shapes:
            raise HarnessError("kernel %s has no default shapes; pass --shapes %s" % (kernel.name, kernel.problem.syntax()))
    return parse_shape_list(shapes, default_dtype, problem=kernel.problem)


def kernel_of(target_name: str, kernel: Optional[str]) -> str:
    from ..names import check_name

    if kernel:
        return check_name(kernel, "kernel")
    _, facts = state.get(ROOT, target_name)
    if not facts.get("kernel"):
        raise HarnessError("nothing built for %s yet; run: harness build KERNEL --target %s" % (target_name, target_name))
    return facts["kernel"]
