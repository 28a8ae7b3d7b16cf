"""CPU: how much one config's time depends on the process it runs in.

    python3 -m bench.probes.cpu_processes [--shape 256x256x256] [--config NAME=VALUE,...] [--processes 8] [--seconds 2]
                                   [--rounds 3]

Builds one matmul config (``--config``, default bench/cpu_noise.py's) and OpenBLAS for the
``local`` target, then per round starts ``--processes`` processes of each, all pinned to one core,
and samples them interleaved through the agent's own runner (remote_agent/runners/elf.py,
``run_group``: one sample of each process in turn, so that every process sees the same moments of
the machine) for ``--seconds`` of each process's own time. It prints every process's minimum, their
spread ((max - min) / min), and how far the smallest of 5 random processes lands from the smallest
of all (what harness tune's 5 repeats of a candidate see).
"""

import argparse
import json
import os
import random
import shutil
import tempfile

from bench.cpu_noise import CONFIG, ROOT, build_one_config, quantile
from remote_agent import contract
from remote_agent.profilers.wallclock import WallclockProfiler
from remote_agent.runners.elf import ElfRunner


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="256x256x256")
    p.add_argument("--config", default=CONFIG, help="the matmul config measured (default %(default)s)")
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--seconds", type=float, default=2.0, help="sampling time of each process")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="cpu-processes-")
    try:
        bundle = build_one_config(work, args.shape, dict(os.environ, PYTHONPATH=ROOT), args.config)
        with open(os.path.join(bundle, "manifest.json")) as f:
            manifest = json.load(f)
        runner = ElfRunner(bundle, manifest, WallclockProfiler(), timeout=60 + 4 * args.seconds * args.processes,
                           max_noise=0.0, max_time=args.seconds, interleave=args.processes)
        variants = {v["id"]: v for v in manifest["variants"]}
        shape = manifest["shapes"][0]
        for rnd in range(args.rounds):
            for job in manifest["jobs"]:
                rows = runner.run_group([(variants[job["variant"]], shape, job["grid"])] * args.processes, 0, 10)
                mins = sorted(float(r["time_ns"]) for r in rows if r["status"] == contract.OK)
                report(rnd, job["variant"], mins)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(rnd, vid, mins):
    if len(mins) < 2:
        print("round %d %-18s fewer than 2 processes ok" % (rnd, vid[:18]))
        return
    rng = random.Random(rnd)
    k = min(5, len(mins))
    gaps = [100.0 * (min(rng.sample(mins, k)) - mins[0]) / mins[0] for _ in range(2000)]
    print("round %d %-18s process minima (us): %s;  spread %.2f %%;  smallest of %d over the smallest of all: "
          "median %.2f %%, p90 %.2f %%" % (rnd, vid[:18], " ".join("%.0f" % (m / 1e3) for m in mins),
                                           100.0 * (mins[-1] - mins[0]) / mins[0], k, quantile(gaps, 0.5),
                                           quantile(gaps, 0.9)))


if __name__ == "__main__":
    main()
