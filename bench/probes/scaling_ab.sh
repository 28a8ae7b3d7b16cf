#!/bin/bash
# One-off probe (issue 43): the scaling tune of bench/gpu_scaling.sh for two checkouts, alternated
# on one node so that the machine's drift falls on both, with the CPU's use sampled (/proc/stat
# every 0.5 s) during each run. The runs' folders are packed into OUT/ab.tgz (few files come back
# from a lent node).
#
#   bash bench/probes/scaling_ab.sh OUT OTHER_CHECKOUT new:4 old:4 new:4 old:4 new:1
#
# "new" is this checkout, "old" OTHER_CHECKOUT; the number after the colon is the GPU count.
set -u
OUT=$(realpath -m "$1"); OTHER=$(realpath "$2"); shift 2
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT/ab"
i=0
for spec in "$@"; do
  who=${spec%%:*}; n=${spec##*:}; i=$((i + 1))
  dir=$REPO; [ "$who" = old ] && dir=$OTHER
  name="$i-$who-gpus$n"
  (while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 0.5; done) > "$OUT/ab/cpu-$name.txt" &
  sampler=$!
  echo "== $name"
  COUNTS=$n CACHED=0 QUALITY=0 bash "$dir/bench/gpu_scaling.sh" "$OUT/ab/$name" | grep -E "^(gpus|run )"
  kill $sampler
done
tar -czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
