#!/usr/bin/env bash
# Per-command breakdown of fp4cl's decode calls on a GPU host (the lent H100): builds fp4cl-bench
# (and, with FP4CL_GPU_TESTS=REGEX, the tests, running the gtest cases matching REGEX), then times
# the MoE presets at T = 1 and 8 and the linear decode shapes with --launches, which prints each
# command's median start and duration (where the time goes: kernels or the gaps between them).
#
#   bench/gpu/profile.sh [DEB_DIR] [OUT_DIR]      (arguments as bench/gpu/run-h100.sh)
#   FP4CL_GPU_SCHEMES   schemes (default nvfp4-w4a16,nvfp4-w4a4)
#   FP4CL_GPU_KERNEL    MoE strategy to force (default: automatic)
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
deb_dir=${1:-$root/.device-deps/debs}
out=${2:-${OUT:-$root/build-gpu-out}}
schemes=${FP4CL_GPU_SCHEMES:-nvfp4-w4a16,nvfp4-w4a4}
mkdir -p "$out"
gpu_host_env "$deb_dir"
targets=(--target fp4cl_bench)
[ -n "${FP4CL_GPU_TESTS:-}" ] && targets=()
gpu_build "$out" "${targets[@]}"
if [ -n "${FP4CL_GPU_TESTS:-}" ]; then
  log "tests matching ${FP4CL_GPU_TESTS}"
  (cd "$build" && ctest -j8 --timeout 300 -R "$FP4CL_GPU_TESTS" >"$out/ctest.log" 2>&1)
  ctest_summary "$out/ctest.log" 30
fi
kernel=()
[ -n "${FP4CL_GPU_KERNEL:-}" ] && kernel=(--kernel "$FP4CL_GPU_KERNEL")
for preset in qwen3-30b-a3b mixtral-8x7b; do
  log "moe $preset"
  "$bench" moe --preset "$preset" --tokens 1,8 --scheme "$schemes" "${kernel[@]}" --iters 30 --warmup 3 --launches \
    2>"$out/moe-$preset.launches" | tee "$out/moe-$preset.txt" | grep -E "^ *[0-9]+ +moe" >&2
  cat "$out/moe-$preset.launches" >&2
done
log "linear"
for nk in "4096 4096" "2048 768"; do
  set -- $nk
  "$bench" linear -n "$1" -k "$2" --tokens 1,8 --scheme "$schemes" --iters 30 --warmup 3 --launches \
    2>"$out/linear-$1x$2.launches" | tee "$out/linear-$1x$2.txt" | grep -E "^ *[0-9]+ +linear" >&2
done
log "done"
