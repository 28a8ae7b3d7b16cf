#!/bin/bash
# On a node with several GPUs: the same tune (`harness tune matmul --budget 96 --min-time-ms 25`,
# default genetic search and winners' re-measure, the ten shapes of bench/shapes/llm_gemms.txt)
# on 1, 2, 4 (and 8 where the node has them) GPUs, each in a fresh project with an empty compile
# cache, then once more on the most GPUs in a fresh project keeping that run's compile cache (a
# second tune of the same space: it should compile nothing). After each tune bench/gpu_quality.py
# measures its winners against cuBLAS (QUALITY=0 skips that). Prints and writes OUT/scaling.txt:
# each run's wall time, configs/s, devices busy, the compiles made and reused, the ratios to one
# GPU (issue 43: four GPUs at most a third of one GPU's wall time, two at most 0.55) and the
# geomean against cuBLAS (bench/scaling_summary.py).
#
#   bash bench/gpu_scaling.sh OUT [SHAPES_FILE] [extra harness tune options]
#
# COUNTS="1 4" runs those GPU counts only (default 1 2 4 8, up to the node's); QUALITY=0 skips the
# quality bench; CACHED=0 skips the second tune. Each run's lines are printed as it ends, the
# summary (bench/scaling_summary.py) last, of every run in OUT (an earlier call's too, so that
# COUNTS="1 2" CACHED=0 then COUNTS=4 into the same OUT give one summary).
#
# The compile caches live in a temporary folder (removed at the end), not in OUT.
# Wheels of what the node lacks are taken from .whl/ (bench/_node_env.sh). OUT/<run>/ gets each
# run's tune.log, serve.log (the agent's: each worker's ready line), tune_timing.json, winners.json,
# quality.json and quality.log.
set -u
OUT=$(realpath -m "$1"); shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHAPES=$(realpath "${1:-$REPO/bench/shapes/llm_gemms.txt}"); [ $# -gt 0 ] && shift
mkdir -p "$OUT"
. "$REPO/bench/_node_env.sh"
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/node.txt"
echo "cores: $(nproc), GPUs: $GPUS, shapes: $SHAPES ($(grep -cv '^\s*\(#\|$\)' "$SHAPES") shapes)" | tee -a "$OUT/node.txt"

run() {  # run NAME DEVICES CACHE [options]: one tune in a fresh project with compile cache CACHE, then its quality
  local name=$1 devices=$2 cache=$3; shift 3
  local dir="$OUT/$name" proj; proj=$(mktemp -d); mkdir -p "$dir"
  node_target "$proj/targets.yaml" "$devices"
  local start; start=$(date +%s.%N)
  (cd "$proj" && HARNESS_CACHE_DIR="$cache" python3 -m harness tune matmul --target node --shapes-file "$SHAPES" \
    --budget 96 --min-time-ms 25 "$@" > "$dir/tune.log" 2>&1)
  echo "exit $? after $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s by the script's clock" >> "$dir/tune.log"
  cp "$proj/results/node/matmul/tune_timing.json" "$proj/results/node/matmul/winners.json" \
     "$proj/results/node/matmul/serve/serve.log" "$dir/" 2>/dev/null
  grep -E "^(compiles:|devices busy|where the time went|tune wall time)" -A1 "$dir/tune.log" | grep -v "^--" | head -8
  if [ "${QUALITY:-1}" != 0 ]; then
    (cd "$proj" && HARNESS_CACHE_DIR="$cache" python3 "$REPO/bench/candidates_bundle.py" matmul --target node \
       --shapes-file "$SHAPES" --top 3 > "$dir/candidates.log" 2>&1
     CUDA_VISIBLE_DEVICES=0 python3 "$REPO/bench/gpu_quality.py" --bundle build/node/matmul \
       --results results/node/matmul/results.csv --out "$dir/quality.json" > "$dir/quality.log" 2>&1)
    grep "^geomean" "$dir/quality.log"
  fi
  rm -rf "$proj"
}

devices() { seq -s, 0 $(($1 - 1)); }
# the compile caches (a thousand cubins each) outside OUT, so that OUT stays small to copy back
CACHES=$(mktemp -d /tmp/harness-scaling-caches.XXXXXX); trap 'rm -rf "$CACHES"' EXIT
RUNS=""
for n in ${COUNTS:-1 2 4 8}; do
  [ "$n" -le "$GPUS" ] || break
  rm -rf "$CACHES/cache-$n"; mkdir -p "$CACHES/cache-$n"  # an empty compile cache
  echo "== $n GPU(s): $(devices $n), empty compile cache"
  run "gpus$n" "$(devices $n)" "$CACHES/cache-$n" "$@"
  RUNS="$RUNS gpus$n"; LAST=$n
done
if [ "${CACHED:-1}" != 0 ]; then
  echo "== $LAST GPU(s) again in a fresh project, the compile cache of the run before kept"
  run "gpus$LAST-cached" "$(devices $LAST)" "$CACHES/cache-$LAST" "$@"
  RUNS="$RUNS gpus$LAST-cached"
fi
ALL=""  # this call's runs and those an earlier call left in OUT (COUNTS split over several calls)
for r in gpus1 gpus2 gpus4 gpus8 gpus1-cached gpus2-cached gpus4-cached gpus8-cached; do
  [ -f "$OUT/$r/tune.log" ] && ALL="$ALL $r"
done
python3 "$REPO/bench/scaling_summary.py" "$OUT" ${ALL:-$RUNS} | tee "$OUT/scaling.txt"
