#!/usr/bin/env bash
# Sweeps the mma strategy's geometry on a GPU host (after bench/gpu/profile.sh or run-h100.sh has
# built fp4cl-bench): tokens per tile (mma.tile_m: 8 per MMA column block), FC1 and FC2
# work-group sizes (mma.local_i, mma.local_h) and warps splitting K (mma.split_k; the rest of a
# work-group are row tiles of 16), through FP4CL_MOE_TILES, printing each setting's bench rows
# (µs per call, TFLOP/s). NVFP4 W4A16.
#
#   bench/gpu/sweep-mma.sh [PRESET ...]        (default qwen3-30b-a3b mixtral-8x7b)
#   FP4CL_GPU_BUILD    the build folder (default /tmp/fp4cl-gpu-build)
#   FP4CL_DEB_DIR      as in sweep-split.sh ("-": the environment is set already)
#   FP4CL_SWEEP_MMA    "tile_m:local_i:local_h:split_k[:few_split_k[:stage[:warp_tiles]]] ..." (default "32:32:32:1
#                      32:64:64:1 32:64:64:2 16:32:32:1 64:32:32:1 32:256:256:1:0:1": the built-in tiles,
#                      2 row tiles, a K split, other tile sizes, 8 row tiles staged)
#   FP4CL_SWEEP_TOKENS (default 1,8,64,512)
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
gpu_host_env "${FP4CL_DEB_DIR:-$root/.device-deps/debs}"
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(qwen3-30b-a3b mixtral-8x7b)
settings=${FP4CL_SWEEP_MMA:-"32:32:32:1 32:64:64:1 32:64:64:2 16:32:32:1 64:32:32:1 32:256:256:1:0:1"}
tokens=${FP4CL_SWEEP_TOKENS:-1,8,64,512}
for preset in "${presets[@]}"; do
  for s in $settings; do
    IFS=: read -r tm li lh sk fk st wt <<<"$s"
    tiles="mma.tile_m=$tm,mma.local_i=$li,mma.local_h=$lh,mma.split_k=$sk${fk:+,mma.few_split_k=$fk}${st:+,mma.stage=$st}"
    tiles+="${wt:+,mma.warp_tiles=$wt}"
    echo "== $preset FP4CL_MOE_TILES=$tiles"
    FP4CL_MOE_TILES=$tiles "$bench" moe --preset "$preset" --tokens "$tokens" --scheme nvfp4-w4a16 --kernel mma \
      --no-check --iters 10 --warmup 2 2>/dev/null | grep -E "^ *[0-9]+ +moe" | sed 's/^/   /'
  done
done
