#!/bin/bash
# throwaway: stop 29 probe 5 (BLOCK_K 32 / 64 / 128 of the wide tiles)
c() { echo "{\"BLOCK_M\": $1, \"BLOCK_N\": $2, \"BLOCK_K\": $3, \"num_warps\": $4, \"num_stages\": $5, \"STREAM_K\": 0, \"PERSISTENT\": 0}"; }
args=()
for cfg in "128 192 64 8 5" "128 192 64 8 4" "128 192 32 8 6" "128 192 32 8 5" "128 192 128 8 2" \
           "128 320 64 8 3" "128 320 32 8 6" "128 320 32 8 5" "128 320 32 8 4" \
           "64 320 64 4 4" "64 320 32 4 6" "64 320 128 4 2" "64 192 64 4 6" "64 192 32 4 6" "64 192 128 4 3"; do
  args+=(--config "$(c $cfg)")
done
for s in 3072x3072x4096:fp16:TN 2048x1536x8960:bf16:NT 512x10240x8192:bf16:NT 512x5120x14336:bf16:NT 1024x5120x13824:bf16:NT \
         4096x3584x3584:bf16:NN 1024x3072x8192:fp16:NT; do args+=(--shape $s); done
python3 bench/wide_tile_probe.py --budget-s ${BUDGET:-420} --out $OUT/probe29e.json "${args[@]}"
