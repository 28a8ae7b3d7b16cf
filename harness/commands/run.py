"""harness run."""

from __future__ import annotations

from typing import Optional

import typer

from .. import state, ui
from ..errors import HarnessError
from ..run import DEFAULT_INTERLEAVE, ESTIMATOR_HELP, INTERLEAVE_HELP, MAX_TIME_HELP
from .common import ROOT, TargetsOpt, kernel_of, pick_target


def _run_options(warmup, iters, timeout, rerun_all, profiler, devices, min_time_ms, max_noise=0.01, max_time=0.5,
                 estimator=None, interleave=DEFAULT_INTERLEAVE):
    from ..run import RunOptions

    return RunOptions(warmup=warmup, iters=iters, timeout=timeout, rerun_all=rerun_all, profiler=profiler,
                      devices=devices, min_time_ms=min_time_ms, max_noise=max_noise, max_time=max_time,
                      estimator=estimator, interleave=interleave)


def run(
    name: Optional[str] = typer.Argument(None, metavar="TARGET", help="with --remote: the target to run on (default: the last pushed)"),
    remote: bool = typer.Option(False, "--remote", "-r", help="run on the target's machine over SSH (a Slurm target: as a job array): --remote TARGET, or --remote alone for the last pushed target"),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="run this target's bundle here (default: the last used)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel bundle to run (default: the last built)"),
    warmup: int = typer.Option(2, "--warmup", help="untimed runs before timing"),
    iters: int = typer.Option(10, "--iters", help="at least this many timed samples per variant and shape"),
    max_noise: float = typer.Option(0.01, "--max-noise", help="keep sampling until the relative noise of the deciding estimator settles under this (0.01: 1%)"),
    max_time: Optional[float] = typer.Option(None, "--max-time", help=MAX_TIME_HELP, show_default=False),
    estimator: Optional[str] = typer.Option(None, "--estimator", help=ESTIMATOR_HELP, show_default=False),
    interleave: int = typer.Option(DEFAULT_INTERLEAVE, "--interleave", min=1, help=INTERLEAVE_HELP),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds per variant and shape before it counts as timeout"),
    rerun_all: bool = typer.Option(False, "--all", help="re-run rows already measured (default: resume)"),
    profiler: Optional[str] = typer.Option(None, "--profiler", help="override the target's profiler (perf, wallclock, events, ncu, rocprof)"),
    devices: Optional[str] = typer.Option(None, "--devices", help="GPU indices to use, e.g. 0,1 (default: all)"),
    min_time_ms: float = typer.Option(100.0, "--min-time-ms", help="GPU: repeat until this much time is measured"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Run every variant on every shape under the target's profiler and append results.

    With --remote the agent runs on the target over one SSH command (on a Slurm target, one job
    array of slurm.tasks chunks, dead tasks submitted again); without, it runs here (under the
    target's run_under, e.g. qemu). An interrupted run resumes where it stopped."""
    from ..run import run_local, run_remote, timing_choice
    from ..transport import for_hosts

    tgt = _target(name, remote, target, targets_file)
    estimator, max_time = timing_choice(tgt, estimator, max_time)
    options = _run_options(warmup, iters, timeout, rerun_all, profiler, devices, min_time_ms, max_noise, max_time,
                           estimator, interleave)
    if not (remote and tgt.is_remote):
        _check_perf_here(tgt, profiler)
    kern = kernel_of(tgt.name, kernel)
    if remote and tgt.is_remote:
        transports = for_hosts(tgt)
        if len(transports) > 1:
            from ..bundle import Manifest, bundle_dir
            from ..fleet import run_fleet

            manifest = Manifest.load(bundle_dir(ROOT, tgt.name, kern) / "manifest.json")
            summary = run_fleet(tgt, kern, manifest, transports, options)
            where = "results/%s/%s on each of %d hosts" % (tgt.name, kern, len(transports))
            for label, count in summary.done.items():
                ui.out.print("%s: %d jobs" % (label, count))
            if summary.dropped:
                ui.out.print("dropped out: %s; %d jobs moved" % (", ".join(summary.dropped), summary.moved))
        else:
            transport = transports[0].open()
            try:
                where = run_remote(tgt, kern, options, transport)
            finally:
                transport.close()
        state.record(ROOT, tgt.name, kernel=kern, results_remote=True)
        ui.out.print("results on %s:%s; fetch them with: harness report --target %s" % (tgt.name, where, tgt.name))
    else:
        path = run_local(ROOT, tgt, kern, options)
        state.record(ROOT, tgt.name, kernel=kern, results_remote=False)
        ui.out.print("results in %s" % path)


def _target(name, remote: bool, target, targets_file):
    """--remote [TARGET] (default: the last pushed) or --target TARGET (default: the last used)."""
    if name and not remote:
        raise HarnessError("harness run %s: add --remote to run on %s's machine, or pass --target %s to run "
                           "its bundle here" % (name, name, name))
    if name and target and name != target:
        raise HarnessError("--remote %s and --target %s name different targets" % (name, target))
    if remote and not (name or target or state.last(ROOT, "last_push")):
        raise HarnessError("nothing pushed yet: run harness push TARGET, or name it: harness run --remote TARGET")
    return pick_target(name or target, targets_file, "run", last="last_push" if remote else "last_target")


PERF_INSTALL = "apt-get install linux-perf (Debian; linux-tools elsewhere)"


def _check_perf_here(tgt, profiler) -> None:
    """--profiler perf on this machine needs perf; a target whose profiler is perf falls back to
    the wall clock, and says so."""
    import shutil

    if shutil.which("perf"):
        return
    if profiler == "perf":
        raise HarnessError("--profiler perf needs perf, which is not installed here: %s, or pass --profiler "
                           "wallclock" % PERF_INSTALL)
    if profiler is None and tgt.profiler == "perf":
        ui.console.print("[yellow]perf is not installed here: timing with the wall clock, no counters (for "
                         "counters: %s)[/]" % PERF_INSTALL)
