#!/usr/bin/env bash
# Runs every libFuzzer target of a FP4CL_FUZZ build for a bounded time:
#   fuzz/run-fuzzers.sh BUILD_DIR [SECONDS_PER_TARGET (default 60)] [TARGET...]
# Targets run side by side, FP4CL_FUZZ_JOBS at a time (default nproc; each target is one process
# on one core, so this keeps each target's time and shortens the stage).
# Seeds are written fresh by fp4cl_fuzz_seeds (the library's own model writer and quantizer);
# regressions/<target>/ holds every input that once found a bug. New coverage goes to
# BUILD_DIR/fuzz/corpus/<target>/ (kept between runs), a crash to BUILD_DIR/fuzz/artifacts/.
# Exits non-zero when a target finds something: add the artifact to regressions/<target>/, then
# fix the bug with a regression test under tests/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run-fuzzers.sh BUILD_DIR [SECONDS] [TARGET...]}" && pwd)
seconds=${2:-60}
shift $(($# < 2 ? $# : 2))
targets=("$@")
((${#targets[@]})) || targets=(safetensors_header quant_config checkpoint_dir moe_routing)

bin=$build/fuzz
"$bin/fp4cl_fuzz_seeds" "$bin/seeds" "$here/../tests/checkpoint_config/data" >/dev/null
mkdir -p "$bin/artifacts"

declare -A dict=([safetensors_header]=json.dict [quant_config]=json.dict [checkpoint_dir]=json.dict)
parallel=${FP4CL_FUZZ_JOBS:-$(nproc)}

# Fuzzes target $1; its log in artifacts/$1.log, "ok" or "FAILED" in artifacts/$1.status.
fuzz_target() {
  local t=$1 log=$bin/artifacts/$1.log
  mkdir -p "$bin/corpus/$t"
  local args=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
              -artifact_prefix="$bin/artifacts/$t-")
  [[ -n ${dict[$t]:-} ]] && args+=(-dict="$here/${dict[$t]}")
  if "$bin/fuzz_$t" "${args[@]}" "$bin/corpus/$t" "$bin/seeds/$t" "$here/regressions/$t" >"$log" 2>&1; then
    echo ok >"$bin/artifacts/$t.status"
  else
    echo FAILED >"$bin/artifacts/$t.status"
  fi
}

for t in "${targets[@]}"; do
  rm -f "$bin/artifacts/$t.status"
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  echo "fuzz: $t for ${seconds}s" >&2
  fuzz_target "$t" &
done
wait

failed=()
summary=()
for t in "${targets[@]}"; do
  log=$bin/artifacts/$t.log
  status=$(cat "$bin/artifacts/$t.status" 2>/dev/null || echo FAILED)
  if [[ $status != ok ]]; then
    failed+=("$t")
    tail -n 60 "$log" >&2
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | cut -d' ' -f2 || true)  # none: it stopped before its first run
  corpus=$(find "$bin/corpus/$t" -type f | wc -l)
  summary+=("$(printf '%-20s %-7s %10s runs %8s exec/s  cov %6s  corpus %5s' "$t" "$status" "${runs:-?}" "${rate:-?}" "${cov:-?}" "$corpus")")
done
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}; inputs in $bin/artifacts/ (logs there too)" >&2
  exit 1
fi
