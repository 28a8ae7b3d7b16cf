#!/bin/bash
# On a node with two GPUs: the same `harness tune` (default genetic search, --budget 96 per shape)
# on GPU 0 alone, then on GPUs 0 and 1, each in a fresh project (both compile everything), back
# to back; prints each run's search configs/s (the tune's last progress line: devices busy, what
# waited on what) and the ratio two GPUs / one GPU (goal of issue 13: >= 1.7).
#
#   bash bench/gpu_two_gpus.sh OUT [SHAPES_FILE] [extra harness tune options]
#
# SHAPES_FILE defaults to bench/shapes/llm_gemms.txt (ten shapes); both runs use the same one.
# Both tunes are searches only (--top 0): a winners' re-measure runs beside a GPU tune's search and
# would count in its configs/s. QUALITY=1 then builds the two-GPU run's top 3 per shape
# (bench/candidates_bundle.py) and runs bench/gpu_quality.py on them (geomean against cuBLAS);
# QUALITY=0 (default) skips that. Wheels of what the node lacks are taken from .whl/ as
# bench/gpu_node_session.sh does. OUT gets gpu0.log, gpu01.log, candidates.log, quality.log.
set -u
OUT=$(realpath -m "$1"); shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHAPES=$(realpath "${1:-$REPO/bench/shapes/llm_gemms.txt}"); [ $# -gt 0 ] && shift
mkdir -p "$OUT"
. "$REPO/bench/_node_env.sh"
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "cores: $(nproc), shapes: $SHAPES ($(grep -cv '^\s*\(#\|$\)' "$SHAPES") shapes)"

tune() {  # tune PROJECT DEVICES LOG TOP [options]: one tune in a fresh project; prints its last configs/s line
  local proj=$1 devices=$2 log=$3 top=$4; shift 4
  node_target "$proj/targets.yaml" "$devices"
  local start rc; start=$(date +%s.%N)
  (cd "$proj" && python3 -m harness tune matmul --target node --shapes-file "$SHAPES" --budget 96 --top "$top" "$@" \
    > "$log" 2>&1); rc=$?
  echo "devices $devices: tune wall time $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s, exit $rc" >> "$log"
  grep "configs/s" "$log" | tail -1
}

P0=$(mktemp -d); P01=$(mktemp -d)
one=$(tune "$P0" 0 "$OUT/gpu0.log" 0 "$@"); echo "GPU 0:      $one"
two=$(tune "$P01" 0,1 "$OUT/gpu01.log" 0 "$@"); echo "GPUs 0,1:   $two"
tail -1 "$OUT/gpu0.log"; tail -1 "$OUT/gpu01.log"
python3 - "$one" "$two" <<'PY'
import sys
rate = [float(line.split(" configs/s")[0].split()[-1]) for line in sys.argv[1:]]
print("configs/s: one GPU %.2f, two GPUs %.2f, ratio x%.2f (goal >= 1.7)" % (rate[0], rate[1], rate[1] / rate[0]))
PY
if [ "${QUALITY:-0}" = 1 ]; then
  (cd "$P01" && python3 "$REPO/bench/candidates_bundle.py" matmul --target node --shapes-file "$SHAPES" --top 3 \
     > "$OUT/candidates.log" 2>&1 &&
   CUDA_VISIBLE_DEVICES=0 python3 "$REPO/bench/gpu_quality.py" --bundle build/node/matmul \
     --results results/node/matmul/results.csv --out "$OUT/quality.json" 2>&1) | tee "$OUT/quality.log" | tail -4
fi
