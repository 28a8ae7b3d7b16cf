"""Split a GPU full-space results CSV into one file per shape for tests/data/gpu_fullspace/.

    python bench/gpu_fullspace_export.py results.csv tests/data/gpu_fullspace [--drop-pruned]

Rows keep the results CSV format (what harness.strategies.simulate reads: pruned rows tell it the
whole space and which configs the rules removed). Columns that only identify the run
(artifact hash, host, agent version) are left out to keep the files small.
"""

import argparse
import csv
import os


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results")
    p.add_argument("out_dir")
    p.add_argument("--drop-pruned", action="store_true")
    p.add_argument("--drop", default="artifact_sha256,host,agent_version",
                   help="columns to leave out (comma-separated)")
    args = p.parse_args(argv)
    drop = {c for c in args.drop.split(",") if c}
    with open(args.results, newline="") as f:
        reader = csv.DictReader(f)
        header = [c for c in reader.fieldnames if c not in drop]
        rows = list(reader)
    os.makedirs(args.out_dir, exist_ok=True)
    by_shape = {}
    for r in rows:
        if r["status"] == "pruned" and args.drop_pruned:
            continue
        by_shape.setdefault(r["shape_id"], []).append(r)
    for shape, rs in sorted(by_shape.items()):
        path = os.path.join(args.out_dir, "%s.csv" % shape)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            w.writerows(rs)
        print("%s: %d rows, %d bytes" % (path, len(rs), os.path.getsize(path)))


if __name__ == "__main__":
    main()
