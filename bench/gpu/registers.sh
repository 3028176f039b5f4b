#!/usr/bin/env bash
# The registers, local memory and spills of every kernel one bench command builds on NVIDIA's
# OpenCL, from the driver's own ptxas report (no CUDA toolkit needed), and for moe_mma.cl's kernels
# the work-groups a compute unit holds (bench/gpu/build_registers.py): builds fp4cl-bench, runs the
# command with an empty program cache, FP4CL_BUILD_FLAGS=-cl-nv-verbose, FP4CL_LOG=debug and
# CUDA_CACHE_DISABLE=1, and reads its log. What a count like this explained is in
# bench/gpu/h200/2026-12-03/README.md, section 11 (the token FC2's T = 6 / 7 step).
#
#   bench/gpu/registers.sh [DEB_DIR] [OUT_DIR]      (arguments as bench/gpu/run-h100.sh)
#   FP4CL_REGISTERS_BENCH  the bench command (default "moe --preset qwen3-30b-a3b --tokens 8
#                          --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 1 --warmup 0 --no-check"; add
#                          --tiles "A;B" for several settings' programs in one run)
#   FP4CL_REGISTERS_MATCH  keep kernels whose build options hold this text (default "": all)
# Outputs in OUT_DIR: registers.txt (one line a kernel), bench.log (the bench's debug log, gzipped).
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
deb_dir=${1:-$root/.device-deps/debs}
out=${2:-${OUT:-$root/build-gpu-out}}
default_args="moe --preset qwen3-30b-a3b --tokens 8 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 1 --warmup 0 --no-check"
bench_args=${FP4CL_REGISTERS_BENCH:-$default_args}
mkdir -p "$out"
gpu_host_env "$deb_dir"
gpu_build "$out" --target fp4cl_bench

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "bench $bench_args (empty program cache, -cl-nv-verbose)"
# shellcheck disable=SC2086  # the bench arguments are words
FP4CL_CACHE_DIR="$work/cache" CUDA_CACHE_DISABLE=1 FP4CL_BUILD_FLAGS=-cl-nv-verbose FP4CL_LOG=debug \
  "$bench" $bench_args >"$work/bench.out" 2>"$work/bench.log" || { tail -20 "$work/bench.log"; exit 1; }
gzip -c "$work/bench.log" >"$out/bench.log.gz"
python3 "$root/bench/gpu/build_registers.py" "$work/bench.log" --match="${FP4CL_REGISTERS_MATCH:-}" \
  >"$out/registers.txt" || exit 1
log "$(wc -l <"$out/registers.txt") kernels: $out/registers.txt"
