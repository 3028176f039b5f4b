# shellcheck shell=bash
# What the bench/gpu scripts share, sourced after `set -uo pipefail`:
#   . "$(dirname "$0")/common.sh"
# It sets root (the repository), build (FP4CL_GPU_BUILD, default /tmp/fp4cl-gpu-build) and bench
# (fp4cl-bench in it), and defines
#   gpu_host_env DEB_DIR      unpacks DEB_DIR's Debian packages and exports their environment
#                             (tools/gpu-host-env.sh); "-": the environment is set already
#   gpu_build OUT [ARGS...]   configures and builds $build (Release, -DFP4CL_WERROR=ON, cmake
#                             --build ARGS), its output in OUT/build.log; on failure prints the
#                             log's tail and exits 1
#   log MESSAGE...            a line on stderr, stamped with the UTC time
#   ctest_summary LOG N       the last N summary and failure lines of ctest's LOG, on stderr
#   csv_append PART ALL       appends CSV file PART to ALL (its header only when ALL is new), then
#                             removes PART
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${FP4CL_GPU_BUILD:-/tmp/fp4cl-gpu-build}
# shellcheck disable=SC2034  # read by the scripts that source this one
bench="$build/bench/fp4cl-bench"

gpu_host_env() {
  if [ "$1" != "-" ]; then eval "$(bash "$root/tools/gpu-host-env.sh" "$1" /tmp/fp4cl-deps)"; fi
}

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

gpu_build() {
  local out=$1
  shift
  log "build ($build)"
  { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFP4CL_WERROR=ON &&
    cmake --build "$build" -j"$(nproc)" "$@"; } >"$out/build.log" 2>&1 || { tail -60 "$out/build.log"; exit 1; }
}

ctest_summary() {
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Not Run" "$1" | tail -"$2" >&2
}

csv_append() {
  if [ -f "$2" ]; then tail -n +2 "$1" >>"$2"; else cp "$1" "$2"; fi
  rm -f "$1"
}
