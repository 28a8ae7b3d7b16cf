"""Do two tunes agree? `harness tune matmul --target local --library` (the README's first command)
twice, each in a fresh project, and the winners of the two compared shape by shape.

    python3 bench/tune_repeat.py [--keep DIR] [-- extra harness tune arguments, e.g. --shapes 64x64x64]

For every shape it prints each run's winner, how it was decided (`clear by N %` or `tie with
...`) and its noise, then `same winner`, `ties among the same configs` (each run's winner is
among the other run's tied configs) or `DIFFERENT`, and how long each tune took. Goal: no
DIFFERENT (issue 12). Where a tune gave shapes more re-measure rounds (a noisy winner, or a tie
won 1 % or more behind the fastest) it prints the tune's line that says so. A full run takes two
README tunes (about 4 to 8 minutes each on a 2-core VM).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = ["harness", "tune", "matmul", "--target", "local", "--library", "--fresh"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", default=None, help="keep the two projects under this folder")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="more harness tune arguments (after --)")
    args = p.parse_args()
    extra = [a for a in args.extra if a != "--"]
    base = args.keep or tempfile.mkdtemp(prefix="tune-repeat-")
    try:
        runs = []
        for i in range(2):
            work = os.path.join(base, "run%d" % i)
            os.makedirs(work, exist_ok=True)
            shutil.copy(os.path.join(ROOT, "targets.yaml"), work)
            start = time.monotonic()
            with open(os.path.join(work, "tune.log"), "w") as log:
                subprocess.run([sys.executable, "-m"] + COMMAND + extra, cwd=work, check=True,
                               env=dict(os.environ, PYTHONPATH=ROOT), stdout=log)
            seconds = time.monotonic() - start
            with open(os.path.join(work, "tune.log")) as log:  # the re-measure's extra rounds, if any
                for line in log:
                    if "more rounds" in line:
                        print("run %d: %s" % (i, line.strip()))
            with open(os.path.join(work, "results", "local", "matmul", "winners.json")) as f:
                runs.append((json.load(f)["shapes"], seconds))
            print("run %d: %s in %.0f s" % (i, " ".join(COMMAND + extra), seconds))
        first, second = runs[0][0], runs[1][0]
        differ = 0
        for shape in sorted(set(first) | set(second)):
            a, b = first.get(shape), second.get(shape)
            verdict = agreement(a, b)
            differ += verdict == "DIFFERENT"
            print("%-22s %s | %s | %s" % (shape, describe(a), describe(b), verdict))
        print("%d of %d shapes differ" % (differ, len(set(first) | set(second))))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def describe(entry):
    if not entry:
        return "no winner"
    config = " ".join("%s=%s" % kv for kv in entry["config"].items())
    words = ("clear by %.1f %%" % (100.0 * entry["margin_ns"] / entry["median_ns"])
             if entry["decided"] == "clear" and entry.get("margin_ns") else
             "tie with %d" % (len(entry.get("tied") or []) - 1))
    noise = entry.get("noise")
    return "%s (%s, noise %s)" % (config, words, "-" if noise is None else "%.2f %%" % (100.0 * noise))


def agreement(a, b):
    if not a or not b:
        return "DIFFERENT"
    if a["variant_id"] == b["variant_id"]:
        return "same winner"
    if a["variant_id"] in (b.get("tied") or []) and b["variant_id"] in (a.get("tied") or []):
        return "ties among the same configs"
    return "DIFFERENT"


if __name__ == "__main__":
    main()
