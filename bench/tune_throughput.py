"""Tuning throughput end to end: configs/s, how busy the measuring devices are, and what each
round pays besides measuring, with an agent per round (before) and the long-lived agent (after).

CPU boards (default): two emulated RISC-V boards (qemu-riscv64, VLEN 256) behind two private
sshd on loopback (bench/_sshd.py), one fleet target; a random search of 3 rounds. A warm-up tune
fills the compile cache first, so both measured tunes compile nothing and differ only in how
rounds reach the boards:

    python3 bench/tune_throughput.py

A GPU node (the whole harness on the node: local transport, target ``backend: cuda``):

    python3 bench/tune_throughput.py --gpu --shapes 1024x1024x1024,... --budget 96 --devices 0
    python3 bench/tune_throughput.py --gpu --shapes ... --devices 0,1     # every GPU of the node

Prints per mode: configs measured in the search, its seconds and configs/s, rounds, agent
starts, seconds building (compile), the host blocked on results, the agents measuring, devices
busy %, and per round: host blocked minus measuring (what a round pays beyond its measurement;
negative: the next round was built while this one was measured).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QEMU_RV = "qemu-riscv64 -cpu rv64,v=true,vlen=256,vext_spec=v1.0"
CPU_SPACE = {"BLOCK_M": [8, 16, 32], "BLOCK_N": [8, 16, 32], "BLOCK_K": [16], "GROUP_M": [1]}


def board_fleet_yaml(servers, root: Path) -> str:
    a, b = servers
    with open(b.dir / "authorized_keys", "a") as f:  # one key for the whole fleet
        f.write(Path(str(a.client_key) + ".pub").read_text())
    known = root / "known_hosts_all"
    known.write_text(a.known_hosts.read_text() + b.known_hosts.read_text())
    return ("boards:\n  arch: riscv64\n  toolchain: clang\n  march: rv64gcv\n  vlen: 256\n  profiler: wallclock\n"
            "  run_under: %s\n  ssh:\n    host: 127.0.0.1\n    user: root\n    key: %s\n    known_hosts: %s\n"
            "  hosts:\n    - {host: 127.0.0.1, port: %d, workdir: %s}\n    - {host: 127.0.0.1, port: %d, workdir: %s}\n"
            % (QEMU_RV, a.client_key, known, a.port, root / "board-a", b.port, root / "board-b"))


def gpu_yaml(devices: str) -> str:
    return ("node:\n  backend: cuda\n  arch: x86_64\n  gpu_arch: 90\n  shared_mem_max: 232448\n  multiprocessors: 132\n"
            "  profiler: events\n  devices: \"%s\"\n" % devices)


class Spans:
    """Per-round agent runs (before): when each run's first and last progress line came."""

    def __init__(self):
        self.seconds = 0.0
        self._first = None

    def install(self):
        from harness import run

        spans, original = self, run.ProgressBar.__call__

        def call(bar, info):
            now = time.monotonic()
            if info.get("done") == 0 or spans._first is None:
                spans._first = now
            if info.get("total") is not None and info.get("done") == info.get("total"):
                spans.seconds += now - spans._first
                spans._first = None
            return original(bar, info)

        run.ProgressBar.__call__ = call


def clear_results(project: Path, target) -> None:
    shutil.rmtree(project / "results", ignore_errors=True)
    for host in ("board-a", "board-b"):
        shutil.rmtree(project / host / "results", ignore_errors=True)


def tune(project: Path, target_name: str, shapes: str, mode: str, args, spans: Spans) -> dict:
    from harness import kernels, ui
    from harness.build import BuildOptions
    from harness.api.build import read_shapes
    from harness.remeasure import remeasure_winners
    from harness.rounds import Session, search
    from harness.run import RunOptions
    from harness.targets import get_target

    os.chdir(project)
    tgt = get_target(target_name, str(project / "targets.yaml"))
    kern = kernels.get("matmul")
    space = CPU_SPACE if not tgt.is_gpu else kern.space_for(tgt)
    shape_list = read_shapes(tgt, None if args.shapes_file else shapes, args.shapes_file, "auto", None, 0.1, None)
    session = Session(Path("."), tgt, kern, shape_list, BuildOptions(),
                      RunOptions(iters=args.iters, min_time_ms=args.min_time_ms),
                      library=args.library, quiet=True, long_lived=mode == "long-lived")
    spans.seconds = 0.0
    ui.console.quiet = True
    began = time.monotonic()
    try:
        searches = search(session, space, args.strategy, seed=args.seed, batch_size=args.batch_size,
                          budget=args.budget)
        search_seconds = time.monotonic() - began
        timing = session.timing()
        remeasure = 0.0
        if args.top:
            t = time.monotonic()
            remeasure_winners(session, space, {s.shape.id: s.history for s in searches}, args.top, args.repeats)
            remeasure = time.monotonic() - t
    finally:
        stats = session._agents.stats if session._agents is not None else None
        session.close()
        ui.console.quiet = False
    configs = sum(len(s.new) for s in searches)
    out = dict(mode=mode, configs=configs, seconds=search_seconds, rounds=session.rounds,
               remeasure=remeasure, build=timing["build"], blocked=timing["waited"] + timing.get("push", 0.0),
               busy=timing.get("busy") or {}, starts=stats.agent_starts if stats else session.rounds,
               start_seconds=stats.start_seconds if stats else None,
               measuring=stats.measure_wall if stats else spans.seconds)
    return out


def overhead(r: dict) -> float:
    """What a round pays beyond its measurement (per round; the agents' start is counted apart)."""
    return (r["blocked"] - r["measuring"]) / max(1, r["rounds"])


def report(r: dict) -> None:
    from harness import ui

    rounds = max(1, r["rounds"])
    print("%-10s %4d configs in %6.1fs = %6.2f configs/s; %d rounds, %d agent starts%s" % (
        r["mode"], r["configs"], r["seconds"], r["configs"] / r["seconds"], r["rounds"], r["starts"],
        " (once per host, with the first push: %.2fs)" % r["start_seconds"] if r["start_seconds"] is not None else
        " (one per round)"))
    print("           build %.1fs, host blocked on the agents (build waited on measure) %.1fs, agents measuring %.1fs, "
          "agents idle (measure waited on build) %.1fs" % (r["build"], r["blocked"], r["measuring"],
                                                           max(0.0, r["seconds"] - r["measuring"])))
    print("           per round: build %.2fs, host blocked %.2fs, measuring %.2fs, overhead (blocked - measuring) %+.2fs"
          % (r["build"] / rounds, r["blocked"] / rounds, r["measuring"] / rounds, overhead(r)))
    if r["busy"]:
        print("           " + ui.throughput_line(r["configs"], r["seconds"], {"busy": r["busy"]}).split("; build")[0])
    if r["remeasure"]:
        print("           winners re-measured in %.1fs" % r["remeasure"])


def compile_rate(project: Path, shapes: str, configs: int, jobs: int) -> None:
    """Compiles per second for an sm90 target, kept compile workers vs a process per compile,
    and how many (config, shape) pairs share an artifact (a specialization compiled once)."""
    from harness import kernels
    from harness.build import BuildOptions, build
    from harness.api.build import read_shapes
    from harness.space import expand
    from harness.targets import get_target

    (project / "targets.yaml").write_text(gpu_yaml("0"))
    tgt = get_target("node", str(project / "targets.yaml"))
    kern = kernels.get("matmul")
    shape_list = read_shapes(tgt, shapes, None, "auto", None, 0.1, None)
    pick = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64], "GROUP_M": [8], "SPLIT_K": [1],
            "num_warps": [4, 8], "num_stages": [3, 4]}
    chosen = [dict(c, **{k: v[0] for k, v in kern.space_for(tgt).items() if k not in pick})
              for c in expand(pick)][:configs]
    for workers in ("1", "0"):  # kept workers first: a cold disk cache would count against them
        os.environ["HARNESS_COMPILE_WORKERS"] = workers
        root = project / ("compile-%s" % workers)
        began = time.monotonic()
        summary = build(kern, tgt, shape_list, root, BuildOptions(jobs=jobs, only_configs=chosen))
        seconds = time.monotonic() - began
        print("%-28s %3d artifacts for %d (config, shape) pairs in %.1fs = %.2f compiles/s (%d jobs), %d failed" % (
            "kept compile workers:" if workers == "1" else "a process per compile:", summary.compiled,
            summary.compiled + summary.reused_across_shapes, seconds, summary.compiled / seconds, jobs,
            summary.failed))
    os.environ.pop("HARNESS_COMPILE_WORKERS")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true", help="this machine is a GPU node: target backend cuda, local")
    p.add_argument("--devices", default="0", help="--gpu: GPU indices, e.g. 0 or 0,1")
    p.add_argument("--shapes", default=None, help="default: 2 small shapes (CPU); --gpu: this or --shapes-file")
    p.add_argument("--shapes-file", default=None, help="a file of shapes, e.g. bench/shapes/llm_gemms.txt")
    p.add_argument("--quality", action="store_true", help="--gpu: then bench/gpu_quality.py on the winners "
                   "(geomean against cuBLAS)")
    p.add_argument("--strategy", default=None, help="default: random (CPU), bayes (GPU)")
    p.add_argument("--budget", type=int, default=None, help="evaluations per shape (default: 6 CPU, 96 GPU)")
    p.add_argument("--batch-size", type=int, default=None, help="default: 2 CPU, 8 GPU")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--min-time-ms", type=float, default=100.0)
    p.add_argument("--top", type=int, default=None, help="re-measure winners (default: 0 CPU, 3 GPU)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--library", action="store_true", help="--gpu: also time torch.matmul per shape")
    p.add_argument("--modes", default=None, help="per-round,long-lived (default CPU) or long-lived (default GPU)")
    p.add_argument("--keep", default=None, help="project folder to use and keep (default: a temporary one)")
    p.add_argument("--compile", type=int, default=0, metavar="N",
                   help="only measure compiles: N sm90 configs over --shapes (no GPU needed)")
    p.add_argument("--jobs", type=int, default=0, help="--compile: parallel compiles (default: all cores)")
    args = p.parse_args(argv)
    gpu = args.gpu
    if gpu and not (args.shapes or args.shapes_file):
        p.error("--gpu needs --shapes or --shapes-file")
    if args.shapes_file:
        args.shapes_file = str(Path(args.shapes_file).resolve())
    args.shapes = args.shapes or "32x32x32,48x32x16"
    args.strategy = args.strategy or ("bayes" if gpu else "random")
    args.budget = args.budget or (96 if gpu else 6)
    args.batch_size = args.batch_size or (8 if gpu else 2)
    args.top = (3 if gpu else 0) if args.top is None else args.top
    modes = (args.modes or ("long-lived" if gpu else "per-round,long-lived")).split(",")
    project = Path(args.keep or tempfile.mkdtemp(prefix="harness-bench-tune-")).resolve()
    project.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HARNESS_KERNELS_PATH", str(REPO / "tests" / "kernels"))
    if args.compile:
        try:
            compile_rate(project, args.shapes if gpu or args.shapes != "32x32x32,48x32x16" else
                         "1024x1024x1024,2048x1024x512", args.compile, args.jobs or os.cpu_count() or 1)
        finally:
            if not args.keep:
                shutil.rmtree(project, ignore_errors=True)
        return 0
    servers = []
    spans = Spans()
    spans.install()
    try:
        if gpu:
            (project / "targets.yaml").write_text(gpu_yaml(args.devices))
            target = "node"
        else:
            from bench._sshd import make_server

            servers = [make_server(project / "sshd-a"), make_server(project / "sshd-b")]
            (project / "targets.yaml").write_text(board_fleet_yaml(servers, project))
            target = "boards"
            began = time.monotonic()
            tune(project, target, args.shapes, "per-round", args, spans)  # fills the compile cache
            print("warm-up tune (compiles, discarded): %.1fs" % (time.monotonic() - began))
        print("%s: %s, %s, budget %d per shape, batch %d, --min-time-ms %g, shapes %s" % (
            "GPU node, devices " + args.devices if gpu else "2 emulated riscv64 boards over loopback SSH",
            "matmul", args.strategy, args.budget, args.batch_size, args.min_time_ms, args.shapes_file or args.shapes))
        results = []
        for mode in modes:
            clear_results(project, target)
            r = tune(project, target, args.shapes, mode, args, spans)
            results.append(r)
            report(r)
        if gpu and args.quality:
            import subprocess

            subprocess.run([sys.executable, str(REPO / "bench" / "gpu_quality.py"), "--bundle", "build/node/matmul",
                            "--results", "results/node/matmul/results.csv", "--tune-seconds",
                            "%.1f" % (results[-1]["seconds"] + results[-1]["remeasure"])], cwd=project)
        if len(results) == 2:
            a, b = results
            print("long-lived / per-round: configs/s x%.2f; agent starts %d -> %d; overhead per round %+.2fs -> %+.2fs" % (
                (b["configs"] / b["seconds"]) / (a["configs"] / a["seconds"]), a["starts"], b["starts"],
                overhead(a), overhead(b)))
    finally:
        for s in servers:
            s.stop()
        if not args.keep:
            os.chdir("/")
            shutil.rmtree(project, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
