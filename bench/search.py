"""How many evaluations each search strategy needs to get within 3% of the exhaustive best.

For every recorded full-space results CSV (tests/data/cpu_fullspace/*.csv, recorded on the
development machine, and tests/data/gpu_fullspace/*.csv, recorded on an H100/H200 when present)
and every shape in it, each strategy is replayed against the recording (harness.strategies.
simulate) under 20 seeds. A run counts the evaluations (builds + runs; halving's re-measures
count too) until the config it would pick is truly within 3% of the recording's best. Printed:
the median over seeds, as a count and as a fraction of the feasible (unpruned) configs of that
shape, and of the whole product space. Goal: <= 15% of the feasible space for the best strategy.

    python3 bench/search.py [--seeds 20] [--within 0.03] [--batch-size 8] [CSV ...]
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.strategies import STRATEGIES  # noqa: E402
from harness.strategies.simulate import load_recorded, median_to_target, sweep  # noqa: E402

GOAL = 0.15


def recordings(paths):
    if paths:
        return [Path(p) for p in paths]
    found = []
    for folder in ("cpu_fullspace", "gpu_fullspace"):
        hits = sorted(glob.glob(str(REPO / "tests" / "data" / folder / "*.csv")))
        if not hits:
            print("(no recordings in tests/data/%s/)" % folder)
        found += [Path(h) for h in hits]
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="*", help="recorded full-space results (default: tests/data/*_fullspace/)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--within", type=float, default=0.03)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args(argv)
    names = args.strategies.split(",")
    files = recordings(args.csv)
    if not files:
        print("nothing to replay")
        return 1
    print("evaluations to within %.0f%% of the exhaustive best: median over %d seeds, batch %d"
          % (100 * args.within, args.seeds, args.batch_size))
    best_fractions = []
    per_strategy = {n: [] for n in names}
    for path in files:
        for rec in load_recorded(path):
            print("\n%s  %s: %d feasible of %d configs, best %.0f ns"
                  % (path.relative_to(REPO) if path.is_relative_to(REPO) else path, rec.shape_id,
                     rec.feasible, rec.space_size, rec.best_ns))
            print("  %-10s %7s %9s %9s %8s %7s" % ("strategy", "median", "feasible", "space", "reached", "secs"))
            fractions = {}
            for name in names:
                start = time.monotonic()
                res = sweep(name, rec, range(args.seeds), args.within, args.batch_size)
                med = median_to_target(res)
                reached = sum(r.to_target is not None for r in res)
                frac = None if med is None else med / rec.feasible
                fractions[name] = frac
                per_strategy[name].append(frac if frac is not None else 1.0)
                print("  %-10s %7s %8s%% %8s%% %5d/%-2d %7.1f" % (
                    name, "-" if med is None else "%g" % med,
                    "-" if frac is None else "%.1f" % (100 * frac),
                    "-" if med is None else "%.1f" % (100 * med / rec.space_size),
                    reached, len(res), time.monotonic() - start))
            done = {n: f for n, f in fractions.items() if f is not None}
            if done:
                winner = min(done, key=done.get)
                best_fractions.append(done[winner])
                print("  best: %s at %.1f%% of the feasible space (%s)" % (
                    winner, 100 * done[winner], "goal met" if done[winner] <= GOAL else "goal NOT met"))
    print("\nmedian over shapes of each strategy's fraction of the feasible space:")
    for name in names:
        print("  %-10s %.1f%%" % (name, 100 * statistics.median(per_strategy[name])))
    met = sum(f <= GOAL for f in best_fractions)
    print("best strategy within %.0f%% of the feasible space on %d of %d shapes"
          % (100 * GOAL, met, len(best_fractions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
