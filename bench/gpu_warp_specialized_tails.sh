#!/bin/bash
# On a GPU node (sm90): the warp-specialized Gluon kernel's configs (bench/shapes/warp_specialized_space.yaml)
# built and run by the harness on ragged shapes (bench/shapes/warp_specialized_tails.txt), every
# answer checked by the agent; prints each row's status and error.
#
#   bash bench/gpu_warp_specialized_tails.sh
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/_node_env.sh"
PROJ=$(mktemp -d)
node_target "$PROJ/targets.yaml"
cd "$PROJ"
python3 -m harness build matmul --target node --shapes-file "$REPO/bench/shapes/warp_specialized_tails.txt" \
  --space "$REPO/bench/shapes/warp_specialized_space.yaml" 2>&1 | grep -v "^compile " | tail -3
python3 -m harness run --target node 2>&1 | tail -2
python3 - <<'PY'
import csv, collections
rows = list(csv.DictReader(open("results/node/matmul/results.csv")))
# pruned: by the rules (a ring that does not fit beside C's tile, GROUP_M 8 on one row of tiles)
print("statuses", dict(collections.Counter(r["status"] for r in rows)))
for r in rows:
    print("%-24s %-8s rel_err %-10s max_abs %-10s %8.1f us BK %s stages %s G %s" % (
        r["shape_id"], r["status"], r["rel_err"], r["max_abs_err"], float(r["time_ns"] or 0) / 1e3,
        r["cfg_BLOCK_K"], r["cfg_num_stages"], r["cfg_GROUP_M"]))
PY
