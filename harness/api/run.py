"""run: every variant on every shape under the target's profiler, here or on the target."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .. import state, ui
from ..errors import HarnessError
from ..run import DEFAULT_INTERLEAVE
from .common import ROOT, kernel_of, pick_target


def _run_options(warmup, iters, timeout, rerun_all, profiler, devices, min_time_ms, max_noise=0.01, max_time=0.5,
                 estimator=None, interleave=DEFAULT_INTERLEAVE):
    from ..run import RunOptions

    return RunOptions(warmup=warmup, iters=iters, timeout=timeout, rerun_all=rerun_all, profiler=profiler,
                      devices=devices, min_time_ms=min_time_ms, max_noise=max_noise, max_time=max_time,
                      estimator=estimator, interleave=interleave)


@dataclass
class RunArgs:
    """The options of ``run``, as the command line's defaults have them."""

    name: Optional[str] = None
    remote: bool = False
    target: Optional[str] = None
    kernel: Optional[str] = None
    warmup: int = 2
    iters: int = 10
    max_noise: float = 0.01
    max_time: Optional[float] = None
    estimator: Optional[str] = None
    interleave: int = DEFAULT_INTERLEAVE
    timeout: float = 60.0
    rerun_all: bool = False
    profiler: Optional[str] = None
    devices: Optional[str] = None
    min_time_ms: float = 100.0
    targets_file: Optional[str] = None


def run(args: RunArgs):
    """Run every variant on every shape under the target's profiler and append results.

    With --remote the agent runs on the target over one SSH command (on a Slurm target, one job
    array of slurm.tasks chunks, dead tasks submitted again); without, it runs here (under the
    target's run_under, e.g. qemu). An interrupted run resumes where it stopped."""
    from ..run import run_local, run_remote, timing_choice
    from ..transport import for_hosts

    args = dataclasses.replace(args)  # the caller's options stay as given
    tgt = _target(args.name, args.remote, args.target, args.targets_file)
    args.estimator, args.max_time = timing_choice(tgt, args.estimator, args.max_time)
    options = _run_options(args.warmup, args.iters, args.timeout, args.rerun_all, args.profiler, args.devices, args.min_time_ms, args.max_noise, args.max_time,
                           args.estimator, args.interleave)
    if not (args.remote and tgt.is_remote):
        _check_perf_here(tgt, args.profiler)
    kern = kernel_of(tgt.name, args.kernel)
    if args.remote and tgt.is_remote:
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
