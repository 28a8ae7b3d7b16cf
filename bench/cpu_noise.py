"""CPU timing reproducibility: one config (and OpenBLAS) measured in 5 separate runs.

    python3 bench/cpu_noise.py [--shape 256x256x256] [--config BLOCK_M=64,BLOCK_N=32,BLOCK_K=8,GROUP_M=1]
                               [--runs 5] [--repeats 5] [--estimator min] [--max-noise 0.01] [--max-time SECONDS]

Builds one matmul config (and OpenBLAS) for the ``local`` target in a temporary project. A *run*
measures both ``--repeats`` times, one after the other (each repeat is a fresh agent and a fresh
process per job, as the tuner's re-measure of its top candidates does), with the agent's defaults
unless options are given. It prints every row, then the spread of the runs, (max - min) / median
of the runs' times, in percent (goal: <= 2 %), for
  - one job (each run's first repeat): its deciding time (``time_ns``) and, for comparison, its
    median;
  - the repeats together, as harness tune's winners are judged (strategies/winner.py): the
    deciding time over the repeats (the smallest minimum; with --estimator median the median of
    the medians); the median of the repeats' deciding times (each repeat's own result: its
    minimum by default); and the median of their medians.
"""

import argparse
import csv
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the config the README's tune picks for its 256x256x128 and 64x64x64 shapes (its 64 x 32 tiles do
# not slow down in the machine's slow stretches as 32 x 32 x 32 ones do; README "How a result is judged")
CONFIG = "BLOCK_M=64,BLOCK_N=32,BLOCK_K=8,GROUP_M=1"
sys.path.insert(0, ROOT)

from harness.strategies.history import row_trial  # noqa: E402
from harness.strategies.winner import candidate_stats  # noqa: E402
from remote_agent.contract import deciding_time  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="256x256x256")
    p.add_argument("--config", default=CONFIG, help="the matmul config measured (default %(default)s)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5, help="measurements of each job per run (harness tune --repeats)")
    p.add_argument("--estimator", default=None, help="min or median (default: the agent's, min on CPUs)")
    p.add_argument("--max-noise", default=None)
    p.add_argument("--max-time", default=None)
    args = p.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    agent_opts = []
    for flag, value in (("--estimator", args.estimator), ("--max-noise", args.max_noise), ("--max-time", args.max_time)):
        if value is not None:
            agent_opts += [flag, value]
    work = tempfile.mkdtemp(prefix="cpu-noise-")
    try:
        bundle = build_one_config(work, args.shape, env, args.config)
        runs = {}  # variant -> [[rows of one run's repeats], ...]
        for run in range(args.runs):
            out = os.path.join(work, "r%d.csv" % run)
            for _ in range(args.repeats):
                subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", bundle, "--results", out,
                                "--all"] + agent_opts, env=env, check=True, stdout=subprocess.DEVNULL)
            rows = [r for r in csv.DictReader(open(out)) if r["status"] == "ok"]
            for r in rows:
                print("run %d %-18s %-6s %10.0f ns  median %10.0f ns  samples %5s  noise %6.2f %%" % (
                    run, r["variant_id"][:18], r["estimator"], deciding_time(r), float(r["time_ns_median"]),
                    r["samples"], 100 * float(r["noise"] or 0)))
            for vid in dict.fromkeys(r["variant_id"] for r in rows):
                runs.setdefault(vid, []).append([r for r in rows if r["variant_id"] == vid])
        print()
        for vid, per_run in runs.items():
            estimator = per_run[0][0]["estimator"]
            one = [deciding_time(rows[0]) for rows in per_run]
            one_median = [float(rows[0]["time_ns_median"]) for rows in per_run]
            together = [candidate_stats(vid, [row_trial(r) for r in rows]).median for rows in per_run]
            median_of_results = [statistics.median(deciding_time(r) for r in rows) for rows in per_run]
            together_median = [statistics.median(float(r["time_ns_median"]) for r in rows) for rows in per_run]
            print("%-18s spread of %d runs: one job: %s %.2f %%, median %.2f %%;  %d repeats: %s %.2f %%, "
                  "median of the %d results %.2f %%, median of medians %.2f %%"
                  % (vid[:18], len(per_run), estimator, spread(one), spread(one_median), args.repeats, estimator,
                     spread(together), args.repeats, spread(median_of_results), spread(together_median)))
            pool = [deciding_time(r) for rows in per_run for r in rows]
            if estimator == "min" and len(pool) >= 2 * args.repeats:
                gaps = pair_gaps(pool, args.repeats)
                print("%-18s two smallest-of-%d of its %d jobs (disjoint, drawn at random): apart by median %.2f %%, "
                      "p80 %.2f %%, p90 %.2f %% (harness tune ties closer candidates: strategies/winner.py "
                      "MIN_RESOLUTION)" % (vid[:18], args.repeats, len(pool), quantile(gaps, 0.5), quantile(gaps, 0.8),
                                           quantile(gaps, 0.9)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def parse_config(text):
    """``NAME=VALUE,...`` -> {name: int value}."""
    return {name.strip(): int(value) for name, value in (item.split("=") for item in text.split(","))}


def build_one_config(work, shape, env, config=CONFIG):
    """Build one matmul config (``NAME=VALUE,...``) and OpenBLAS for ``shape`` on the local target
    in ``work``; the bundle's directory."""
    return build_space(work, shape, env, {name: [value] for name, value in parse_config(config).items()})


def build_space(work, shape, env, space, library=True):
    """Build every matmul config of ``space`` ({name: [values]}), and OpenBLAS with ``library``,
    for ``shape`` on the local target in ``work``; the bundle's directory."""
    shutil.copy(os.path.join(ROOT, "targets.yaml"), work)
    with open(os.path.join(work, "space.yaml"), "w") as f:
        for name, values in space.items():
            f.write("%s: [%s]\n" % (name, ", ".join(str(v) for v in values)))
    subprocess.run([sys.executable, "-m", "harness", "build", "matmul", "--target", "local", "--shapes", shape,
                    "--space", "space.yaml"] + (["--library"] if library else []), cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(work, "build", "local", "matmul")


def pair_gaps(pool, k, draws=5000):
    """|a - b| / min(a, b) in percent, for a and b the smallest of two disjoint random sets of k jobs."""
    rng = random.Random(0)
    gaps = []
    for _ in range(draws):
        picked = rng.sample(pool, 2 * k)
        a, b = min(picked[:k]), min(picked[k:])
        gaps.append(100.0 * abs(a - b) / min(a, b))
    return gaps


def quantile(values, q):
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def spread(values):
    """(max - min) / median, in percent."""
    return 100.0 * (max(values) - min(values)) / statistics.median(values)


if __name__ == "__main__":
    main()
