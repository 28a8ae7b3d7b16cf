"""harness build, push, run, report and tune: the command line's options and help.

Each command turns its options into the dataclass of its function in harness/api/ and calls it;
the work is done there, where bench/ scripts and tests call it too.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import HarnessError
from ..run import DEFAULT_INTERLEAVE, ESTIMATOR_HELP, INTERLEAVE_HELP, MAX_TIME_HELP
from .common import TargetsOpt, targets_file_of


def _strategy_help(what) -> str:
    """The strategies' names and lines, or their options (strategies.registry(): those of
    $HARNESS_STRATEGIES_PATH included); a strategy that cannot be loaded is named here, and
    `harness tune` says why in one line."""
    from .. import strategies

    try:
        return what(strategies)
    except HarnessError as exc:
        return "(%s)" % exc


STRATEGY_HELP = _strategy_help(lambda s: s.strategies_help()) + \
    ". Default: the --effort level's: genetic, warm-started, with --budget 16 per shape on CPU boards and 96 on " \
    "GPU targets at default (on GPUs the most robust at that budget on recorded H200 runs); full: 128 and 384; "\
    "exhaustive: every config"
def _effort_help() -> str:
    from ..effort import help_text

    return help_text()


EFFORT_HELP = _effort_help()
STRATEGY_OPTION_HELP = "NAME=VALUE: an option of the --strategy (repeat for more). " + \
    _strategy_help(lambda s: s.options_help())


def build(
    kernel: str = typer.Argument(..., help="kernel to build, e.g. matmul"),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target name from targets.yaml (default: its `default: NAME`, else local)"),
    shapes: Optional[str] = typer.Option(None, "--shapes", envvar="HARNESS_SHAPES", help="comma-separated shapes as the kernel writes them; matmul: MxNxK[:dtype[:layout]], e.g. 64x64x64,256x256x128:fp16"),
    shapes_file: Optional[str] = typer.Option(None, "--shapes-file", help="a file of shapes (format detected)"),
    shapes_format: str = typer.Option("auto", "--shapes-format", help="format of --shapes-file (auto-detected)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="dtype for shapes that name none (fp32 on CPUs, fp16 on GPUs)"),
    space: Optional[str] = typer.Option(None, "--space", envvar="HARNESS_SPACE", help="YAML/JSON file of parameter -> values overriding the kernel's ranges"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="parallel compiles (default: all cores)"),
    compile_timeout: float = typer.Option(120.0, "--compile-timeout", help="seconds per compile before it counts as compile_timeout"),
    seed: int = typer.Option(0, "--seed", help="seed of the test data"),
    frontend: str = typer.Option("auto", "--frontend", help="cpu: cpp (default) or triton-cpu (needs Triton-CPU here, or --from-ir)"),
    from_ir: Optional[str] = typer.Option(None, "--from-ir", help="triton-cpu: import IR dumps made elsewhere (<kernel>/<kernel>_<BM>_<BN>_<BK>_<G>/ dirs)"),
    thr: float = typer.Option(0.1, "--thr", help="hipBLASLt logs: keep GEMMs with at least this percent of the workload's measured time x calls (hipBLASLt's rule, where the log has us: per line), else of its FLOPs x calls"),
    summary_csv: Optional[str] = typer.Option(None, "--summary", help="hipBLASLt logs: write the workload summary CSV (shape, group, calls, share) here"),
    library: bool = typer.Option(False, "--library", help="also measure the library to beat on every shape (CPU: the reference build lib:reference; GPU: torch.matmul on the node, lib:torch.matmul)"),
    effort: str = typer.Option("default", "--effort", help="quick and default build, for each shape, the warm start's configs and configs drawn from its pruned space up to the level's budget (GPU targets 32, 96, 384; CPU boards 8, 16, 128 at quick, default, full); exhaustive builds the whole space"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Generate the search space, prune it per shape, compile every variant in parallel and
    write the bundle (manifest, artifacts, test data) under build/TARGET/KERNEL.

    Without --target it builds for targets.yaml's `default: NAME`, else for `local`, and says
    which. A second build compiles only what changed (artifacts are content-addressed)."""
    from ..api.build import BuildArgs, build as run_build

    return run_build(BuildArgs(kernel=kernel, target=target, shapes=shapes, shapes_file=shapes_file, shapes_format=shapes_format, dtype=dtype, space=space, jobs=jobs, compile_timeout=compile_timeout, seed=seed, frontend=frontend, from_ir=from_ir, thr=thr, summary_csv=summary_csv, library=library, effort=effort, targets_file=targets_file_of(targets_file)))


def push(
    target: Optional[str] = typer.Argument(None, help="target to push to (default: the last one built)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel bundle to push (default: the last built)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Copy the bundle and the agent to the target over SSH: one round trip to learn what the
    remote has, then one tar stream with only the missing files.

    When nothing is built for the target yet, it is built first from the last build's kernel,
    shapes and options (content-addressed: what was compiled before is not compiled again)."""
    from ..api.push import PushArgs, push as run_push

    return run_push(PushArgs(target=target, kernel=kernel, targets_file=targets_file_of(targets_file)))


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
    from ..api.run import RunArgs, run as run_run

    return run_run(RunArgs(name=name, remote=remote, target=target, kernel=kernel, warmup=warmup, iters=iters,
                           max_noise=max_noise, max_time=max_time, estimator=estimator, interleave=interleave,
                           timeout=timeout, rerun_all=rerun_all, profiler=profiler, devices=devices,
                           min_time_ms=min_time_ms, targets_file=targets_file_of(targets_file)))


def report(
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target to report (default: the last run)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel to report (default: the last built)"),
    no_fetch: bool = typer.Option(False, "--no-fetch", help="use the local results only"),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help="also write: aiter (aiter's bf16/fp16 tuned GEMM CSV, libtype triton), triton (aiter's Triton JSON per N,K: M_LEQ_x/M_GEQ_x keys; matmul GEMM-A16W16, fp8_blockscale GEMM-A8W8_BLOCKSCALE), aiter-blockscale (same as triton for fp8_blockscale: aiter's CK blockscale CSV takes ck/cktile kernels only), yaml (tune_gemm), vllm / sglang (fp8_blockscale: their block-fp8 JSON per N,K,device); docs/formats.md; repeat or comma-separate"),
    all_candidates: bool = typer.Option(False, "--all-candidates", help="aiter: also write every candidate, failures included (aiter's -o2; KERNEL.aiter.all.csv)"),
    sort: bool = typer.Option(False, "--sort", help="aiter: sort rows by arch, cu_num, M, N, K"),
    tag: Optional[str] = typer.Option(None, "--tag", help="triton: the tag in {arch}-GEMM-{tag}.json (default from the dtype)"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="folder of the tuned files (default tuned/TARGET); with --merge the merged file"),
    html: bool = typer.Option(False, "--html", help="write one offline page with tables and plots (KERNEL.html)"),
    weights: Optional[str] = typer.Option(None, "--weights", help="CSV with shape_id and weight (or calls), e.g. build --summary's; default: the shapes' weights"),
    err_ratio: Optional[float] = typer.Option(None, "--err-ratio", help="largest share of output elements outside tolerance a tuned entry may have"),
    only_faster: bool = typer.Option(False, "--only-faster", help="tuned files keep only entries faster than the library and within --err-ratio"),
    threshold: float = typer.Option(0.8, "--threshold", help="counter correlation: list counters with |r| at or above this"),
    merge: Optional[List[str]] = typer.Option(None, "--merge", help="merge these tuned files (repeat; .csv or .yaml) into --out; nothing is measured"),
    force: bool = typer.Option(False, "--force", help="--merge: merge files of different arch, device or CU count"),
    compare_wo_tuning: Optional[str] = typer.Option(None, "--compare-wo-tuning", help="rebuild exactly the configs of this tuned file (.csv, .yaml, .json), run them, check answers, report their times"),
    library: bool = typer.Option(False, "--library", help="--compare-wo-tuning: also run the library reference on every shape"),
    iters: int = typer.Option(10, "--iters", help="--compare-wo-tuning: timed iterations"),
    warmup: int = typer.Option(2, "--warmup", help="--compare-wo-tuning: untimed runs before timing"),
    timeout: float = typer.Option(60.0, "--timeout", help="--compare-wo-tuning: seconds per config and shape"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="--compare-wo-tuning: parallel compiles (default: all cores)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Fetch remote results (one tar stream), pick the best config per shape from ok rows
    (differences within the measured spread are ties, broken by lower spread; a winner
    re-measured by `harness tune` is used where there is one), write tuned/TARGET/KERNEL.csv and
    .json (plus --format files) and print a table. Library rows (lib:...) give the uplift."""
    from ..api.report import ReportArgs, report as run_report

    failed = run_report(ReportArgs(target=target, kernel=kernel, no_fetch=no_fetch, formats=formats,
                                   all_candidates=all_candidates, sort=sort, tag=tag, out=out, html=html,
                                   weights=weights, err_ratio=err_ratio, only_faster=only_faster,
                                   threshold=threshold, merge=merge, force=force,
                                   compare_wo_tuning=compare_wo_tuning, library=library, iters=iters,
                                   warmup=warmup, timeout=timeout, jobs=jobs,
                                   targets_file=targets_file_of(targets_file)))
    if failed:
        raise typer.Exit(1)


def tune(
    kernel: str = typer.Argument(..., help="kernel to tune, e.g. matmul"),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target name from targets.yaml (default: its `default: NAME`, else local)"),
    shapes: Optional[str] = typer.Option(None, "--shapes", envvar="HARNESS_SHAPES", help="comma-separated MxNxK[:dtype[:layout]]"),
    shapes_file: Optional[str] = typer.Option(None, "--shapes-file", help="a file of shapes (format detected)"),
    shapes_format: str = typer.Option("auto", "--shapes-format", help="format of --shapes-file (auto-detected)"),
    thr: float = typer.Option(0.1, "--thr", help="hipBLASLt logs: keep GEMMs with at least this percent of measured time x calls where the log has it, else of FLOPs x calls"),
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
    strategy_options: Optional[List[str]] = typer.Option(None, "--strategy-option", help=STRATEGY_OPTION_HELP),
    budget: Optional[int] = typer.Option(None, "--budget", help="evaluations per shape, those already in the results included (default: the --effort level's with the default strategy: 16 on CPU boards and 96 on GPU targets at default, else none)"),
    time_limit: Optional[str] = typer.Option(None, "--time-limit", help="stop searching after this long: 600, 90s, 10m, 2h"),
    batch_size: int = typer.Option(8, "--batch-size", help="configs a strategy asks for per shape and round"),
    seed: int = typer.Option(0, "--seed", help="seed of the search strategy"),
    warm_start: bool = typer.Option(True, "--warm-start/--no-warm-start", help="first round of each shape: the kernel's configs for its shape class and the winners of the nearest shapes in tuned/TARGET"),
    effort: str = typer.Option("default", "--effort", help=EFFORT_HELP),
    fresh: bool = typer.Option(False, "--fresh", help="set the measurements already in results/TARGET/KERNEL aside (kept under set-aside/) and measure anew; without it a second run reuses them, and the re-measured winners whose finalists are unchanged, and says so (they are reused only for the same machine and timing options)"),
    top: Optional[int] = typer.Option(None, "--top", help="re-measure this many of the fastest configs per shape interleaved, and the fastest of the warm start's seeds where it is not among them (0: off; default: the --effort level's, 3)", show_default=False),
    repeats: Optional[int] = typer.Option(None, "--repeats", show_default=False, help="(default: the --effort level's, 5) "
                                          "interleaved rounds of the re-measure (A B C, B C A, ...; with --library the library one place further each round); as many again for a shape whose winner's noise is over 2 %, or whose tie went to a candidate 1 % or more behind the fastest"),
    agent: str = typer.Option("long-lived", "--agent", help="long-lived: one agent per machine stays up across "
                              "rounds (GPU contexts, modules and test data kept) and the next round is built while "
                              "one is measured; per-round: a new agent for every round"),
    in_flight: int = typer.Option(0, "--in-flight", help="long-lived agent: rounds in flight at most (being "
                                  "built, queued or measured; later rounds are built while earlier ones are "
                                  "measured). 0: one per measuring device plus one; on GPU targets, batches in "
                                  "flight per shape (0: about six per GPU over the shapes, at least two)"),
    min_time_ms: float = typer.Option(25.0, "--min-time-ms", help="GPU: time each config of the search at least "
                                      "this long (a halving rung k, eta^k times as long; the noise rule may take "
                                      "longer); the winners' re-measure takes at least 100 ms"),
    library: bool = typer.Option(False, "--library", help="also measure the library to beat on every shape (CPU: lib:reference; GPU: lib:torch.matmul)"),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help="tuned files to write besides csv/json: aiter, aiter-blockscale, triton, yaml, vllm, sglang (docs/formats.md)"),
    html: bool = typer.Option(False, "--html", help="write the HTML report too"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Build, push, run and report. With --strategy other than exhaustive (or with --budget or
    --time-limit) the strategy asks for a few configs per shape at a time and only those are
    compiled, pushed and run, round by round; it resumes from the results already on disk.
    Without --strategy, the --effort level's search: at default genetic with --budget 96 per shape on
    GPU targets and 16 on CPU boards (there compiles pace the search), warm-started: the
    first round of each shape holds the kernel's configs for its shape class (e.g. the persistent
    TMA tile for large products) and the winners of the nearest shapes already tuned.
    Then the fastest --top configs per shape are re-measured interleaved (with the config of the
    fewest SM cycles where the rows carry the clock, and the fastest seed, which the first round
    timed, perhaps at another clock than the later rounds), and a winner must beat the next by
    more than the measured spread (else the tie rule decides)."""
    from ..api.tune import TuneArgs, tune as run_tune

    return run_tune(TuneArgs(kernel=kernel, target=target, shapes=shapes, shapes_file=shapes_file, shapes_format=shapes_format, thr=thr, space=space, jobs=jobs, compile_timeout=compile_timeout, warmup=warmup, iters=iters, max_noise=max_noise, max_time=max_time, estimator=estimator, interleave=interleave, timeout=timeout, strategy=strategy, strategy_options=strategy_options, budget=budget, time_limit=time_limit, batch_size=batch_size, seed=seed, warm_start=warm_start, top=top, repeats=repeats, effort=effort, fresh=fresh, agent=agent, in_flight=in_flight, min_time_ms=min_time_ms, library=library, formats=formats, html=html, targets_file=targets_file_of(targets_file)))
