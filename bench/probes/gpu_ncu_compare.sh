#!/bin/bash
# On a GPU node (sm90, ncu reading hardware counters): the warp-specialized Gluon kernel beside cuBLAS
# under Nsight Compute, one launch each a shape (bench/probes/gluon_probe.py --profile), to see where the
# kernel's time goes against the library's: throughput of the SMs, L2 and DRAM, the tensor pipe, the
# SM clock, warp stalls.
#
#   bash bench/probes/gpu_ncu_compare.sh OUT [CONFIG_JSON] SHAPE [SHAPE ...]
# writes OUT/ncu.ncu-rep, OUT/details.csv (the sections) and OUT/raw.csv (every metric read).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1; shift
CONFIG='{"KERNEL": "rows"}'
case "$1" in "{"*) CONFIG=$1; shift ;; esac
mkdir -p "$OUT"
SHAPES=()
for s in "$@"; do SHAPES+=(--shape "$s"); done
export PYTHONPATH=$REPO
ncu --clock-control none --profile-from-start off --replay-mode kernel \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
  --metrics sm__cycles_elapsed.avg.per_second,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  -o "$OUT/ncu" -f python3 -m bench.probes.gluon_probe --profile "${SHAPES[@]}" --config "$CONFIG" 2>&1 | grep -v "^==PROF==" | tail -20
ncu --import "$OUT/ncu.ncu-rep" --csv --page details > "$OUT/details.csv"
ncu --import "$OUT/ncu.ncu-rep" --csv --page raw > "$OUT/raw.csv"
python3 - "$OUT/details.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keep = ("Duration", "SM Frequency", "Compute (SM) Throughput", "Memory Throughput", "L2 Cache Throughput",
        "DRAM Throughput", "L1/TEX Cache Throughput", "L2 Hit Rate", "Issue Slots Busy", "Executed Ipc Active",
        "Registers Per Thread", "Cluster Size", "Grid Size", "Block Size", "Dynamic Shared Memory Per Block",
        "Warp Cycles Per Issued Instruction", "No Eligible")
seen = {}
for r in rows:
    key = (r["ID"], r["Kernel Name"][:90])
    if any(r["Metric Name"].startswith(k) for k in keep):
        seen.setdefault(key, []).append("%s=%s %s" % (r["Metric Name"], r["Metric Value"], r["Metric Unit"]))
for (i, name), metrics in seen.items():
    print("#%s %s" % (i, name))
    for m in metrics:
        print("   ", m)
PY
