#!/usr/bin/env bash
# The machine code of fp4cl's programs on an NVIDIA GPU: builds fp4cl-bench, runs one bench command
# with an empty program cache, unpacks the cache (cache_entries.py: each program's build options
# and PTX) and, with CUDA's ptxas and cuobjdump (on PATH, under /usr/local/cuda*/bin, or
# FP4CL_CUDA_BIN), assembles each PTX for the device's architecture: its registers, shared memory
# and spills (ptxas -v), its SASS, and the SASS's opcode counts. What counting the qwen3 decode
# FC1's instructions a chunk found is in bench/gpu/history-2026-11.md (2026-11-29, sixth session).
#
#   bench/gpu/sass.sh [DEB_DIR] [OUT_DIR]      (arguments as bench/gpu/run-h100.sh)
#   FP4CL_SASS_BENCH   the bench command (default "moe --preset qwen3-30b-a3b --tokens 8
#                      --scheme nvfp4-w4a16 --iters 3 --no-check")
#   FP4CL_SASS_MATCH   keep programs whose key holds this text (default moe_mma.cl's FC1 and FC2:
#                      "MMA_F"; "" keeps all)
#   FP4CL_SASS_ARCH    ptxas -arch (default sm_90: H100, H200)
# Outputs in OUT_DIR: sass.tgz (entries/eNNN.{key,ptx,ptxas.log,sass,ops,loops}: .loops each loop's
# instructions by the pipe they issue to, bench/gpu/sass_loops.py), programs.txt (one line a
# program: options, registers, spills, its loop with the most HMMA), bench.log. One archive, for
# hosts that return few files.
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
deb_dir=${1:-$root/.device-deps/debs}
out=${2:-${OUT:-$root/build-gpu-out}}
bench_args=${FP4CL_SASS_BENCH:-moe --preset qwen3-30b-a3b --tokens 8 --scheme nvfp4-w4a16 --iters 3 --no-check}
match=${FP4CL_SASS_MATCH-MMA_F}
arch=${FP4CL_SASS_ARCH:-sm_90}
mkdir -p "$out"
gpu_host_env "$deb_dir"
gpu_build "$out" --target fp4cl_bench

tool() {  # the path of CUDA tool $1, or nothing
  local d
  for d in ${FP4CL_CUDA_BIN:-} $(dirname "$(command -v "$1" 2>/dev/null || echo /nonexistent/x)") /usr/local/cuda*/bin; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return; }
  done
}
ptxas=$(tool ptxas)
cuobjdump=$(tool cuobjdump)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "bench $bench_args (empty program cache)"
# shellcheck disable=SC2086  # the bench arguments are words
FP4CL_CACHE_DIR="$work/cache" "$bench" $bench_args >"$out/bench.log" 2>&1 || { tail -20 "$out/bench.log"; exit 1; }
match_args=()
[ -n "$match" ] && match_args=("--match=$match")  # = : a text may start with -
python3 "$root/bench/gpu/cache_entries.py" "$work/cache" "$work/entries" "${match_args[@]}" >"$work/index.txt" ||
  log "some cache entries did not parse (named above)"
if [ -z "$ptxas" ] || [ -z "$cuobjdump" ]; then
  log "no ptxas / cuobjdump found (FP4CL_CUDA_BIN): the PTX only"
fi
: >"$out/programs.txt"
while read -r entry _file _size _bytes kernels options; do
  stem="$work/entries/$entry"
  line="$entry $kernels $options"
  if [ -f "$stem.ptx" ] && [ -n "$ptxas" ]; then
    if "$ptxas" -arch="$arch" -v -o "$stem.cubin" "$stem.ptx" >"$stem.ptxas.log" 2>&1; then
      line="$line | $(grep -o 'Used [0-9]* registers.*' "$stem.ptxas.log" | head -1); $(grep -o '[0-9]* bytes spill stores' "$stem.ptxas.log" | head -1)"
      if [ -n "$cuobjdump" ]; then
        "$cuobjdump" -sass "$stem.cubin" >"$stem.sass" 2>&1
        # opcode counts over the whole program (predicates and modifiers dropped)
        grep -oP '^\s+/\*[0-9a-f]+\*/\s+\K[^;]*' "$stem.sass" |
          awk '{op = $1; if (op ~ /^@/) op = $2; sub(/\..*/, "", op); n[op]++} END {for (o in n) print n[o], o}' |
          sort -rn >"$stem.ops"
        # each loop's instructions by pipe; the line gets the loop with the most HMMA
        python3 "$root/bench/gpu/sass_loops.py" "$stem.sass" >"$stem.loops" 2>&1
        hot=$(python3 "$root/bench/gpu/sass_loops.py" "$stem.sass" --hottest 2>/dev/null)
        [ -n "$hot" ] && line="$line | $hot"
      fi
      rm -f "$stem.cubin"
    else
      line="$line | ptxas failed: $(tail -1 "$stem.ptxas.log")"
    fi
  fi
  echo "$line" >>"$out/programs.txt"
done <"$work/index.txt"
tar czf "$out/sass.tgz" -C "$work" entries
log "$(wc -l <"$out/programs.txt") programs: $out/programs.txt, $out/sass.tgz"
