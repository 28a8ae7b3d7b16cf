"""harness tune."""

from __future__ import annotations

from typing import Optional

import typer

from .build import build
from .common import TargetsOpt, pick_target
from .push import push
from .report import report
from .run import run


def tune(
    kernel: str = typer.Argument(..., help="kernel to tune, e.g. matmul"),
    target: str = typer.Option(..., "--target", "-t", help="target name from targets.yaml"),
    shapes: Optional[str] = typer.Option(None, "--shapes", help="comma-separated MxNxK[:dtype[:layout]]"),
    shapes_file: Optional[str] = typer.Option(None, "--shapes-file", help="a file of shapes"),
    space: Optional[str] = typer.Option(None, "--space", help="file overriding the kernel's ranges"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="parallel compiles (default: all cores)"),
    warmup: int = typer.Option(2, "--warmup"),
    iters: int = typer.Option(10, "--iters"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds per variant and shape"),
    targets_file: Optional[str] = TargetsOpt,
):
    """build, push, run and report in a row."""
    build(kernel=kernel, target=target, shapes=shapes, shapes_file=shapes_file, shapes_format="auto", dtype=None,
          space=space, jobs=jobs, compile_timeout=120.0, seed=0, frontend="auto", from_ir=None,
          targets_file=targets_file)
    tgt = pick_target(target, targets_file, "tune")
    if tgt.is_remote:
        push(target=target, kernel=kernel, targets_file=targets_file)
    run(remote=target if tgt.is_remote else None, target=target, kernel=kernel, warmup=warmup, iters=iters,
        timeout=timeout, rerun_all=False, profiler=None, devices=None, min_time_ms=100.0, targets_file=targets_file)
    report(target=target, kernel=kernel, no_fetch=False, targets_file=targets_file)
