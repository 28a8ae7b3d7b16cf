"""Are the cheaper effort levels' winners as good as `full`'s? `harness tune matmul --target local
--library --fresh --effort LEVEL` for quick, default and full, each in a fresh project, on the
README's three shapes and then on bench/shapes/cpu_gemms.txt; prints each run's wall time and, per
shape, how much slower each level's winner is than full's.

    python3 bench/effort.py [--keep DIR | --from DIR] [--levels quick,default,full] [--sets readme,cpu_gemms]
    python3 bench/effort.py --sets shapes:64x64x64     # a set of your own (full's cost grows with it)
    python3 bench/effort.py --sets file:my_shapes.txt  # a shapes file of your own

Two ratios per shape and level:
- in full's rows: (full's time of the level's winner) / (full's best time of any config), each
  config's time the lowest of its rows. Over a run of an hour one lucky row (a config's search
  row 14 % under all its later rows) moves it, and the configs full re-measured have more rows;
- head to head (the goal's): full's winner and each level's winner timed together afterwards,
  in one bundle built of the levels' winners, in HEAD_TO_HEAD_ROUNDS interleaved agent runs of
  0.3 s a job (as the tune's re-measure), each config's time the smallest of its rounds' minima.
  Ten rounds, not the re-measure's five: one agent run's minimum of a config can sit 3 to 60 %
  above another's (the same winners timed in five rounds, then in ten, put default's median on
  the README's shapes at 1.034 and 1.005 of full's).

Goal (issue 45): median over shapes within 1.03 for default and 1.08 for quick. ``--from DIR``
takes the projects a ``--keep DIR`` run left instead of tuning again. ``full`` is the warm-started
search with 8x default's budget (harness/effort.py); ``--levels exhaustive`` adds every config
(52 minutes on a 2-core VM for the README's three shapes, days for cpu_gemms.txt).
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
sys.path.insert(0, ROOT)  # run as a script: the harness of this checkout (head_to_head builds with it)
SETS = {"readme": [], "cpu_gemms": ["--shapes-file", os.path.join(ROOT, "bench", "shapes", "cpu_gemms.txt")]}
GOAL = {"default": 1.03, "quick": 1.08}
HEAD_TO_HEAD_ROUNDS = 10
HEAD_TO_HEAD_MAX_TIME = "0.3"  # seconds a job, the default effort's re-measure
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


def tune(work, level, extra, again=True):
    """One tune in the fresh project ``work`` (``again`` False: the one a --keep run left there);
    (winners.json's shapes, rows, seconds or None)."""
    seconds = None
    if again:
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


def head_to_head(work, winners_by_level):
    """{shape: {level: ratio}}: each level's winner against full's, timed together afterwards:
    one bundle of every level's winning (config, shape) pairs (``winners_bundle``), timed in
    HEAD_TO_HEAD_ROUNDS agent runs, 0.3 s a job as the tune's re-measure (a shape's jobs
    interleaved). Each config's time is the smallest of its rounds' minima, over full's winner's."""
    bundle, ids = winners_bundle(work, winners_by_level)
    levels_of = {}  # (shape, variant id): the levels whose winner it is
    for level, winners in winners_by_level.items():
        for shape, w in winners.items():
            vid = ids.get(config_key(w.get("config") or {}))
            if vid:
                levels_of.setdefault((shape, vid), []).append(level)
    minima = {}  # (shape, level): ns
    for r in range(HEAD_TO_HEAD_ROUNDS):
        path = os.path.join(work, "r%d.csv" % r)
        subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", bundle, "--results", path,
                        "--all", "--max-time", HEAD_TO_HEAD_MAX_TIME], env=dict(os.environ, PYTHONPATH=ROOT),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("status") == "ok":
                    t = float(row["time_ns"])
                    for level in levels_of.get((row["shape_id"], row["variant_id"]), []):
                        minima[(row["shape_id"], level)] = min(t, minima.get((row["shape_id"], level), t))
        os.remove(path)
    out = {}
    for shape in sorted(winners_by_level["full"]):
        full = minima.get((shape, "full"))
        out[shape] = {level: minima[(shape, level)] / full for level in winners_by_level
                      if (shape, level) in minima and full}
    return out


def winners_bundle(work, winners_by_level):
    """Build, in the fresh project ``work``, one bundle of every level's winning (config, shape)
    pairs (the library's entries have no config), as bench/candidates_bundle.py builds a tune's
    candidates: ``only_pairs``, from the compile cache. (bundle folder, {config key: variant id})."""
    from pathlib import Path

    from harness import kernels
    from harness.api.build import read_shapes
    from harness.api.common import pick_build_target
    from harness.build import BuildOptions, build

    os.makedirs(work, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "targets.yaml"), work)
    pairs = {(config_key(w["config"]), shape): (w["config"], shape)
             for winners in winners_by_level.values() for shape, w in winners.items() if w.get("config")}
    here = os.getcwd()
    os.chdir(work)  # the harness reads targets.yaml and keeps its state in the working directory
    try:
        tgt, kern = pick_build_target("local", None), kernels.get("matmul")
        spec = ",".join(sorted({shape.replace("_", ":") for _, shape in pairs.values()}))
        shapes = read_shapes(tgt, spec, None, "auto", None, 0.1, None, kern)
        summary = build(kern, tgt, shapes, Path("."), BuildOptions(only_pairs=list(pairs.values()), progress=False))
    finally:
        os.chdir(here)
    return os.path.join(work, str(summary.bundle)), {config_key(v.config): v.id for v in summary.manifest.variants}


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
    p.add_argument("--from", dest="previous", default=None,
                   help="compare the projects a --keep run left in this folder instead of tuning again")
    p.add_argument("--levels", default="quick,default,full")
    p.add_argument("--sets", default="readme,cpu_gemms",
                   help="shape sets, comma-separated: readme (its three shapes), cpu_gemms, shapes:MxNxK (one shape), "
                        "file:PATH (a shapes file of your own)")
    args = p.parse_args()
    levels = [x for x in args.levels.split(",") if x]
    if "full" not in levels:
        levels.append("full")
    base = args.previous or args.keep or tempfile.mkdtemp(prefix="effort-")
    failed = False
    try:
        for name in [s for s in args.sets.split(",") if s]:
            runs = {}
            for level in levels:
                work = os.path.join(base, name.replace(":", "_").replace("/", "_"), level)
                winners, rows, seconds = tune(work, level, set_args(name), again=not args.previous)
                runs[level] = (winners, rows)
                print("%s, effort %s: %d shapes%s" % (name, level, len(winners),
                                                      "" if seconds is None else " in %.0f s" % seconds), flush=True)
            samples = full_samples(runs["full"][1])
            times = fastest(samples)
            best = {s: min(t.values()) for s, t in times.items() if t}
            for shape in sorted(samples):
                drift = winner_drift(samples[shape])
                if drift > DRIFT_WARNING:
                    print("  %s: the median of full's fastest config's own rows is %.2fx their fastest: this "
                          "shape's ratios are within the machine's drift" % (shape, drift))
            together = head_to_head(os.path.join(base, name.replace(":", "_").replace("/", "_"), "head-to-head"),
                                    {level: runs[level][0] for level in levels})
            for level in levels:
                if level == "full":
                    continue
                ratios = []
                for shape, w in sorted(runs[level][0].items()):
                    t = times.get(shape, {}).get(config_key(w["config"]))
                    in_rows = "no ok row in full's run" if t is None or shape not in best else "%.3f" % (t / best[shape])
                    mine = together.get(shape, {}).get(level)
                    if mine is not None:
                        ratios.append(mine)
                    print("  %s %-24s head to head %s (in full's rows %s)" % (
                        level, shape, "-" if mine is None else "%.3f" % mine, in_rows))
                if ratios:
                    med = statistics.median(ratios)
                    ok = med <= GOAL.get(level, float("inf"))
                    failed |= not ok
                    print("%s, effort %s: median %.3f of full's winner head to head over %d shapes (goal %.2f): %s" % (
                        name, level, med, len(ratios), GOAL.get(level, float("nan")), "ok" if ok else "MISSED"))
    finally:
        if not args.keep and not args.previous:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
