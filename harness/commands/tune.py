"""harness tune."""

from __future__ import annotations

import contextlib
import re
import time
from typing import List, Optional

import typer

from .. import ui
from ..errors import HarnessError
from ..run import DEFAULT_INTERLEAVE, ESTIMATOR_HELP, INTERLEAVE_HELP, MAX_TIME_HELP
from .common import ROOT, TargetsOpt, call, pick_build_target, require, require_triton

STRATEGY_HELP = "exhaustive (every config), random, halving (brief runs, the best re-run longer), bayes (optuna " \
                "TPE), genetic. Default: genetic with --budget 96 per shape on GPU targets and on spaces over 1000 " \
                "configs (the most robust at that budget on recorded H200 runs), else exhaustive"


def tune(
    kernel: str = typer.Argument(..., help="kernel to tune, e.g. matmul"),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target name from targets.yaml (default: its `default: NAME`, else local)"),
    shapes: Optional[str] = typer.Option(None, "--shapes", envvar="HARNESS_SHAPES", help="comma-separated MxNxK[:dtype[:layout]]"),
    shapes_file: Optional[str] = typer.Option(None, "--shapes-file", help="a file of shapes (format detected)"),
    shapes_format: str = typer.Option("auto", "--shapes-format", help="format of --shapes-file (auto-detected)"),
    thr: float = typer.Option(0.1, "--thr", help="hipBLASLt logs: keep GEMMs with at least this percent of FLOPs x calls"),
    space: Optional[str] = typer.Option(None, "--space", envvar="HARNESS_SPACE", help="file overriding the kernel's ranges"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="parallel compiles (default: all cores)"),
    compile_timeout: float = typer.Option(120.0, "--compile-timeout", help="seconds per compile"),
    warmup: int = typer.Option(2, "--warmup"),
    iters: int = typer.Option(10, "--iters", help="at least this many timed samples (a halving rung k takes eta^k times as many)"),
    max_noise: float = typer.Option(0.01, "--max-noise", help="keep sampling until the relative noise of the deciding estimator settles under this (0.01: 1%)"),
    max_time: Optional[float] = typer.Option(None, "--max-time", help=MAX_TIME_HELP, show_default=False),
    estimator: Optional[str] = typer.Option(None, "--estimator", help=ESTIMATOR_HELP, show_default=False),
    interleave: int = typer.Option(DEFAULT_INTERLEAVE, "--interleave", min=1, help=INTERLEAVE_HELP),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds per variant and shape"),
    strategy: Optional[str] = typer.Option(None, "--strategy", "-s", help=STRATEGY_HELP),
    budget: Optional[int] = typer.Option(None, "--budget", help="evaluations per shape, those already in the results included (default: 96 with the default strategy on GPU targets, else none)"),
    time_limit: Optional[str] = typer.Option(None, "--time-limit", help="stop searching after this long: 600, 90s, 10m, 2h"),
    batch_size: int = typer.Option(8, "--batch-size", help="configs a strategy asks for per shape and round"),
    seed: int = typer.Option(0, "--seed", help="seed of the search strategy"),
    warm_start: bool = typer.Option(True, "--warm-start/--no-warm-start", help="first round of each shape: the kernel's configs for its shape class and the winners of the nearest shapes in tuned/TARGET"),
    top: int = typer.Option(3, "--top", help="re-measure this many of the fastest configs per shape interleaved, and the fastest of the warm start's seeds where it is not among them (0: off)"),
    repeats: int = typer.Option(5, "--repeats", help="interleaved rounds of the re-measure (A B C, B C A, ...; with --library the library one place further each round); as many again for a shape whose winner's noise is over 2 %, or whose tie went to a candidate 1 % or more behind the fastest"),
    agent: str = typer.Option("long-lived", "--agent", help="long-lived: one agent per machine stays up across "
                              "rounds (GPU contexts, modules and test data kept) and the next round is built while "
                              "one is measured; per-round: a new agent for every round"),
    in_flight: int = typer.Option(0, "--in-flight", help="long-lived agent: rounds in flight at most (being "
                                  "built, queued or measured; later rounds are built while earlier ones are "
                                  "measured). 0: one per measuring device plus one"),
    min_time_ms: float = typer.Option(25.0, "--min-time-ms", help="GPU: time each config of the search at least "
                                      "this long (a halving rung k, eta^k times as long; the noise rule may take "
                                      "longer); the winners' re-measure takes at least 100 ms"),
    library: bool = typer.Option(False, "--library", help="also measure the library to beat on every shape (CPU: lib:reference; GPU: lib:torch.matmul)"),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help="tuned files to write besides csv/json: aiter, aiter-blockscale, triton, yaml"),
    html: bool = typer.Option(False, "--html", help="write the HTML report too"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Build, push, run and report. With --strategy other than exhaustive (or with --budget or
    --time-limit) the strategy asks for a few configs per shape at a time and only those are
    compiled, pushed and run, round by round; it resumes from the results already on disk.
    Without --strategy, GPU targets run genetic with --budget 96 per shape, warm-started: the
    first round of each shape holds the kernel's configs for its shape class (e.g. the persistent
    TMA tile for large products) and the winners of the nearest shapes already tuned.
    Then the fastest --top configs per shape are re-measured interleaved (with the config of the
    fewest SM cycles where the rows carry the clock, and the fastest seed, which the first round
    timed, perhaps at another clock than the later rounds), and a winner must beat the next by
    more than the measured spread (else the tie rule decides)."""
    clock = Stopwatch()
    from .. import kernels
    from ..build import BuildOptions
    from ..rounds import Session, remeasure_rows, search, shape_history
    from ..run import RunOptions, timing_choice
    from ..space import load_space_file
    from ..strategies import STRATEGIES, default_for
    from .build import build, read_shapes
    from .push import push
    from .report import report
    from .run import run

    if strategy is not None and strategy not in STRATEGIES:
        import difflib

        close = difflib.get_close_matches(strategy, STRATEGIES, n=1)
        raise HarnessError("unknown --strategy %r%s; choose from %s" % (
            strategy, " (did you mean %r?)" % close[0] if close else "", ", ".join(STRATEGIES)))
    if budget is not None and budget < 1:
        raise HarnessError("--budget is a number of evaluations per shape, at least 1 (got %d)" % budget)
    if in_flight < 0:
        raise HarnessError("--in-flight must be 0 (automatic) or more (got %d)" % in_flight)
    if batch_size < 1:
        raise HarnessError("--batch-size must be at least 1 (got %d)" % batch_size)
    if top < 0 or (top and repeats < 2):
        raise HarnessError("--top must be 0 or more and --repeats at least 2 (got --top %d --repeats %d)" % (top, repeats))
    seconds = parse_duration(time_limit) if time_limit is not None else None
    if strategy == "bayes":
        require("optuna", "--strategy bayes", "pip install 'optuna>=4'")
    tgt = pick_build_target(target, targets_file)
    target = tgt.name
    estimator, max_time = timing_choice(tgt, estimator, max_time)
    if tgt.is_gpu:
        require_triton(tgt)
    kern = kernels.get(kernel)
    space_dict = load_space_file(space, kern.space_for(tgt)) if space else kern.space_for(tgt)
    if strategy is None:
        strategy, default_budget = default_for(tgt, space_dict)
        if default_budget is not None and budget is None and seconds is None:
            budget = default_budget
        if default_budget is not None:
            ui.out.print("strategy %s%s (the default here; --strategy exhaustive measures every config)" % (
                strategy, ", --budget %d per shape" % budget if budget else ""))
    build_options = BuildOptions(jobs=jobs, compile_timeout=compile_timeout)
    run_options = RunOptions(warmup=warmup, iters=iters, timeout=timeout, min_time_ms=min_time_ms,
                             max_noise=max_noise, max_time=max_time, estimator=estimator,
                             interleave=interleave)
    if agent not in ("long-lived", "per-round"):
        raise HarnessError("--agent %s: choose long-lived or per-round" % agent)
    long_lived = agent == "long-lived" and not getattr(tgt, "slurm", None)  # Slurm runs rounds as its jobs

    if strategy == "exhaustive" and budget is None and seconds is None:
        # every config in one round: the plain build, push, run
        with clock("build"):
            call(build, kernel=kernel, target=target, shapes=shapes, shapes_file=shapes_file,
                 shapes_format=shapes_format, thr=thr, space=space, jobs=jobs, compile_timeout=compile_timeout,
                 library=library, targets_file=targets_file)
        if tgt.is_remote:
            with clock("push"):
                call(push, target=target, kernel=kern.name, targets_file=targets_file)
        with clock("run"):
            call(run, remote=tgt.is_remote, target=target, kernel=kern.name, warmup=warmup, iters=iters,
                 timeout=timeout, min_time_ms=min_time_ms, max_noise=max_noise, max_time=max_time,
                 estimator=estimator, interleave=interleave, targets_file=targets_file)
        if top:
            from ..bundle import Manifest, bundle_dir

            bundle = bundle_dir(ROOT, tgt.name, kern.name)
            manifest_text = (bundle / "manifest.json").read_text()
            shape_list = [s.to_shape(kern.problem) for s in Manifest.load(bundle / "manifest.json").shapes]
            session = Session(ROOT, tgt, kern, shape_list, build_options, run_options, long_lived=long_lived)
            try:
                session.sync()
                rows, skip = session.rows(), remeasure_rows(session.results_path)
                histories = {s.id: shape_history(rows, s.id, space_dict, skip) for s in shape_list}
                with clock("re-measure"):
                    _remeasure(session, space_dict, histories, top, repeats)
            finally:
                session.close()
                (bundle / "manifest.json").write_text(manifest_text)  # the full bundle again
    else:
        shape_list = read_shapes(tgt, shapes, shapes_file, shapes_format, None, thr, None, kern)
        session = Session(ROOT, tgt, kern, shape_list, build_options, run_options, library=library,
                          long_lived=long_lived, in_flight=in_flight)
        try:
            fetched = session.sync()
            if fetched:
                ui.out.print("resuming with %d rows fetched from %s" % (fetched, tgt.name))
            with clock("search"):
                searches = search(session, space_dict, strategy, seed=seed, batch_size=batch_size, budget=budget,
                                  time_limit=seconds, on_round=_round_printer(session),
                                  warm_start=warm_start)
            _search_table(strategy, searches, session, space_dict)
            if top:
                with clock("re-measure"):
                    _remeasure(session, space_dict, {s.shape.id: s.history for s in searches}, top, repeats,
                               {s.shape.id: getattr(s.strategy, "seeds", []) for s in searches})
        finally:
            session.close()
    with clock("report"):
        call(report, target=target, kernel=kern.name, formats=formats, html=html, targets_file=targets_file)
    ui.out.print(clock.line())


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


def _remeasure(session, space, histories, top, repeats, seeds=None) -> None:
    from ..rounds import remeasure_winners

    n = sum(min(top, len({tuple(sorted(t.config.items())) for t in h if t.ok})) for h in histories.values())
    if not n:
        return
    ui.out.print("re-measuring the top %d configs of %d shapes interleaved, %d rounds (and, where not among them, "
                 "each shape's config of the fewest SM cycles%s)" % (
        top, len(histories), repeats, " and fastest seed" if seeds and any(seeds.values()) else ""))
    from ..strategies.winner import entry_words

    winners = remeasure_winners(session, space, histories, top, repeats, seeds)
    for sid, w in winners.items():
        noise = "" if w.get("noise") is None else ", noise %.2f %%" % (100.0 * w["noise"])
        ui.out.print("  %s: %s, %s %.4g us%s, spread %.4g us (%.1f %%), %s" % (
            sid, " ".join("%s=%s" % kv for kv in w["config"].items()), w.get("estimator", "median"),
            w["median_ns"] / 1e3, noise,
            w["spread_ns"] / 1e3, 100.0 * w["rel_spread"], entry_words(w)))


def _round_printer(session):
    """on_round for search: the round's line, then configs/s, device busy and waits so far."""
    began, done = time.monotonic(), [0]

    def on_round(number, fidelity, group):
        done[0] += sum(len(s.new[len(s.new) - s.round_sizes[-1]:]) for s, _ in group if s.round_sizes)
        _round_line(number, fidelity, group)
        ui.out.print("  " + ui.throughput_line(done[0], time.monotonic() - began, session.timing()))

    return on_round


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
