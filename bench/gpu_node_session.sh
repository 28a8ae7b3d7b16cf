#!/bin/bash
# On a GPU node: the whole harness on the node itself (a `backend: cuda` target without ssh:,
# local transport), `harness tune` with the DEFAULT search, then the quality bench on its winners.
#
#   bash bench/gpu_node_session.sh OUT SHAPES_FILE [KERNEL] [extra harness tune options]
#
# Wheels of what the node lacks (fabric, paramiko, invoke, optuna and their needs) are taken
# from .whl/ when it is there. OUT gets tune.log, results.csv, winners.json, quality.json and
# quality.log.
#
# With SPACE=FILE in the environment it measures timing fidelity instead: `harness build` of that
# space for the shapes, `harness run` (every config, one agent), then bench/timing_fidelity.py
# (agent median against do_bench and torch.matmul on the same kernels; FIDELITY_ARGS adds options
# to it, e.g. "--max-time 0.1"). OUT gets fidelity.log/json. With PROBE=flush as well it runs
# bench/probes/gpu_flush_probe.py (the written against the read L2 flush) instead: flush.log/json.
# QUALITY=0 skips the quality bench (throughput runs).
set -u
OUT=$(realpath -m "$1"); SHAPES=$(realpath "$2"); KERNEL=${3:-matmul}; shift 2; [ $# -gt 0 ] && shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
. "$REPO/bench/_node_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
PROJ=$(mktemp -d)
node_target "$PROJ/targets.yaml"
cd "$PROJ"
if [ -n "${SPACE:-}" ]; then
  python3 -m harness build "$KERNEL" --target node --shapes-file "$SHAPES" --space "$(realpath "$REPO/$SPACE")" "$@" 2>&1 | grep -v "^compile " | tee "$OUT/build.log"
  python3 -m harness run --target node 2>&1 | tail -3 | tee "$OUT/run.log"
  cp "results/node/$KERNEL/results.csv" "$OUT/results.csv"
  if [ "${PROBE:-}" = flush ]; then
    python3 -m bench.probes.gpu_flush_probe --bundle "build/node/$KERNEL" --results "results/node/$KERNEL/results.csv" \
      --out "$OUT/flush.json" 2>&1 | tee "$OUT/flush.log"
    exit
  fi
  python3 "$REPO/bench/timing_fidelity.py" --bundle "build/node/$KERNEL" --results "results/node/$KERNEL/results.csv" \
    --per-shape 7 --torch ${FIDELITY_ARGS:-} --out "$OUT/fidelity.json" 2>&1 | tee "$OUT/fidelity.log"
  exit
fi
start=$(date +%s.%N)
python3 -m harness tune "$KERNEL" --target node --shapes-file "$SHAPES" --library "$@" 2>&1 | tee "$OUT/tune.log"
tune=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
echo "tune wall time by the session's clock: $tune s"
cp "results/node/$KERNEL/results.csv" "results/node/$KERNEL/winners.json" "$OUT/" 2>/dev/null
cp -r "tuned/node" "$OUT/tuned" 2>/dev/null
if [ "$KERNEL" = matmul ] && [ "${QUALITY:-1}" != 0 ]; then
  # the last round's manifest may hold only some shapes: describe every shape's candidates again
  python3 "$REPO/bench/candidates_bundle.py" "$KERNEL" --target node --shapes-file "$SHAPES" --top 3 2>&1 | tee "$OUT/candidates.log"
  python3 "$REPO/bench/gpu_quality.py" --bundle "build/node/$KERNEL" --results "results/node/$KERNEL/results.csv" \
    --tune-seconds "$tune" --out "$OUT/quality.json" 2>&1 | tee "$OUT/quality.log"
fi
