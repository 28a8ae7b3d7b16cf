"""Issue 42's fp8 bars from one `harness tune fp8_blockscale --library` (its uplift CSV): per shape
the tuned time, TFLOP/s and speedup over the library row (torch._scaled_mm, timed by the agent in
the same tune); the geomean over all shapes and over prefill (M >= 512), the worst prefill shape,
and the TFLOP/s of the shapes of 0.5 TFLOP or more. Where the tune kept the library (its config
not faster), the shape counts at the library's speed (1.0x), as a user of the tuned file gets it.

    python3 bench/fp8_bars.py tuned/node/fp8_blockscale.uplift.csv

(bench/gpu_node_session.sh copies it to OUT/tuned/.)
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script: the repository root

from bench._gpu_common import geomean  # noqa: E402

GEOMEAN_BAR, PREFILL_FLOOR, TFLOPS_BAR, BIG = 1.10, 0.95, 1300.0, 0.5e12


def shape_rows(path):
    """(M, N, K, tuned ns, library ns, speedup as used) of each shape with a library time."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["library_ns"] in ("", "nan") or r["tuned_ns"] in ("", "nan"):
                continue
            lib, tuned = float(r["library_ns"]), float(r["tuned_ns"])
            used = lib / tuned if r["uses"] == "tuned" else 1.0
            out.append((int(r["M"]), int(r["N"]), int(r["K"]), tuned, lib, used))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("uplift", help="the tune's <kernel>.uplift.csv")
    args = ap.parse_args(argv)
    rows = shape_rows(args.uplift)
    if not rows:
        print("no shape with a library time in %s" % args.uplift)
        return 2
    print("%-18s %10s %8s %10s %8s" % ("shape", "tuned us", "TFLOP/s", "library us", "speedup"))
    for m, n, k, tuned, lib, used in sorted(rows, key=lambda r: -r[0] * r[1] * r[2]):
        print("%-18s %10.1f %8.0f %10.1f %7.3fx" % ("%dx%dx%d" % (m, n, k), tuned / 1e3, 2.0 * m * n * k / tuned / 1e3,
                                                   lib / 1e3, used))
    speedups = [r[5] for r in rows]
    prefill = [r[5] for r in rows if r[0] >= 512]
    big = [2.0 * m * n * k / tuned / 1e3 for m, n, k, tuned, _, _ in rows if 2.0 * m * n * k >= BIG]
    g = geomean(speedups)
    print("geomean %.3f over %d shapes (bar %.2f: %s)" % (g, len(rows), GEOMEAN_BAR, "met" if g >= GEOMEAN_BAR else
                                                          "not met"))
    if prefill:
        worst = min(prefill)
        print("prefill (M >= 512): geomean %.3f over %d, worst %.3f (floor %.2f: %s)" % (
            geomean(prefill), len(prefill), worst, PREFILL_FLOOR, "met" if worst >= PREFILL_FLOOR else "not met"))
    if big:
        print("shapes of 0.5 TFLOP or more: %.0f to %.0f TFLOP/s over %d (bar %.0f: %s)" % (
            min(big), max(big), len(big), TFLOPS_BAR, "met" if min(big) >= TFLOPS_BAR else "not met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
