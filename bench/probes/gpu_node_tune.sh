#!/bin/bash
# On the GPU node: tune host-built bundles with the agent, then compare the winners with cuBLAS.
#
#   bash bench/probes/gpu_node_tune.sh ROOT OUT NAME [NAME ...]
#
# ROOT holds the bundles built by bench/probes/gpu_device_build.py (ROOT/NAME/build/gpu-node/matmul);
# OUT gets NAME.csv and NAME.log per bundle and quality.json. All bundles run in one window, so
# the winners are picked from measurements taken under the same clocks.
set -u
ROOT=$1; O=$2; shift 2
mkdir -p "$O"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
args=()
start=$(date +%s.%N)
for name in "$@"; do
  bundle=$ROOT/$name/build/gpu-node/matmul
  t0=$(date +%s.%N)
  python3 -m remote_agent run --bundle "$bundle" --results "$O/$name.csv" --min-time-ms 50 > "$O/$name.log" 2>&1
  echo "$name: agent exit $?, $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
  args+=(--bundle "$bundle" --results "$O/$name.csv")
done
tune=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
python3 bench/gpu_quality.py "${args[@]}" --tune-seconds "$tune" --out "$O/quality.json"
