#!/bin/bash
# On an H200 node, from the repository root: `harness tune fp8_blockscale --library` on six
# DeepSeek-V3 shapes, the whole harness running on the node (target h200 of bench/fp8_targets.yaml:
# the node's Triton compiles, the agent runs locally), with tune's default search on GPU targets
# (genetic, 96 configs per shape, warm-started with the kernel's seeds). Wheels in .whl/ (fabric,
# optuna) are installed first where present. Writes results/, tuned/ and, with $OUT set, copies
# the results CSV, the tuned files and the log there.
#
#   bash bench/fp8_node_tune.sh [BUDGET]        # evaluations per shape (default: tune's, 96)
set -u
BUDGET=${1:+--budget $1}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# DeepSeek-V3 linear layers (M tokens x N out x K in): decode (M=16) and prefill sizes
SHAPES=16x7168x2048,16x2112x7168,128x24576x1536,1024x7168x16384,4096x4096x7168,4096x2112x7168
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
start=$(date +%s)
python3 -m harness tune fp8_blockscale --target h200 --targets bench/fp8_targets.yaml --shapes "$SHAPES" \
  --library $BUDGET --format aiter-blockscale 2>&1 | tee /tmp/fp8_tune.log
rc=${PIPESTATUS[0]}
echo "harness tune exit $rc, $(( $(date +%s) - start )) s"
if [ -n "${OUT:-}" ]; then
  cp results/h200/fp8_blockscale/results.csv "$OUT/fp8_results.csv" 2>/dev/null
  cp tuned/h200/fp8_blockscale.* "$OUT/" 2>/dev/null
  cp /tmp/fp8_tune.log "$OUT/fp8_tune.log"
fi
exit $rc
