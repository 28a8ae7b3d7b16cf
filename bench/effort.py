"""Are the cheaper effort levels' winners as good as `full`'s? `harness tune matmul --target local
--library --fresh --effort LEVEL` for quick, default and full, each in a fresh project, on the
README's three shapes and then on bench/shapes/cpu_gemms.txt; prints each run's wall time and, per
shape, how much slower each level's winner is than full's.

    python3 bench/effort.py [--keep DIR] [--levels quick,default,full] [--sets readme,cpu_gemms]
    python3 bench/effort.py --sets shapes:64x64x64     # a set of your own (full's cost grows with it)
    python3 bench/effort.py --sets file:my_shapes.txt  # a shapes file of your own

The ratio is read in full's own results, where every config was timed to the noise rule in one
run: (full's time of the level's winner) / (full's time of full's winner), so the machine's
drift between the runs does not enter it. Goal (issue 45): median over shapes within 1.03 for
default and 1.08 for quick.
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETS = {"readme": [], "cpu_gemms": ["--shapes-file", os.path.join(ROOT, "bench", "shapes", "cpu_gemms.txt")]}
GOAL = {"default": 1.03, "quick": 1.08}
DRIFT_WARNING = 1.05  # a shape whose full winner's rows drift more than this is flagged


def set_args(name):
    """The tune's shape arguments of a set: readme, cpu_gemms, shapes:SHAPE (as --shapes takes it) or
    file:PATH (a shapes file)."""
    if name.startswith("shapes:"):
        return ["--shapes", name[len("shapes:"):]]
    if name.startswith("file:"):
        return ["--shapes-file", os.path.abspath(name[len("file:"):])]
    if name not in SETS:
        sys.exit("--sets %s: choose readme, cpu_gemms, shapes:MxNxK or file:PATH" % name)
    return SETS[name]


def tune(work, level, extra):
    """One tune in the fresh project ``work``; (winners.json's shapes, rows, seconds)."""
    os.makedirs(work, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "targets.yaml"), work)
    cmd = [sys.executable, "-m", "harness", "tune", "matmul", "--target", "local", "--library", "--fresh",
           "--effort", level] + extra
    start = time.monotonic()
    with open(os.path.join(work, "tune.log"), "w") as log:
        subprocess.run(cmd, cwd=work, check=True, env=dict(os.environ, PYTHONPATH=ROOT), stdout=log)
    seconds = time.monotonic() - start
    results = os.path.join(work, "results", "local", "matmul")
    with open(os.path.join(results, "winners.json")) as f:
        winners = json.load(f)["shapes"]
    with open(os.path.join(results, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return winners, rows, seconds


def config_key(config):
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


def full_samples(rows):
    """{shape: {config key: [ok time_ns of each of its rows]}} of full's rows (library rows left out)."""
    out = {}
    for r in rows:
        if r.get("status") != "ok" or (r.get("variant_id") or "").startswith("lib:"):
            continue
        cfg = tuple(sorted((c[4:], v) for c, v in r.items() if c.startswith("cfg_") and v not in ("", None)))
        out.setdefault(r["shape_id"], {}).setdefault(cfg, []).append(float(r["time_ns"]))
    return out


def fastest(samples):
    """{shape: {config key: best ok time_ns}} of ``full_samples``."""
    return {s: {cfg: min(ts) for cfg, ts in by_cfg.items()} for s, by_cfg in samples.items()}


def winner_drift(samples: dict) -> float:
    """The median over the fastest of the rows of full's fastest config: full's re-measure times it
    several times, and where the machine itself moves between rounds (memory bandwidth on a shared
    host) by more than a level's goal, a ratio of that shape, read in single rows, says little."""
    best = min(samples, key=lambda cfg: min(samples[cfg]))
    return statistics.median(samples[best]) / min(samples[best])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", default=None, help="keep the projects under this folder")
    p.add_argument("--levels", default="quick,default,full")
    p.add_argument("--sets", default="readme,cpu_gemms",
                   help="shape sets, comma-separated: readme (its three shapes), cpu_gemms, shapes:MxNxK (one shape), "
                        "file:PATH (a shapes file of your own)")
    args = p.parse_args()
    levels = [x for x in args.levels.split(",") if x]
    if "full" not in levels:
        levels.append("full")
    base = args.keep or tempfile.mkdtemp(prefix="effort-")
    failed = False
    try:
        for name in [s for s in args.sets.split(",") if s]:
            runs = {}
            for level in levels:
                winners, rows, seconds = tune(os.path.join(base, name.replace(":", "_").replace("/", "_"), level), level,
                                              set_args(name))
                runs[level] = (winners, rows)
                print("%s, effort %s: %d shapes in %.0f s" % (name, level, len(winners), seconds), flush=True)
            samples = full_samples(runs["full"][1])
            times = fastest(samples)
            best = {s: min(t.values()) for s, t in times.items() if t}
            for shape in sorted(samples):
                drift = winner_drift(samples[shape])
                if drift > DRIFT_WARNING:
                    print("  %s: the median of full's fastest config's own rows is %.2fx their fastest: this "
                          "shape's ratios are within the machine's drift" % (shape, drift))
            for level in levels:
                if level == "full":
                    continue
                ratios = []
                for shape, w in sorted(runs[level][0].items()):
                    t = times.get(shape, {}).get(config_key(w["config"]))
                    if t is None or shape not in best:
                        print("  %s %s: its winner has no ok row in full's run" % (level, shape))
                        continue
                    ratios.append(t / best[shape])
                    print("  %s %-24s %.3f" % (level, shape, t / best[shape]))
                if ratios:
                    med = statistics.median(ratios)
                    ok = med <= GOAL.get(level, float("inf"))
                    failed |= not ok
                    print("%s, effort %s: median %.3f of full's winner over %d shapes (goal %.2f): %s" % (
                        name, level, med, len(ratios), GOAL.get(level, float("nan")), "ok" if ok else "MISSED"))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
