#!/usr/bin/env bash
# A/B of two source trees on a GPU host (a kernel change's before and after): the working tree
# ("new") and BASE_DIR ("base": another tree, e.g. made before the run with
#   git archive REV | tar -x -C .wt/base
# in a git-ignored folder carried to the host) built side by side, then ROUNDS rounds that run
# each bench command on both builds in turn (new first in odd rounds, base first in even ones).
# Every row is printed as it comes, so a call cut by its time limit keeps what ran.
#
#   bench/gpu/ab.sh BASE_DIR [DEB_DIR] [OUT_DIR]     (DEB_DIR, OUT_DIR as bench/gpu/run-h100.sh)
#   FP4CL_AB_ROUNDS   rounds (default 2)
#   FP4CL_AB_BENCH    fp4cl-bench commands separated by ';' (default: qwen3-30b-a3b T = 1, 2, 8 and
#                     mixtral-8x7b T = 1, 8, NVFP4 W4A16 and W4A4; linear 4096x4096 M = 1, 8, 512)
#   FP4CL_GPU_BUILD   the working tree's build (default /tmp/fp4cl-gpu-build); the base's is the
#                     same path with -base
# Outputs in OUT_DIR: ab.csv (every row with its tree and round: bench/gpu/ab_table.py append),
# ab.md (each row's medians side by side and their ratio: ab_table.py table), build.log,
# build-base.log.
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
base_src=$(cd "${1:?usage: bench/gpu/ab.sh BASE_DIR [DEB_DIR] [OUT_DIR]}" && pwd) || exit 1
deb_dir=${2:-$root/.device-deps/debs}
out=${3:-${OUT:-$root/build-gpu-out}}
rounds=${FP4CL_AB_ROUNDS:-2}
commands=${FP4CL_AB_BENCH:-"moe --preset qwen3-30b-a3b --tokens 1,2,8 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 20;\
moe --preset mixtral-8x7b --tokens 1,8 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 10;\
linear -n 4096 -k 4096 --tokens 1,8,512 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 20"}
[ -f "$base_src/CMakeLists.txt" ] || { echo "ab.sh: $base_src holds no source tree (no CMakeLists.txt)" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out/ab.csv"
gpu_host_env "$deb_dir"
base_build="$build-base"
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
log "builds: $build (new), $base_build (base, $base_src)"
{ cmake -S "$base_src" -B "$base_build" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$base_build" -j"$jobs" --target fp4cl_bench; } >"$out/build-base.log" 2>&1 &
base_pid=$!
gpu_build "$out" -j"$jobs" --target fp4cl_bench
wait "$base_pid" || { tail -40 "$out/build-base.log"; exit 1; }
IFS=';' read -r -a lines <<<"$commands"
for ((r = 1; r <= rounds; ++r)); do
  order=(new base)
  ((r % 2 == 0)) && order=(base new)
  for c in "${lines[@]}"; do
    for tree in "${order[@]}"; do
      b=$bench
      [ "$tree" = base ] && b="$base_build/bench/fp4cl-bench"
      log "round $r $tree: $c"
      # shellcheck disable=SC2086  # the command is words
      $b $c --csv >"$out/part.csv" 2>"$out/part.log" || { log "failed: $(tail -3 "$out/part.log")"; continue; }
      python3 "$root/bench/gpu/ab_table.py" append "$out/part.csv" "$out/ab.csv" "$tree" "$r" >&2 || exit 1
    done
  done
done
rm -f "$out/part.csv" "$out/part.log"
python3 "$root/bench/gpu/ab_table.py" table "$out/ab.csv" | tee "$out/ab.md"
