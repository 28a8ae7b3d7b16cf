"""Did a tune's ties cost speed? For every tie that `harness tune` gave to a config other than its
leader (the fastest median of the re-measure), how the two compare when bench/gpu_quality.py
timed them again with do_bench, apart from the tune.

    python3 bench/tie_cost.py OUT [OUT ...] [--behind 0.01]

Each OUT is a folder of bench/gpu_node_session.sh (winners.json and quality.json). Prints one line
per such tie: how far behind the leader the tune had the winner, and the winner's do_bench time
over the leader's (over 1: the leader was faster). Then, for the ties won less than --behind
behind the leader and for the rest, how often do_bench found the leader faster and the geomean of
that ratio.
"""

import argparse
import json
import os
import statistics
from typing import List, NamedTuple


class TieCost(NamedTuple):
    shape: str
    behind: float  # the winner's re-measured median over the leader's, minus 1
    ratio: float  # the winner's do_bench time over the leader's


def tie_costs(winners: dict, quality: dict) -> List[TieCost]:
    """The ties of ``winners`` (winners.json) won by a config other than the leader, with their
    do_bench times from ``quality`` (quality.json); ties whose two configs it did not time are left out."""
    timed = {s["shape"]: {c["variant"]: c["remeasured_ms"] for c in s.get("candidates", [])}
             for s in quality.get("shapes", [])}
    out = []
    for sid, entry in winners.get("shapes", {}).items():
        table = entry.get("candidates") or []
        if entry.get("decided") != "tie" or not table:
            continue
        leader = next((c for c in table if not c.get("failed")), table[0])  # the fastest that never failed
        winner = next((c for c in table if c["variant_id"] == entry["variant_id"]), None)
        times = timed.get(sid, {})
        if winner is None or winner is leader or leader["variant_id"] not in times or winner["variant_id"] not in times:
            continue
        out.append(TieCost(sid, winner["median_ns"] / leader["median_ns"] - 1,
                           times[winner["variant_id"]] / times[leader["variant_id"]]))
    return out


def summary(costs: List[TieCost]) -> str:
    if not costs:
        return "none"
    ratios = [c.ratio for c in costs]
    return "%d ties, the leader faster by do_bench in %d, the winner's time over the leader's %.3f (geomean)" % (
        len(costs), sum(r > 1 for r in ratios), statistics.geometric_mean(ratios))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="+", help="folders with winners.json and quality.json")
    p.add_argument("--behind", type=float, default=0.01, help="split the ties at this distance behind the leader")
    args = p.parse_args(argv)
    costs = []
    for folder in args.out:
        with open(os.path.join(folder, "winners.json")) as f, open(os.path.join(folder, "quality.json")) as g:
            mine = tie_costs(json.load(f), json.load(g))
        for c in mine:
            print("%-12s %-26s won %4.1f %% behind the leader; do_bench winner/leader %.3f" % (
                os.path.basename(os.path.normpath(folder)), c.shape, 100 * c.behind, c.ratio))
        costs += mine
    print("won under %g %% behind: %s" % (100 * args.behind, summary([c for c in costs if c.behind < args.behind])))
    print("won %g %% or more behind: %s" % (100 * args.behind, summary([c for c in costs if c.behind >= args.behind])))


if __name__ == "__main__":
    main()
