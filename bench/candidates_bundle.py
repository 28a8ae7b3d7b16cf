"""After `harness tune`: write the bundle's manifest again so that it holds every shape's
candidates for bench/gpu_quality.py, those the tune re-measured, else the fastest --top (run in
the project directory, before bench/gpu_quality.py).

    python3 bench/candidates_bundle.py matmul --target node --shapes-file SHAPES [--top 3]

Each round of a tune writes a manifest of only its own (config, shape) pairs (harness/rounds.py),
so after the tune the bundle describes its last round: the winners' re-measure, or only the shapes
that got extra re-measure rounds. The artifacts are content-addressed and still there, so this
build compiles nothing; it checks that every candidate's variant is in the new manifest.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script: the repository root

from bench._gpu_common import candidate_rows, read_results  # noqa: E402


def candidate_pairs(rows, space, top, results_path=None):
    """[(config, shape id)] of the candidates of every shape that bench/gpu_quality.py times again
    (``candidate_rows``), and their variant ids."""
    from harness.strategies.history import row_config

    pairs, variant_ids = [], set()
    for sid, chosen in candidate_rows(rows, top, results_path).items():
        for row in chosen:
            pairs.append((row_config(row, space), sid))
            variant_ids.add(row["variant_id"])
    return pairs, variant_ids


def main(argv=None):
    from harness import kernels
    from harness.build import BuildOptions, build
    from harness.api.build import read_shapes
    from harness.api.common import pick_build_target
    from harness.run import local_results_path

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel")
    p.add_argument("--target", required=True)
    p.add_argument("--shapes-file", required=True, help="the shapes the tune ran")
    p.add_argument("--top", type=int, default=3)
    args = p.parse_args(argv)
    root = Path.cwd()
    tgt = pick_build_target(args.target, None)
    kern = kernels.get(args.kernel)
    shapes = read_shapes(tgt, None, args.shapes_file, "auto", None, 0.1, None, kern)
    results_path = local_results_path(root, tgt.name, kern.name)
    rows = read_results(results_path)
    pairs, variant_ids = candidate_pairs(rows, kern.space_for(tgt), args.top, results_path)
    summary = build(kern, tgt, shapes, root, BuildOptions(only_pairs=pairs, progress=False))
    have = {v.id for v in summary.manifest.variants}
    missing = sorted(variant_ids - have)
    print("%s: %d candidate pairs of %d shapes, %d compiled, %d cached%s" % (
        summary.bundle, len(pairs), len({sid for _, sid in pairs}), summary.compiled, summary.cached,
        "; not in the manifest: %s" % ", ".join(missing) if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
