"""harness build."""

from __future__ import annotations

from typing import Optional

import typer

from .. import ui
from .common import ROOT, TargetsOpt, pick_target, shapes_from_options


def build(
    kernel: str = typer.Argument(..., help="kernel to build, e.g. matmul"),
    target: str = typer.Option(..., "--target", "-t", help="target name from targets.yaml"),
    shapes: Optional[str] = typer.Option(None, "--shapes", help="comma-separated MxNxK[:dtype[:layout]], e.g. 64x64x64,256x256x128:fp16"),
    shapes_file: Optional[str] = typer.Option(None, "--shapes-file", help="a file of shapes (format detected)"),
    shapes_format: str = typer.Option("auto", "--shapes-format", help="format of --shapes-file (auto-detected)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="dtype for shapes that name none (fp32 on CPUs, fp16 on GPUs)"),
    space: Optional[str] = typer.Option(None, "--space", help="YAML/JSON file of parameter -> values overriding the kernel's ranges"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="parallel compiles (default: all cores)"),
    compile_timeout: float = typer.Option(120.0, "--compile-timeout", help="seconds per compile before it counts as compile_timeout"),
    seed: int = typer.Option(0, "--seed", help="seed of the test data"),
    frontend: str = typer.Option("auto", "--frontend", help="cpu: cpp (default) or triton-cpu (needs Triton-CPU here, or --from-ir)"),
    from_ir: Optional[str] = typer.Option(None, "--from-ir", help="triton-cpu: import IR dumps made elsewhere (<kernel>/<kernel>_<BM>_<BN>_<BK>_<G>/ dirs)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Generate the search space, prune it per shape, compile every variant in parallel and
    write the bundle (manifest, artifacts, test data) under build/TARGET/KERNEL.

    A second build compiles only what changed (artifacts are content-addressed)."""
    from .. import kernels
    from ..build import BuildOptions, build as do_build
    from ..space import load_space_file

    tgt = pick_target(target, targets_file, "build")
    kern = kernels.get(kernel)
    if from_ir and not shapes and not shapes_file:  # the shapes the IR was generated for, when it says
        from ..compile.ir_import import recorded_shapes

        shapes = ",".join(recorded_shapes(from_ir, kern.name)) or None
    shape_list = shapes_from_options(tgt, shapes, shapes_file, shapes_format, dtype)
    space_dict = load_space_file(space, kern.space_for(tgt)) if space else None
    summary = do_build(kern, tgt, shape_list, ROOT, BuildOptions(jobs=jobs, compile_timeout=compile_timeout,
                                                                 seed=seed, space=space_dict, frontend=frontend,
                                                                 from_ir=from_ir))
    ui.out.print("built %s for %s: %d variants (%d compiled, %d cached, %d failed), %d shapes, %d jobs, "
                 "%d pruned pairs, in %.1fs -> %s" % (
                     kern.name, tgt.name, len(summary.manifest.variants), summary.compiled, summary.cached,
                     summary.failed, len(shape_list), len(summary.manifest.jobs), summary.pruned_pairs,
                     summary.seconds, summary.bundle))
