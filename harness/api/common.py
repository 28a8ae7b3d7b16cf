"""What the api functions share: the project folder, picking the target, kernel and shapes.

A ``targets_file`` here is the one to use (None: ./targets.yaml or $HARNESS_TARGETS); the
command line resolves ``--targets`` given before the command before it calls in."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

from .. import state, ui
from ..errors import HarnessError

ROOT = Path(".")

TRITON_INSTALL = "pip install 'harness[gpu]' (the gpu extra: triton==3.9.0)"


def pick_target(name: Optional[str], targets_file: Optional[str], command: str, last: str = "last_target"):
    """The named target, else the one state remembers under ``last`` (then the last used)."""
    from ..targets import get_target

    name = name or state.last(ROOT, last) or state.last(ROOT, "last_target")
    if not name:
        raise HarnessError("which target? pass --target NAME (see: harness targets)")
    return get_target(name, targets_file)


def pick_build_target(name: Optional[str], targets_file: Optional[str]):
    """The named target, else targets.yaml's ``default:``, else ``local``; says which it chose."""
    from ..targets import default_target, get_target

    if name:
        return get_target(name, targets_file)
    tgt, why = default_target(targets_file)
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

    dtype = default_dtype(target, kernel, dtype)
    if shapes_file:
        return read_shapes_file(shapes_file, shapes_format, dtype, problem=kernel.problem)
    if not shapes:
        shapes = kernel.default_shapes.get("gpu" if target.is_gpu else "cpu")
        if not shapes:
            raise HarnessError("kernel %s has no default shapes; pass --shapes %s" % (kernel.name, kernel.problem.syntax()))
    return parse_shape_list(shapes, dtype, problem=kernel.problem)


def default_dtype(target, kernel, dtype: Optional[str] = None) -> str:
    """The dtype of shapes that name none: ``--dtype``, else fp16 on GPUs and fp32 on CPUs; for a
    kernel without that dtype (the fp8 kernels) the target's native format, else its first (a
    shapes list with only M, N, K, such as aiter's blockscale lists, then reads as that kernel's
    GEMMs)."""
    chosen = dtype or ("fp16" if target.is_gpu else "fp32")
    if chosen not in kernel.problem.dtypes:
        # gfx942's fp8 MMA takes e4m3fnuz; elsewhere the kernel's first format (e4m3fn)
        native = "fp8e4m3fnuz" if str(getattr(target, "gpu_arch", "") or "") == "gfx942" else None
        chosen = native if native in kernel.problem.dtypes else kernel.problem.dtypes[0]
    return chosen


def kernel_of(target_name: str, kernel: Optional[str]) -> str:
    from ..names import check_name

    if kernel:
        return check_name(kernel, "kernel")
    _, facts = state.get(ROOT, target_name)
    if not facts.get("kernel"):
        raise HarnessError("nothing built for %s yet; run: harness build KERNEL --target %s" % (target_name, target_name))
    return facts["kernel"]
