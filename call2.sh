REPO=$(pwd)
COUNTS="1 2 4" bash bench/gpu_scaling.sh $OUT/scal 2>&1 | tail -40
. bench/_node_env.sh
timeout 80 python3 bench/probes/stream_timeline.py $OUT --gpus 4 2>&1 | grep -E "ready|gpus 4|tune wall|devices busy" | cut -c1-400
