"""CPU timing reproducibility: the median of one config measured in 5 separate agent runs.

    python3 bench/cpu_noise.py [--shape 256x256x256] [--runs 5] [--max-noise 0.01] [--max-time 0.5]

Builds one matmul config (and OpenBLAS) for the ``local`` target in a temporary project, runs the
agent ``--runs`` times on each (a fresh process each time, as the tuner does), and prints each
run's median, samples and noise, then the spread of the medians: (max - min) / median of the
medians, in percent (goal: <= 2 %).
"""

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPACE = "BLOCK_M: [32]\nBLOCK_N: [32]\nBLOCK_K: [32]\nGROUP_M: [4]\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="256x256x256")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--max-noise", default="0.01")
    p.add_argument("--max-time", default="0.5")
    args = p.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    work = tempfile.mkdtemp(prefix="cpu-noise-")
    try:
        shutil.copy(os.path.join(ROOT, "targets.yaml"), work)
        with open(os.path.join(work, "space.yaml"), "w") as f:
            f.write(SPACE)
        subprocess.run([sys.executable, "-m", "harness", "build", "matmul", "--target", "local", "--shapes",
                        args.shape, "--space", "space.yaml", "--library"], cwd=work, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        bundle = os.path.join(work, "build", "local", "matmul")
        medians = {}
        for run in range(args.runs):
            out = os.path.join(work, "r%d.csv" % run)
            subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", bundle, "--results", out,
                            "--max-noise", args.max_noise, "--max-time", args.max_time], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            for row in csv.DictReader(open(out)):
                if row["status"] == "ok":
                    medians.setdefault(row["variant_id"], []).append(float(row["time_ns_median"]))
                    print("run %d %-20s median %10.0f ns  samples %5s  noise %.2f %%" % (
                        run, row["variant_id"][:20], float(row["time_ns_median"]), row["samples"],
                        100 * float(row["noise"] or 0)))
        for vid, ms in medians.items():
            mid = statistics.median(ms)
            print("%-20s medians of %d runs: spread (max - min) / median = %.2f %%" % (
                vid[:20], len(ms), 100 * (max(ms) - min(ms)) / mid))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
