"""tune: build, push, run and report, or a search round by round, then the winners re-measured."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from dataclasses import dataclass
from typing import List, Optional

from .. import ui
from ..errors import HarnessError
from ..run import DEFAULT_INTERLEAVE
from .common import ROOT, pick_build_target, require, require_triton

@dataclass
class TuneArgs:
    """The options of ``tune``, as the command line's defaults have them."""

    kernel: str
    target: Optional[str] = None
    shapes: Optional[str] = None
    shapes_file: Optional[str] = None
    shapes_format: str = "auto"
    thr: float = 0.1
    space: Optional[str] = None
    jobs: int = 0
    compile_timeout: float = 120.0
    warmup: int = 2
    iters: int = 10
    max_noise: float = 0.01
    max_time: Optional[float] = None
    estimator: Optional[str] = None
    interleave: int = DEFAULT_INTERLEAVE
    timeout: float = 60.0
    strategy: Optional[str] = None
    strategy_options: Optional[List[str]] = None  # NAME=VALUE texts, as --strategy-option takes them
    budget: Optional[int] = None
    time_limit: Optional[str] = None
    batch_size: int = 8
    seed: int = 0
    warm_start: bool = True
    effort: Optional[str] = "default"  # quick, default, full (harness/effort.py); None: default
    fresh: bool = False  # set earlier measurements aside and measure anew
    top: Optional[int] = None  # None: the --effort level's
    repeats: Optional[int] = None  # None: the --effort level's
    agent: str = "long-lived"
    in_flight: int = 0
    min_time_ms: float = 25.0
    library: bool = False
    formats: Optional[List[str]] = None
    html: bool = False
    targets_file: Optional[str] = None


def tune(args: TuneArgs):
    """Build, push, run and report: the search asks configs round by round, the finalists are
    re-measured interleaved, and the report writes the tuned files (``harness tune --help``,
    commands/workflow.py, says each step and option)."""
    clock = Stopwatch()
    from .. import kernels
    from ..compile import cache as compile_cache

    from .. import tune_timing

    compiles_before = compile_cache.counts()
    timings, configs, timing_record = {}, 0, None  # where the time went (harness.tune_timing)
    from ..build import BuildOptions
    from ..remeasure import not_search_rows
    from ..rounds import Session, search, shape_history, uses_streams
    from ..run import RunOptions, timing_choice
    from ..space import load_space_file
    from ..strategies import default_for, get_strategy, names, parse_options
    args = dataclasses.replace(args)  # the caller's options stay as given
    from .. import effort as efforts

    level = efforts.get(args.effort)
    args.top = level.top if args.top is None else args.top
    args.repeats = level.repeats if args.repeats is None else args.repeats

    strategy_names = names()
    if args.strategy is not None and args.strategy not in strategy_names:
        import difflib

        close = difflib.get_close_matches(args.strategy, strategy_names, n=1)
        raise HarnessError("unknown --strategy %r%s; choose from %s" % (
            args.strategy, " (did you mean %r?)" % close[0] if close else "", ", ".join(strategy_names)))
    if args.budget is not None and args.budget < 1:
        raise HarnessError("--budget is a number of evaluations per shape, at least 1 (got %d)" % args.budget)
    if args.in_flight < 0:
        raise HarnessError("--in-flight must be 0 (automatic) or more (got %d)" % args.in_flight)
    if args.batch_size < 1:
        raise HarnessError("--batch-size must be at least 1 (got %d)" % args.batch_size)
    if args.top < 0 or (args.top and args.repeats < 2):
        raise HarnessError("--top must be 0 or more and --repeats at least 2 (got --top %d --repeats %d)" % (
            args.top, args.repeats))
    seconds = parse_duration(args.time_limit) if args.time_limit is not None else None
    if args.strategy == "bayes":
        require("optuna", "--strategy bayes", "pip install 'optuna>=4'")
    tgt = pick_build_target(args.target, args.targets_file)
    args.target = tgt.name
    # CPU: the level's sampling per re-measured job, unless --max-time says how long every job samples
    remeasure_time = level.remeasure_time_cpu if (args.max_time is None and not tgt.is_gpu) else None
    args.estimator, args.max_time = timing_choice(tgt, args.estimator, args.max_time)
    kern = kernels.get(args.kernel)
    if args.agent not in ("long-lived", "per-round"):
        raise HarnessError("--agent %s: choose long-lived or per-round" % args.agent)
    from ..transport import transport_class
    from ..transport.base import SCHEDULER, can

    long_lived = args.agent == "long-lived" and not can(transport_class(tgt), SCHEDULER)  # Slurm: rounds are its jobs
    early_agents = None
    if tgt.is_gpu:
        require_triton(tgt)
        from ..compile.triton_gpu import prestart_compile_workers

        prestart_compile_workers(args.jobs)  # Triton imported in them while the tune starts
    if tgt.is_gpu and long_lived and not tgt.is_remote and "exhaustive" not in (args.strategy, level.strategy):
        from ..rounds import start_gpu_agent

        early_agents = start_gpu_agent(ROOT, tgt, kern.name)  # its GPU workers start while the tune sets up
    # after those two: the report's import (pandas) was 0.23 of the 0.28 s before them on the 2-core VM,
    # and that part of the start took 0.8 s on a GPU node
    from .build import BuildArgs, build, read_shapes
    from .push import PushArgs, push
    from .report import ReportArgs, report
    from .run import RunArgs, run

    space_dict = load_space_file(args.space, kern.space_for(tgt)) if args.space else kern.space_for(tgt)
    if args.strategy is None:
        args.strategy, default_budget = _effort_search(level, tgt, space_dict, default_for)
        if default_budget is not None and args.budget is None and seconds is None:
            args.budget = default_budget
        ui.out.print("effort %s: strategy %s%s, top %d re-measured %d rounds%s%s (--effort exhaustive measures "
                     "every config)" % (level.name, args.strategy, ", --budget %d per shape" % args.budget if args.budget else "",
                                  args.top, args.repeats,
                                  " of %g s a job" % remeasure_time if remeasure_time else "",
                                  ", losers raced out %g %% behind" % (100 * level.race)
                                  if level.race and not tgt.is_gpu else ""))
    try:  # the options' names and types, then their values (e.g. halving's eta >= 2)
        strategy_options = parse_options(args.strategy, args.strategy_options)
        get_strategy(args.strategy, **strategy_options)
    except ValueError as exc:
        raise HarnessError("--strategy-option %s" % exc)
    build_options = BuildOptions(jobs=args.jobs, compile_timeout=args.compile_timeout)
    run_options = RunOptions(warmup=args.warmup, iters=args.iters, timeout=args.timeout, min_time_ms=args.min_time_ms,
                             max_noise=args.max_noise, max_time=args.max_time, estimator=args.estimator,
                             interleave=args.interleave,
                             race=level.race if (not tgt.is_gpu and args.strategy != "exhaustive") else 0.0)
    from .. import reuse
    from ..run import local_results_path

    key = reuse.measure_key(tgt, run_options)
    # a re-measured winner is kept for a run that re-measures the same way
    winners_key = key["key"] + ("/remeasure %gs" % remeasure_time if remeasure_time else "")
    aside = reuse.prepare(local_results_path(ROOT, tgt.name, kern.name), key, args.fresh)
    if aside:
        ui.out.print(aside)

    if args.strategy == "exhaustive" and args.budget is None and seconds is None:
        # every config in one round: the plain build, push, run
        _say_plan(tgt, kern, args, space_dict, None)
        with clock("build"):
            build(BuildArgs(kernel=args.kernel, target=args.target, shapes=args.shapes, shapes_file=args.shapes_file,
                            shapes_format=args.shapes_format, thr=args.thr, space=args.space, jobs=args.jobs,
                            compile_timeout=args.compile_timeout, library=args.library, effort="exhaustive",
                            targets_file=args.targets_file))
        if tgt.is_remote:
            with clock("push"):
                push(PushArgs(target=args.target, kernel=kern.name, targets_file=args.targets_file))
        with clock("run"):
            run(RunArgs(remote=tgt.is_remote, target=args.target, kernel=kern.name, warmup=args.warmup,
                        iters=args.iters, timeout=args.timeout, min_time_ms=args.min_time_ms,
                        max_noise=args.max_noise, max_time=args.max_time, estimator=args.estimator,
                        interleave=args.interleave, targets_file=args.targets_file))
        _record_exhaustive_rates(tgt, kern, clock)
        if args.top:
            from ..bundle import Manifest, bundle_dir

            bundle = bundle_dir(ROOT, tgt.name, kern.name)
            manifest_text = (bundle / "manifest.json").read_text()
            shape_list = [s.to_shape(kern.problem) for s in Manifest.load(bundle / "manifest.json").shapes]
            session = Session(ROOT, tgt, kern, shape_list, build_options, run_options, long_lived=long_lived,
                              remeasure_max_time=remeasure_time)
            session.adopt(early_agents)
            try:
                session.sync()
                rows, skip = session.rows(), not_search_rows(session.results_path)
                histories = {s.id: shape_history(rows, s.id, space_dict, skip) for s in shape_list}
                with clock("re-measure"):
                    _Remeasure(session, space_dict, args.top, args.repeats, winners_key).finish(histories)
            finally:
                session.close()
                (bundle / "manifest.json").write_text(manifest_text)  # the full bundle again
    else:
        shape_list = read_shapes(tgt, args.shapes, args.shapes_file, args.shapes_format, None, args.thr, None, kern)
        session = Session(ROOT, tgt, kern, shape_list, build_options, run_options, library=args.library,
                          long_lived=long_lived, in_flight=args.in_flight, remeasure_max_time=remeasure_time)
        session.adopt(early_agents)
        try:
            fetched = 0 if aside else session.sync()
            if fetched:
                ui.out.print("resuming with %d rows fetched from %s" % (fetched, tgt.name))
            skip_rows = not_search_rows(session.results_path)
            reused = reuse.reused_rows([r for i, r in enumerate(session.rows()) if i not in skip_rows],
                                       [sh.id for sh in shape_list])
            if reused:
                ui.out.print("reusing %d measurements already in %s (same artifacts' configs, machine and timing "
                             "options; --fresh measures anew)" % (reused, session.results_path))
            todo = _say_plan(tgt, kern, args, space_dict, shape_list, reused)
            # on a GPU whose shapes are streams, a shape's re-measure starts as its search ends
            early = bool(args.top) and uses_streams(session, seconds)
            remeasure = _Remeasure(session, space_dict, args.top, args.repeats, winners_key, early=early)
            with clock("search"):
                searches = search(session, space_dict, args.strategy, seed=args.seed, batch_size=args.batch_size, budget=args.budget,
                                  time_limit=seconds, on_round=_round_printer(session, todo, args, len(shape_list)),
                                  warm_start=args.warm_start, on_spent=remeasure.on_spent if early else None,
                                  **strategy_options)
            new = sum(len(s.new) for s in searches)
            if new:
                efforts.record_rates(ROOT, tgt, eval_s=clock.phases["search"] / new)
            timings["search"] = session.timing()
            configs = new
            _search_table(args.strategy, searches, session, space_dict)
            if args.top:
                with clock("re-measure"):
                    remeasure.finish({s.shape.id: s.history for s in searches},
                                     {s.shape.id: getattr(s.strategy, "seeds", []) for s in searches})
                timings["re-measure"] = session.timing()
        finally:
            session.close()
        timing_record = tune_timing.summarize(dict(clock.phases), timings, configs,
                                              _compiles(compiles_before, compile_cache.counts()))
        tune_timing.save(session.results_path, timing_record)
    with clock("report"):
        report(ReportArgs(target=args.target, kernel=kern.name, formats=args.formats, html=args.html,
                          targets_file=args.targets_file))
    ui.out.print(compiles_line(_compiles(compiles_before, compile_cache.counts()), compile_cache.cache_root()))
    if timing_record is not None:
        timing_record["phases"] = {k: round(v, 3) for k, v in clock.phases.items()}  # the report's too
        for line in tune_timing.lines(timing_record):
            ui.out.print(line)
    ui.out.print(clock.line())


def _compiles(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in ("compiled", "reused")}


def compiles_line(compiles: dict, where) -> str:
    """How many kernels this tune compiled and how many it reused from the compile cache kept
    across tunes (harness.compile.cache), and where that cache is."""
    return "compiles: %d compiled, %d reused from the compile cache (%s)" % (
        compiles["compiled"], compiles["reused"], where if where is not None else "off: HARNESS_CACHE_DIR=off")


class Stopwatch:
    """The wall time of tune's phases, for the line that ends it."""

    def __init__(self):
        self.began = time.monotonic()
        self.phases = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + time.monotonic() - start

    def line(self) -> str:
        return "tune wall time: %.1f s end to end (%s)" % (
            time.monotonic() - self.began, ", ".join("%s %.1f s" % kv for kv in self.phases.items()))


class _Remeasure:
    """tune's winners' re-measure (harness.remeasure): a shape whose finalists are those of the
    last re-measure under the same ``key`` keeps its winner; the others are re-measured, each as
    its search ends (``early``: a GPU tune whose shapes are streams, ``on_spent``) or all after
    the search (``finish``)."""

    def __init__(self, session, space, top, repeats, key=None, early=False):
        from ..remeasure import ShapeRemeasures, load_winners

        self.session, self.space, self.top, self.repeats, self.key = session, space, top, repeats, key
        self.last = load_winners(session.results_path)["shapes"] if key else {}
        self.kept = {}
        self.early = ShapeRemeasures(session, space, top, repeats) if early else None

    def on_spent(self, search) -> None:
        """A shape's search is spent: its re-measure starts now, beside the other shapes' search."""
        self._start(search.shape.id, search.history, getattr(search.strategy, "seeds", []))

    def _start(self, sid, history, seeds) -> None:
        from ..remeasure import finalists

        if sid in self.kept or sid in self.early.shapes or not self._needs_remeasure(sid, finalists(history, self.top, seeds)):
            return
        if not self.early.shapes:
            ui.out.print("re-measuring each shape's top %d configs as its search ends (%d rounds interleaved on one "
                         "device; and, where not among them, its config of the fewest SM cycles and fastest seed)"
                         % (self.top, self.repeats))
        self.early.start(sid, history, seeds)

    def _needs_remeasure(self, sid, configs) -> bool:
        """Whether shape ``sid`` with these finalists is re-measured: not where it had the same ones
        last time (its winner is kept), nor where it has none."""
        from ..reuse import reusable_winners

        if not configs:
            return False
        kept = reusable_winners(self.last, {sid: configs}, self.key) if self.key else {}
        self.kept.update(kept)
        return not kept

    def finish(self, histories, seeds=None) -> None:
        """The re-measure of every shape not re-measured yet, then the winners saved and said."""
        from .. import effort as efforts
        from ..remeasure import finalists, remeasure_winners, save_winners, sift

        seeds = seeds or {}
        if self.early is not None:
            for sid, history in histories.items():  # a shape whose search was never a stream (spent at once)
                self._start(sid, history, seeds.get(sid, ()))
            todo = list(self.early.shapes)
        else:
            began = time.monotonic()
            histories = sift(self.session, self.space, histories)
            todo = [sid for sid, h in histories.items() if self._needs_remeasure(sid, finalists(h, self.top, seeds.get(sid, ())))]
        if self.kept:
            ui.out.print("reusing the re-measured winners of %d shape(s) (the same finalists, machine and timing "
                         "options as last time; --fresh measures anew): %s" % (len(self.kept), ", ".join(sorted(self.kept))))
        if not todo:
            return
        jobs = efforts.remeasure_jobs(len(todo), self.top, self.repeats, self.session.library)
        if self.early is not None:
            winners = self.early.finish()
        else:
            ui.out.print(efforts.plan_line("re-measure", 0, 0, jobs, efforts.estimate(ROOT, self.session.target,
                                                                                     remeasures=jobs)))
            ui.out.print("re-measuring the top %d configs of %d shapes interleaved, %d rounds (and, where not among "
                         "them, each shape's config of the fewest SM cycles%s)" % (
                             self.top, len(todo), self.repeats, " and fastest seed" if any(seeds.values()) else ""))
            winners = remeasure_winners(self.session, self.space, {sid: histories[sid] for sid in todo}, self.top,
                                        self.repeats, seeds)
            if jobs:  # (only here: beside the search, its seconds would not be the re-measure's own; the sift's in them)
                efforts.record_rates(ROOT, self.session.target, remeasure_s=(time.monotonic() - began) / jobs)
        if self.key and winners:  # the key they were measured under, so that a second run may keep them
            for w in winners.values():
                w["measure_key"] = self.key
            save_winners(self.session.results_path, winners, [])
        _say_winners(winners)


def _say_winners(winners: dict) -> None:
    from ..strategies.winner import entry_words

    for sid, w in winners.items():
        noise = "" if w.get("noise") is None else ", noise %.2f %%" % (100.0 * w["noise"])
        ui.out.print("  %s: %s, %s %.4g us%s, spread %.4g us (%.1f %%), %s" % (
            sid, " ".join("%s=%s" % kv for kv in w["config"].items()), w.get("estimator", "median"),
            w["median_ns"] / 1e3, noise,
            w["spread_ns"] / 1e3, 100.0 * w["rel_spread"], entry_words(w)))


def _round_printer(session, todo=None, args=None, n_shapes=0):
    """on_round for search: the round's line, then configs/s, device busy and waits so far, and
    (``todo``: the evaluations the search has to make) the ETA of the search and the re-measure
    (effort.Eta)."""
    began, done = time.monotonic(), [0]
    from .. import effort as efforts

    eta = efforts.Eta(ROOT, session.target, todo or 0,
                      efforts.remeasure_jobs(n_shapes, args.top, args.repeats, session.library) if args else 0)

    from ..compile import cache as compile_cache

    compiles_before = sum(compile_cache.counts().values())

    def on_round(number, fidelity, group):
        done[0] += sum(len(s.new[len(s.new) - s.round_sizes[-1]:]) for s, _ in group if s.round_sizes)
        _round_line(number, fidelity, group)
        timing = session.timing()
        line = ui.throughput_line(done[0], time.monotonic() - began, timing)
        if todo:
            compiled = sum(compile_cache.counts().values()) - compiles_before
            left = eta.left(done[0], compiled=compiled, measure_s=timing.get("measure", 0.0),
                            round_size=sum(len(b.configs) for _, b in group))
            line += "; ETA %s (%d of %d configs measured)" % (efforts.duration(left), min(done[0], todo), todo)
        ui.out.print("  " + line)

    return on_round


def _record_exhaustive_rates(tgt, kern, clock) -> None:
    """Seconds per compile and per measured job of an every-config tune, for the next estimate
    (the build's time over its variants, the run's over its jobs)."""
    from .. import effort as efforts
    from ..bundle import Manifest, bundle_dir

    try:
        manifest = Manifest.load(bundle_dir(ROOT, tgt.name, kern.name) / "manifest.json")
    except Exception:  # no bundle: nothing to learn from
        return
    variants, jobs = len(manifest.variants), len(manifest.jobs)
    build_s, run_s = clock.phases.get("build", 0.0), clock.phases.get("run", 0.0)
    # a second run compiles and measures nothing: its few seconds say nothing of the rates
    efforts.record_rates(ROOT, tgt, compile_s=build_s / variants if variants and build_s > 5 else None,
                         measure_s=run_s / jobs if jobs and run_s > 5 else None)


def _effort_search(level, tgt, space, default_for) -> tuple:
    """(strategy, budget per shape) of a tune without --strategy at ``level``: exhaustive is
    every config; the others the target's search (genetic) with the level's budget, on CPUs as on GPUs."""
    from .. import effort as efforts

    if level.strategy == "exhaustive":
        return "exhaustive", None
    size = 1
    for values in space.values():
        size *= len(values)
    budget = efforts.budget_for(level, tgt.is_gpu)
    if budget is not None and size <= budget:  # a space no bigger than the budget: every config, once
        return "exhaustive", None
    strategy, _ = default_for(tgt, space)
    if strategy == "exhaustive":  # a CPU board's small space: the search GPU targets use
        from ..strategies import DEFAULT_SEARCH

        strategy = DEFAULT_SEARCH
    return level.strategy or strategy, budget


def _say_plan(tgt, kern, args, space, shape_list, reused=0) -> int:
    """The one line said before the work: compiles, measurements, re-measurements, and about how
    long at the rates this project saw on the target (harness/effort.py). Returns the evaluations
    the search has to make (0: every config, in one round)."""
    from .. import effort as efforts

    if shape_list is None:  # exhaustive: the size of the space (before pruning) per shape
        size = 1
        for values in space.values():
            size *= len(values)
        from .build import read_shapes

        from .build import feasible_plan

        shapes = read_shapes(tgt, args.shapes, args.shapes_file, args.shapes_format, None, args.thr, None, kern)
        n_shapes = len(shapes)
        counted = feasible_plan(kern, tgt, shapes, space)
        compiles, jobs = counted if counted is not None else (size, size * n_shapes)
        remeasures = efforts.remeasure_jobs(n_shapes, args.top, args.repeats, args.library)
        seconds = efforts.estimate(ROOT, tgt, compiles=compiles, measures=jobs, remeasures=remeasures)
        what = "tune (every config the rules keep for these shapes)" if counted is not None else \
            "tune (every config; pruning drops some)"
        ui.out.print(efforts.plan_line(what, compiles, jobs, remeasures, seconds))
        return 0
    todo = max(0, (args.budget or 0) * len(shape_list) - reused) if args.budget else 0
    remeasures = efforts.remeasure_jobs(len(shape_list), args.top, args.repeats, args.library)
    seconds = efforts.estimate(ROOT, tgt, evals=todo, remeasures=remeasures)
    if todo:
        ui.out.print(efforts.plan_line("tune", todo, todo, remeasures, seconds))
    elif reused and args.budget:
        ui.out.print("nothing to compile or measure for the search: every shape's budget (%d) is spent on the "
                     "measurements reused" % args.budget)
    return todo


def _round_line(number, fidelity, group) -> None:
    configs = sum(len(b.configs) for _, b in group)
    best = []
    for s, _ in group:
        b = s.best
        if b is not None:
            best.append("%s %.4g us" % (s.shape.id, b.time_ns / 1e3))
    ui.out.print("round %d%s: %d configs on %d shapes; best so far: %s" % (
        number, "" if fidelity == 1 else " (x%d longer)" % fidelity, configs, len(group), ", ".join(best) or "-"))


def _search_table(strategy, searches, session, space) -> None:
    from rich.table import Table

    table = Table(title="search: %s, %d rounds" % (strategy, session.rounds))
    for col in ("shape", "feasible", "resumed", "new", "distinct", "best", "config", "stopped"):
        table.add_column(col, justify="left" if col in ("shape", "config", "stopped") else "right")
    for s in searches:
        b = s.best
        feasible = len(s.strategy.problem(space, s.is_pruned))
        table.add_row(s.shape.id, str(feasible), str(s.resumed), str(len(s.new)),
                      str(len({tuple(sorted(t.config.items())) for t in s.history})),
                      "%.4g us" % (b.time_ns / 1e3) if b else "-",
                      " ".join("%s=%s" % kv for kv in b.config.items()) if b else "-", s.stopped or "-")
    ui.out.print(table)


def parse_duration(text: str) -> float:
    """600, 600s, 10m, 1.5h -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(text))
    if not match:
        raise HarnessError("--time-limit %r: write seconds (600), or 90s, 10m, 2h" % text)
    value = float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    if value <= 0:
        raise HarnessError("--time-limit must be more than 0")
    return value
