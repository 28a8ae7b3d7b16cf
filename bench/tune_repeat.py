"""Do two tunes agree? `harness tune matmul --target local --library` (the README's first command)
twice, each in a fresh project, and the winners of the two compared shape by shape.

    python3 bench/tune_repeat.py [--keep DIR] [-- extra harness tune arguments, e.g. --shapes 64x64x64]

For every shape it prints each run's winner, how it was decided (`clear by N %` or `tie with
...`) and its noise, then `same winner`, `ties among the same configs` (each run's winner is
among the other run's tied configs) or `DIFFERENT`, and how long each tune took. Goal: no
DIFFERENT (issue 12). Where both runs ship the library for a shape (`uses` in the uplift table:
no tuned config beat it), it says so beside the verdict, since the tuned winner is then not what
the user gets. Where a tune gave shapes more re-measure rounds (a noisy winner, or a tie won 1 %
or more behind the fastest) it prints the tune's line that says so.

It also checks each run's ETA (issue 45): the tune's lines are timestamped as they arrive, and the
first ETA printed once a fifth of the run had passed is set against the time really left (goal:
within 25 %), as is the plan line's estimate against the whole run. A run takes two README tunes
(about 2 minutes each on an idle 2-core VM).
"""

import argparse
import csv
import json
import os
import re
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
            lines, seconds = run_timed([sys.executable, "-m"] + COMMAND + extra, work)
            for _, line in lines:  # the re-measure's extra rounds, if any
                if "more rounds" in line:
                    print("run %d: %s" % (i, line.strip()))
            with open(os.path.join(work, "results", "local", "matmul", "winners.json")) as f:
                runs.append((json.load(f)["shapes"], library_used(work)))
            print("run %d: %s in %.0f s" % (i, " ".join(COMMAND + extra), seconds))
            print("run %d: %s" % (i, eta_check(lines, seconds)))
        (first, lib_a), (second, lib_b) = runs
        differ = 0
        for shape in sorted(set(first) | set(second)):
            a, b = first.get(shape), second.get(shape)
            verdict = agreement(a, b)
            differ += verdict == "DIFFERENT"
            both_library = shape in lib_a and shape in lib_b
            print("%-22s %s | %s | %s%s" % (shape, describe(a), describe(b), verdict,
                                            " (both runs ship the library for it)" if both_library else ""))
        print("%d of %d shapes differ" % (differ, len(set(first) | set(second))))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def run_timed(cmd, work):
    """Run one tune in ``work``, its stdout to tune.log; ([(seconds since start, line)], wall seconds)."""
    start, lines = time.monotonic(), []
    with open(os.path.join(work, "tune.log"), "w") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                                text=True)
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line))
            log.write(line)
        if proc.wait():
            raise SystemExit("%s failed (exit %d); its output: %s" % (" ".join(cmd), proc.returncode, log.name))
    return lines, time.monotonic() - start


def seconds_of(words):
    """'2 min 03 s' -> 123, '68 s' -> 68 (effort.duration's words)."""
    m = re.match(r"(?:(\d+) min )?(\d+) s", words)
    return int(m.group(1) or 0) * 60 + int(m.group(2))


def eta_check(lines, wall):
    """The plan line's estimate against the wall time, and the first ETA printed once a fifth of
    the run had passed against the time really left then."""
    said = []
    for at, line in lines:
        plan = re.search(r"^tune: .* about ((?:\d+ min )?\d+ s)", line)
        if plan:
            said.append("plan said %d s for %.0f s (%+.0f %%)" % (
                seconds_of(plan.group(1)), wall, 100.0 * (seconds_of(plan.group(1)) - wall) / wall))
    for at, line in lines:
        m = re.search(r"ETA ((?:\d+ min )?\d+ s)", line)
        if m and at >= wall / 5:
            left = wall - at
            said.append("ETA at %.0f s (%.0f %% of the run) said %d s, %.0f s were left (%+.0f %%; goal within 25 %%)"
                        % (at, 100.0 * at / wall, seconds_of(m.group(1)), left,
                           100.0 * (seconds_of(m.group(1)) - left) / max(left, 1e-9)))
            break
    else:
        said.append("no ETA printed past a fifth of the run")
    return "; ".join(said)


def library_used(work):
    """The shapes for which the tune ships the library (the uplift table's ``uses``)."""
    path = os.path.join(work, "tuned", "local", "matmul.uplift.csv")
    if not os.path.exists(path):
        return set()
    with open(path, newline="") as f:
        return {row["shape_id"] for row in csv.DictReader(f) if row.get("uses") == "library"}


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
