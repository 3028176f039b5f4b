#!/usr/bin/env bash
# One command for the GPU-performance numbers of the README ("GPU performance"): on a host with
# an NVIDIA GPU, its OpenCL driver and PyTorch (the lent H100), it builds fp4cl, optionally runs
# the test suite, measures the copy bandwidth, times fp4cl's MoE layer (qwen3-30b-a3b and
# mixtral-8x7b, T = 1, 8, 64, 512, NVFP4 W4A16 and W4A4) and linear layers, times the same MoE
# layer in PyTorch BF16 (bench/gpu/torch_moe_baseline.py), and writes the summary table.
#
#   bench/gpu/run-h100.sh [DEB_DIR] [OUT_DIR]
#     DEB_DIR  Debian packages for a host without apt (see tools/gpu-host-env.sh); default
#              .device-deps/debs; "-" when the headers and libraries are installed
#     OUT_DIR  default $OUT, else build-gpu-out (git-ignored)
#   FP4CL_GPU_CTEST=1   also run ctest (-j8) and keep its log and summary
#   FP4CL_GPU_POCL_CTEST=1  also run ctest on the host's own CPU OpenCL (its system ICDs, e.g. a
#                       PoCL of another version than CI's: on 2026-11-29 the lent H200's PoCL 5.0
#                       with LLVM 16 found the AVX-512 BF16 builtins' changed operand type),
#                       FP4CL_DEVICE=cpu, log ctest-cpu.log
#   FP4CL_GPU_BUILD     build folder (default /tmp/fp4cl-gpu-build)
#   FP4CL_GPU_PARTS     what to measure (default "torch moe linear floor"; e.g. "linear" alone;
#                       floor: bench/standalone/launch_floor.c, the fastest one or two kernels read
#                       the decode layers' bytes; router (not in the default): decode calls with
#                       router logits routed by the router kernel against FC1 itself,
#                       mma.route_logits 1, 2 and 0 (the automatic choice), qwen3-30b-a3b,
#                       mixtral-8x7b and deepseek-v3, T = 1, 2, 4, 8, into router-PRESET.csv)
#   FP4CL_GPU_BUNDLE    a .tar.gz path: after each part, everything in OUT_DIR so far is packed into
#                       it (one file to fetch where a lent machine returns few, e.g. 8: a call
#                       stopped at its limit still leaves the finished parts)
# Outputs: moe.csv, moe-all.csv (every strategy, FP4CL_GPU_SWEEP=0 skips it), linear.csv (fp4cl-bench --csv;
# automatic selection: mma where the MMA is native, else gemv_split for decode and gemm_tiled for prefill), linear-all.csv (the
# linear decode strategies forced, 4096x4096; FP4CL_GPU_SWEEP=0 skips it), torch.csv, devices.txt, results.md
# (bench/gpu/summarize.py), launch_floor.txt, build.log, ctest.log.
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
deb_dir=${1:-$root/.device-deps/debs}
out=${2:-${OUT:-$root/build-gpu-out}}
mkdir -p "$out"
gpu_host_env "$deb_dir"
parts=" ${FP4CL_GPU_PARTS:-torch moe linear floor} "
part() { [[ "$parts" == *" $1 "* ]]; }
# FP4CL_GPU_BUNDLE: OUT_DIR as it stands, packed.
bundle() {
  if [ -n "${FP4CL_GPU_BUNDLE:-}" ]; then
    tar czf "$FP4CL_GPU_BUNDLE" --exclude="$(basename "$FP4CL_GPU_BUNDLE")" -C "$out" . || log "bundle failed"
  fi
}

gpu_build "$out" --target fp4cl_bench
tail -3 "$out/build.log" >&2

log "devices"
"$bench" devices --measure >"$out/devices.txt" 2>&1
cat "$out/devices.txt" >&2

if part torch; then
  log "torch baseline and copy bandwidth"
  python3 "$root/bench/gpu/torch_moe_baseline.py" >"$out/torch.csv" || log "torch baseline failed"
fi
bundle

if part floor; then
  log "launch floor (bench/standalone/launch_floor.c)"
  # The copy bandwidth of the PyTorch run when there is one (GB/s), else launch_floor's default.
  copy_gbps=$(awk -F, '$1 == "copy" { printf "%.0f", $8 / 1e9 }' "$out/torch.csv" 2>/dev/null)
  if cc -O2 "$root/bench/standalone/launch_floor.c" -o "$build/launch_floor" \
      ${CMAKE_PREFIX_PATH:+-L"$CMAKE_PREFIX_PATH/lib/x86_64-linux-gnu"} -lOpenCL >"$out/launch_floor.log" 2>&1; then
    "$build/launch_floor" "${copy_gbps:-2970}" 100 >"$out/launch_floor.txt" 2>>"$out/launch_floor.log" ||
      log "launch_floor failed (launch_floor.log)"
  else
    log "launch_floor did not build (launch_floor.log)"
  fi
fi
bundle

if part moe; then
  log "fp4cl MoE"
  rm -f "$out/moe.csv"
  for preset in qwen3-30b-a3b mixtral-8x7b; do
    "$bench" moe --preset "$preset" --tokens 1,8,64,512 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 50 --warmup 3 \
      --csv >"$out/moe-$preset.csv" || log "moe $preset failed"
    csv_append "$out/moe-$preset.csv" "$out/moe.csv"
  done

  if [ "${FP4CL_GPU_SWEEP:-1}" = 1 ]; then
    log "fp4cl MoE, every strategy (where the automatic choice switches)"
    rm -f "$out/moe-all.csv"
    for preset in qwen3-30b-a3b mixtral-8x7b; do
      "$bench" moe --preset "$preset" --tokens 1,8,64 --scheme nvfp4-w4a16 --kernel all --iters 20 --warmup 2 \
        --csv >"$out/moe-part.csv" || log "moe --kernel all $preset failed"
      csv_append "$out/moe-part.csv" "$out/moe-all.csv"
    done
  fi
fi
bundle

if part router; then
  log "fp4cl MoE with router logits: the router kernel (mma.route_logits=1), FC1 (=2), the automatic choice (=0)"
  for preset in qwen3-30b-a3b mixtral-8x7b deepseek-v3; do
    "$bench" moe --preset "$preset" --tokens 1,2,4,8 --scheme nvfp4-w4a16,nvfp4-w4a4 --router logits \
      --tiles "mma.route_logits=1;mma.route_logits=2;mma.route_logits=0" --iters 50 --warmup 3 --csv \
      >"$out/router-$preset.csv" || log "moe --router logits $preset failed"
  done
fi
bundle

if part linear; then
  log "fp4cl linear"
  rm -f "$out/linear.csv"
  for nk in "4096 4096" "2048 768" "1536 2048" "28672 4096"; do
    set -- $nk
    "$bench" linear -n "$1" -k "$2" --tokens 1,8,512 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 50 --warmup 3 \
      --csv >"$out/linear-part.csv" || log "linear $1x$2 failed"
    csv_append "$out/linear-part.csv" "$out/linear.csv"
  done

  if [ "${FP4CL_GPU_SWEEP:-1}" = 1 ]; then
    log "fp4cl linear, every strategy forced (4096x4096: mma against gemv_split / gemm_tiled)"
    "$bench" linear -n 4096 -k 4096 --tokens 1,4,8,16,32,64 --scheme nvfp4-w4a16,nvfp4-w4a4 \
      --kernel mma,gemv_split,gemv_rows,gemm_tiled --iters 30 --warmup 2 --csv >"$out/linear-all.csv" || log "linear --kernel sweep failed"
  fi
fi
bundle

python3 "$root/bench/gpu/summarize.py" "$out" >"$out/results.md" && cat "$out/results.md" >&2
bundle

if [ "${FP4CL_GPU_CTEST:-0}" = 1 ]; then
  log "build the tests"
  cmake --build "$build" -j"$(nproc)" >>"$out/build.log" 2>&1 || grep -E "error|Error" "$out/build.log" | head -20 >&2
  log "ctest"
  # Within FP4CL_GPU_DEADLINE seconds of the script's start when set (a lent machine's call limit).
  budget=$(( ${FP4CL_GPU_DEADLINE:-100000} - SECONDS ))
  (cd "$build" && timeout "$budget" ctest -j8 --timeout 300 >"$out/ctest.log" 2>&1)
  ctest_summary "$out/ctest.log" 40
fi
bundle
if [ "${FP4CL_GPU_POCL_CTEST:-0}" = 1 ]; then
  log "build the tests"
  cmake --build "$build" -j"$(nproc)" >>"$out/build.log" 2>&1 || grep -E "error|Error" "$out/build.log" | head -20 >&2
  log "ctest on the host's CPU OpenCL (ICDs: $(cd /etc/OpenCL/vendors 2>/dev/null && echo *))"
  budget=$(( ${FP4CL_GPU_DEADLINE:-100000} - SECONDS ))
  (cd "$build" && OCL_ICD_VENDORS=/etc/OpenCL/vendors FP4CL_DEVICE=cpu FP4CL_CACHE_DIR="$build/cpu-cache" \
    timeout "$budget" ctest -j"$(nproc)" --timeout 300 >"$out/ctest-cpu.log" 2>&1)
  ctest_summary "$out/ctest-cpu.log" 40
fi
bundle
log "done"
