#!/usr/bin/env bash
# Sweeps the split strategy's work-group geometry on a GPU host (after bench/gpu/profile.sh has
# built fp4cl-bench): FC1 work-group size × rows per lane group (split.local_i, split.tile_m) and
# FC2 work-group size (split.local_h), through FP4CL_MOE_TILES, printing each setting's median
# µs per call and per command (fp4cl-bench --launches). NVFP4 W4A16, T = 1 and 8.
#
#   bench/gpu/sweep-split.sh [PRESET ...]      (default qwen3-30b-a3b)
#   FP4CL_GPU_BUILD   the build folder (default /tmp/fp4cl-gpu-build)
#   FP4CL_DEB_DIR     Debian packages as for bench/gpu/run-h100.sh (default .device-deps/debs; "-":
#                     the environment is set already): the NVIDIA ICD comes from there
#   FP4CL_SWEEP_FC1   "local_i:tile_m ..." (default "128:1 256:1 512:1 128:2 256:2 128:4 256:4")
#   FP4CL_SWEEP_FC2   "local_h ..." (default "64 128 256 512")
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
gpu_host_env "${FP4CL_DEB_DIR:-$root/.device-deps/debs}"
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(qwen3-30b-a3b)
fc1=${FP4CL_SWEEP_FC1:-"128:1 256:1 512:1 128:2 256:2 128:4 256:4"}
fc2=${FP4CL_SWEEP_FC2:-"64 128 256 512"}
one() {  # preset, tiles
  echo "== $1 FP4CL_MOE_TILES=$2"
  FP4CL_MOE_TILES=$2 "$bench" moe --preset "$1" --tokens 1,8 --scheme nvfp4-w4a16 --kernel split --no-check \
    --iters 20 --warmup 3 --launches 2>&1 >/dev/null | grep -E "us from|moe_split" | sed 's/^/   /'
}
for preset in "${presets[@]}"; do
  for c in $fc1; do one "$preset" "split.local_i=${c%%:*},split.tile_m=${c##*:}"; done
  for h in $fc2; do one "$preset" "split.local_h=$h"; done
done
