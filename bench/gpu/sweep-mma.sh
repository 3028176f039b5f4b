#!/usr/bin/env bash
# Sweeps the mma strategy's geometry on a GPU host (after bench/gpu/profile.sh or run-h100.sh has
# built fp4cl-bench): tokens per tile (mma.tile_m: 8 per MMA column block), FC1 and FC2
# work-group sizes (mma.local_i, mma.local_h) and warps splitting K (mma.split_k; the rest of a
# work-group are row tiles of 16), or any FP4CL_MOE_TILES keys, printing each setting's bench rows
# (µs per call, TFLOP/s) and the command that reproduces each. One fp4cl-bench process a preset
# (`--tiles`: the experts are made once, a layer per setting).
#
#   bench/gpu/sweep-mma.sh [PRESET ...]        (default qwen3-30b-a3b mixtral-8x7b)
#   FP4CL_GPU_BUILD    the build folder (default /tmp/fp4cl-gpu-build)
#   FP4CL_DEB_DIR      as in sweep-split.sh ("-": the environment is set already)
#   FP4CL_SWEEP_MMA    "tile_m:local_i:local_h:split_k[:few_split_k[:stage[:warp_tiles]]] ..." (default "32:32:32:1
#                      32:64:64:1 32:64:64:2 16:32:32:1 64:32:32:1 32:256:256:1:0:1": the built-in tiles,
#                      2 row tiles, a K split, other tile sizes, 8 row tiles staged); a setting with '=' is
#                      taken as FP4CL_MOE_TILES text as it is (e.g. mma.row_loop=2,mma.unroll=4)
#   FP4CL_SWEEP_TOKENS (default 1,8,64,512)
#   FP4CL_SWEEP_SCHEME (default nvfp4-w4a16)
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
gpu_host_env "${FP4CL_DEB_DIR:-$root/.device-deps/debs}"
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(qwen3-30b-a3b mixtral-8x7b)
settings=${FP4CL_SWEEP_MMA:-"32:32:32:1 32:64:64:1 32:64:64:2 16:32:32:1 64:32:32:1 32:256:256:1:0:1"}
tokens=${FP4CL_SWEEP_TOKENS:-1,8,64,512}
scheme=${FP4CL_SWEEP_SCHEME:-nvfp4-w4a16}
list=""
for s in $settings; do
  if [[ $s == *=* ]]; then
    tiles=$s
  else
    IFS=: read -r tm li lh sk fk st wt <<<"$s"
    tiles="mma.tile_m=$tm,mma.local_i=$li,mma.local_h=$lh,mma.split_k=$sk${fk:+,mma.few_split_k=$fk}${st:+,mma.stage=$st}"
    tiles+="${wt:+,mma.warp_tiles=$wt}"
  fi
  list+="${list:+;}$tiles"
done
for preset in "${presets[@]}"; do
  echo "== $preset $scheme (rows, then each row's command)"
  "$bench" moe --preset "$preset" --tokens "$tokens" --scheme "$scheme" --kernel mma --no-check --iters 10 --warmup 2 \
    --tiles "$list" 2>/dev/null | grep -E '^ *[0-9]+ +moe|^ +\$ ' | sed 's/^/   /'
done
