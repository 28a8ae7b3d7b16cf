"""The harness command line: build, push, run, report, tune, targets.

Bad input ends with one line on stderr and exit code 2; nothing measured is lost.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from . import state, ui
from .errors import HarnessError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    help="Tune GEMM-like kernels for hardware you do not sit at.\n\n"
         "Typical flow: [bold]harness build matmul --target laptop[/], [bold]harness push laptop[/], "
         "[bold]harness run --remote laptop[/], [bold]harness report[/] (or all four: [bold]harness tune[/]). "
         "Targets come from targets.yaml in the current folder, --targets FILE or $HARNESS_TARGETS.",
)
targets_app = typer.Typer(help="List targets, or check what a target's machine has.",
                          invoke_without_command=True, no_args_is_help=False)
app.add_typer(targets_app, name="targets")

ROOT = Path(".")
DEFAULT_SHAPES = {"cpu": "64x64x64,128x128x128,256x256x128",
                  "gpu": "4096x4096x4096:fp16,64x4096x4096:fp16,1024x1024x1024:fp16"}

TargetsOpt = typer.Option(None, "--targets", help="targets.yaml to use (default: ./targets.yaml or $HARNESS_TARGETS)")


def _target(name: Optional[str], targets_file: Optional[str], command: str):
    from .targets import get_target

    if not name:
        name, _ = state.get(ROOT, None)
    if not name:
        raise HarnessError("which target? pass --target NAME (see: harness targets)")
    return get_target(name, targets_file)


def _shapes(target, shapes: Optional[str], shapes_file: Optional[str], shapes_format: str, dtype: Optional[str]):
    from .shapes import parse_shape_list, read_shapes_file

    default_dtype = dtype or ("fp16" if target.is_gpu else "fp32")
    if shapes_file:
        return read_shapes_file(shapes_file, shapes_format, default_dtype)
    return parse_shape_list(shapes or DEFAULT_SHAPES["gpu" if target.is_gpu else "cpu"], default_dtype)


def _kernel_of(target_name: str, kernel: Optional[str]) -> str:
    if kernel:
        return kernel
    _, facts = state.get(ROOT, target_name)
    if not facts.get("kernel"):
        raise HarnessError("nothing built for %s yet; run: harness build KERNEL --target %s" % (target_name, target_name))
    return facts["kernel"]


@app.command()
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
    targets_file: Optional[str] = TargetsOpt,
):
    """Generate the search space, prune it per shape, compile every variant in parallel and
    write the bundle (manifest, artifacts, test data) under build/TARGET/KERNEL.

    A second build compiles only what changed (artifacts are content-addressed)."""
    from . import kernels
    from .build import BuildOptions, build as do_build
    from .space import load_space_file

    tgt = _target(target, targets_file, "build")
    kern = kernels.get(kernel)
    shape_list = _shapes(tgt, shapes, shapes_file, shapes_format, dtype)
    space_dict = load_space_file(space, kern.space_for(tgt)) if space else None
    summary = do_build(kern, tgt, shape_list, ROOT, BuildOptions(jobs=jobs, compile_timeout=compile_timeout,
                                                                 seed=seed, space=space_dict))
    ui.out.print("built %s for %s: %d variants (%d compiled, %d cached, %d failed), %d shapes, %d jobs, "
                 "%d pruned pairs, in %.1fs -> %s" % (
                     kern.name, tgt.name, len(summary.manifest.variants), summary.compiled, summary.cached,
                     summary.failed, len(shape_list), len(summary.manifest.jobs), summary.pruned_pairs,
                     summary.seconds, summary.bundle))


@app.command()
def push(
    target: Optional[str] = typer.Argument(None, help="target to push to (default: the last one built)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel bundle to push (default: the last built)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Copy the bundle and the agent to the target over SSH: one round trip to learn what the
    remote has, then one tar stream with only the missing files."""
    from .bundle import Manifest, bundle_dir
    from .push import push as do_push
    from .transport import for_target

    tgt = _target(target, targets_file, "push")
    if not tgt.is_remote:
        ui.out.print("%s runs on this machine; nothing to push" % tgt.name)
        return
    kern = _kernel_of(tgt.name, kernel)
    bundle = bundle_dir(ROOT, tgt.name, kern)
    manifest = Manifest.load(bundle / "manifest.json")
    transport = for_target(tgt).open()
    try:
        with ui.progress() as bar:
            task = bar.add_task("push %s" % tgt.name, total=None, info="")
            progress = _ByteProgress(bar, task)
            summary = do_push(bundle, manifest, transport, progress)
    finally:
        transport.close()
    state.record(ROOT, tgt.name, kernel=kern, pushed=True)
    ui.out.print("pushed %s to %s: %d files sent, %d already there, %.1f MB in %d SSH commands" % (
        kern, tgt.name, summary.sent_files, summary.skipped_files, summary.bytes_sent / 1e6, summary.commands))


class _ByteProgress:
    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def start(self, total):
        self.bar.update(self.task, total=total, info="bytes")

    def advance(self, n):
        self.bar.update(self.task, advance=n)


def _run_options(warmup, iters, timeout, rerun_all, profiler, devices, min_time_ms):
    from .run import RunOptions

    return RunOptions(warmup=warmup, iters=iters, timeout=timeout, rerun_all=rerun_all, profiler=profiler,
                      devices=devices, min_time_ms=min_time_ms)


@app.command()
def run(
    remote: Optional[str] = typer.Option(None, "--remote", "-r", help="run on this target's machine over SSH"),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="run this target's bundle here (default: last built)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel bundle to run (default: the last built)"),
    warmup: int = typer.Option(2, "--warmup", help="untimed runs before timing"),
    iters: int = typer.Option(10, "--iters", help="timed iterations per variant and shape"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds per variant and shape before it counts as timeout"),
    rerun_all: bool = typer.Option(False, "--all", help="re-run rows already measured (default: resume)"),
    profiler: Optional[str] = typer.Option(None, "--profiler", help="override the target's profiler (perf, wallclock, events, ncu, rocprof)"),
    devices: Optional[str] = typer.Option(None, "--devices", help="GPU indices to use, e.g. 0,1 (default: all)"),
    min_time_ms: float = typer.Option(100.0, "--min-time-ms", help="GPU: repeat until this much time is measured"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Run every variant on every shape under the target's profiler and append results.

    With --remote the agent runs on the target over one SSH command; without, it runs here
    (under the target's run_under, e.g. qemu). An interrupted run resumes where it stopped."""
    from .run import run_local, run_remote
    from .transport import for_target

    options = _run_options(warmup, iters, timeout, rerun_all, profiler, devices, min_time_ms)
    tgt = _target(remote or target, targets_file, "run")
    kern = _kernel_of(tgt.name, kernel)
    if remote and tgt.is_remote:
        transport = for_target(tgt).open()
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


@app.command()
def report(
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target to report (default: the last used)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel to report (default: the last built)"),
    no_fetch: bool = typer.Option(False, "--no-fetch", help="use the local results only"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Fetch remote results (one tar stream), pick the best config per shape from ok rows
    (differences within the measured spread are ties, broken by lower spread), write
    tuned/TARGET/KERNEL.csv and .json and print a table."""
    from .report.aggregate import best_per_shape, load_results, status_counts
    from .report.fetch import fetch_and_merge
    from .report.table import best_table
    from .report.tuned import write_tuned
    from .run import local_results_path
    from .transport import for_target

    tgt = _target(target, targets_file, "report")
    kern = _kernel_of(tgt.name, kernel)
    local = local_results_path(ROOT, tgt.name, kern)
    _, facts = state.get(ROOT, tgt.name)
    if tgt.is_remote and facts.get("results_remote", True) and not no_fetch:
        transport = for_target(tgt).open()
        try:
            new = fetch_and_merge(transport, tgt.name, kern, local)
        finally:
            transport.close()
        ui.console.print("fetched %d new rows from %s" % (new, tgt.name))
    df = load_results([local])
    best = best_per_shape(df)
    meta = {"target": tgt.name, "arch": tgt.resolved_arch if not tgt.is_gpu else tgt.gpu_arch,
            "devices": sorted(df["device"].astype(str).unique().tolist()),
            "hosts": sorted(df["host"].astype(str).unique().tolist())}
    csv_path, json_path = write_tuned(df, best, ROOT / "tuned" / tgt.name, kern, meta)
    ui.out.print(best_table(best, status_counts(df)))
    missing = sorted(set(df["shape_id"]) - set(best["shape_id"]))
    if missing:
        ui.out.print("[yellow]no ok config for: %s[/]" % ", ".join(missing))
    ui.out.print("wrote %s and %s" % (csv_path, json_path))


@app.command()
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
          space=space, jobs=jobs, compile_timeout=120.0, seed=0, targets_file=targets_file)
    tgt = _target(target, targets_file, "tune")
    if tgt.is_remote:
        push(target=target, kernel=kernel, targets_file=targets_file)
    run(remote=target if tgt.is_remote else None, target=target, kernel=kernel, warmup=warmup, iters=iters,
        timeout=timeout, rerun_all=False, profiler=None, devices=None, min_time_ms=100.0, targets_file=targets_file)
    report(target=target, kernel=kernel, no_fetch=False, targets_file=targets_file)


@targets_app.callback()
def targets_list(ctx: typer.Context, targets_file: Optional[str] = TargetsOpt):
    """List the targets in targets.yaml."""
    if ctx.invoked_subcommand:
        ctx.obj = targets_file
        return
    from rich.table import Table

    from .targets import find_targets_file, load_targets

    path = find_targets_file(targets_file)
    table = Table(title=str(path))
    for col in ("name", "arch", "backend", "profiler", "where", "description"):
        table.add_column(col)
    for name, t in load_targets(path).items():
        where = "%s@%s:%s" % (t.ssh.user or "", t.ssh.host, t.ssh.port) if t.ssh else "this machine"
        arch = t.resolved_arch + (" VLEN %d" % t.vlen if t.vlen else "") + (" %s" % t.gpu_arch if t.gpu_arch else "")
        table.add_row(name, arch, t.backend, t.profiler, where, t.description)
    ui.out.print(table)


@targets_app.command("check")
def targets_check(ctx: typer.Context, name: str = typer.Argument(..., help="target to check")):
    """Connect to the target and report what it has: python, arch, perf and the events it
    supports, GPUs."""
    import json
    import subprocess

    from .targets import get_target
    from .transport import for_target

    tgt = get_target(name, ctx.obj)
    check_py = (Path(__file__).resolve().parent.parent / "remote_agent" / "check.py").read_text()
    script = check_py + "\nimport json, sys\nprint(json.dumps(facts(sys.argv[1:])))\n"
    if tgt.is_remote:
        transport = for_target(tgt).open()
        try:
            rc, out, err = transport.run_capture(transport.shell_command([tgt.python, "-c", script] + tgt.events))
        finally:
            transport.close()
        out = out.decode()
    else:
        proc = subprocess.run([sys.executable, "-c", script] + tgt.events, capture_output=True, text=True)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    if rc != 0:
        raise HarnessError("check on %s failed (is %s there?): %s" % (tgt.name, tgt.python, err.strip()[-200:]))
    facts = json.loads(out)
    ui.out.print("[bold]%s[/]: python %s on %s, %s cpus" % (tgt.name, facts["python"], facts["arch"], facts["cpus"]))
    perf = facts["perf"]
    if not perf["found"]:
        ui.out.print("perf: not found (wall clock will be used)")
    else:
        ui.out.print("perf: %s, %s; counts: %s; not supported: %s" % (
            perf["version"], "runs" if perf["runs"] else "does not run",
            ", ".join(perf["events_supported"]) or "-", ", ".join(perf["events_unsupported"]) or "-"))
    ui.out.print("GPUs: %s" % (", ".join(g["info"] for g in facts["gpus"]) or "none"))
    if tgt.resolved_arch != facts["arch"] and not tgt.run_under:
        ui.out.print("[yellow]warning: target says %s but the machine is %s[/]" % (tgt.resolved_arch, facts["arch"]))


def main():
    try:
        app()
    except HarnessError as exc:
        from rich.markup import escape

        ui.console.print("[red]error:[/] %s" % escape(str(exc)), highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        ui.console.print("interrupted; results measured so far are kept")
        sys.exit(130)


if __name__ == "__main__":
    main()
