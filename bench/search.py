"""How many evaluations each search strategy needs to get within 3% of the exhaustive best.

For every recorded full-space results CSV (tests/data/cpu_fullspace/*.csv, recorded on the
development machine, and tests/data/gpu_fullspace/*.csv, recorded on an H100/H200 when present)
and every shape in it, each strategy is replayed against the recording (harness.strategies.
simulate) under 20 seeds. A run counts the evaluations (builds + runs; halving's re-measures
count too) until the config it would pick is truly within 3% of the recording's best. Printed:
the median over seeds, as a count and as a fraction of the feasible (unpruned) configs of that
shape, and of the whole product space. Goal: <= 15% of the feasible space for the best strategy.

    python3 bench/search.py [--seeds 20] [--within 0.03] [--batch-size 8] [CSV ...]

With ``--budget N`` it asks the question of a default search instead: after N evaluations per
shape (a whole budget, no stopping at the target), how far is each strategy's pick from the best,
median and worst over the seeds (``--noise X`` replays with X times each row's spread)? With
``--warm`` every strategy is also run warm-started (``harness.strategies.seeded``) with matmul's
seed configs for an H200 (132 SMs) that exist in the recording (the recorded GPU space predates
SWAP_AB, TMA and PERSISTENT, so only the plain-pointer seeds are there).

    python3 bench/search.py --budget 96 --warm --noise 1 tests/data/gpu_fullspace/*.csv
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

from harness.strategies import names as strategy_names  # noqa: E402
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
    parser.add_argument("--strategies", default=",".join(strategy_names()))
    parser.add_argument("--budget", type=int, default=None, help="evaluations per shape: report the picks at the end")
    parser.add_argument("--warm", action="store_true", help="with --budget: also warm-started (matmul's seeds)")
    parser.add_argument("--noise", type=float, default=0.0, help="with --budget: replay noise, x each row's spread")
    args = parser.parse_args(argv)
    names = args.strategies.split(",")
    files = recordings(args.csv)
    if not files:
        print("nothing to replay")
        return 1
    if args.budget:
        return budgeted(args, names, files)
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


def recorded_seeds(rec) -> list:
    """matmul's seed configs for the recorded shape on an H200, projected onto the recorded space
    (the parameters it lacks must be at their first value, i.e. off)."""
    from harness import kernels
    from harness.shapes import make_shape
    from harness.targets import Target

    m, n, k = (int(d) for d in rec.shape_id.split("_")[0].split("x"))
    dtype, layout = rec.shape_id.split("_")[1:3]
    target = Target(name="h200", backend="cuda", gpu_arch="90", multiprocessors=132)
    kernel = kernels.get("matmul")
    space = kernel.space_for(target)
    out = []
    for cfg in kernel.seed_configs(make_shape(m, n, k, dtype, layout), target):
        if all(cfg[p] == space[p][0] for p in cfg if p not in rec.space):
            out.append({p: cfg[p] for p in rec.space})
    return out


def budgeted(args, names, files) -> int:
    import math

    from harness.strategies import get_strategy
    from harness.strategies.seeded import Seeded
    from harness.strategies.simulate import simulate

    print("picks after %d evaluations per shape (batch %d, noise %g), true time / best, over %d seeds"
          % (args.budget, args.batch_size, args.noise, args.seeds))
    summary = {}
    for path in files:
        for rec in load_recorded(path):
            seeds = recorded_seeds(rec) if args.warm else []
            in_rec = sum(rec.is_pruned(c) is False for c in seeds)
            print("\n%s: %d feasible%s" % (rec.shape_id, rec.feasible,
                                            ", %d of %d seeds recorded" % (in_rec, len(seeds)) if args.warm else ""))
            print("  %-16s %8s %8s %8s %6s" % ("strategy", "reached", "median", "worst", "secs"))
            for name in names:
                for warm in ([False, True] if args.warm else [False]):
                    start = time.monotonic()
                    ratios, reached = [], 0
                    for seed in range(args.seeds):
                        strategy = get_strategy(name, seed=seed, batch_size=args.batch_size)
                        if warm:
                            strategy = Seeded(strategy, seeds)
                        res = simulate(strategy, rec, budget=args.budget, within=args.within, noise=args.noise,
                                       stop_at_target=False)
                        ratios.append(res.found_ratio if res.found_ratio is not None else math.inf)
                        reached += res.to_target is not None
                    label = name + (" +warm" if warm else "")
                    summary.setdefault(label, []).extend(ratios)
                    print("  %-16s %5d/%-2d %8.3f %8.3f %6.1f" % (label, reached, args.seeds, statistics.median(ratios),
                                                                 max(ratios), time.monotonic() - start))
    print("\nover every shape and seed: geomean and worst of the pick / best")
    for label, ratios in summary.items():
        finite = [r for r in ratios if math.isfinite(r)]
        geo = math.exp(sum(math.log(r) for r in finite) / len(finite)) if finite else math.inf
        print("  %-16s geomean %.4f  worst %.3f" % (label, geo, max(ratios)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
