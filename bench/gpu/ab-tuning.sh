#!/usr/bin/env bash
# A/B of tuning databases on one build (a database edit's before and after, e.g. a new bucket):
# each fp4cl-bench command runs once per database in its own process, ROUNDS rounds, the order
# rotated each round (database 1 first in round 1, database 2 first in round 2, ...). Every row is
# printed as it comes, so a call cut by its time limit keeps what ran.
#
#   bench/gpu/ab-tuning.sh DATABASES [DEB_DIR] [OUT_DIR]     (DEB_DIR, OUT_DIR as bench/gpu/run-h100.sh;
#                                                          DEB_DIR "-": the environment is set already)
#   DATABASES         comma-separated: a tuning file (merged over the shipped ones, as
#                     FP4CL_TUNING_FILE), "shipped" (the shipped databases alone) or "none" (the
#                     built-in defaults); the user's ~/.config/fp4cl/tuning.json is never read
#   FP4CL_AB_ROUNDS   rounds (default 3)
#   FP4CL_AB_BENCH    fp4cl-bench commands separated by ';' (default: qwen3-30b-a3b T = 1..8 and
#                     mixtral-8x7b T = 1, 8, NVFP4 W4A16 and W4A4)
#   FP4CL_GPU_BUILD   the build (default /tmp/fp4cl-gpu-build)
# Outputs in OUT_DIR: ab.csv (every row with its database and round: bench/gpu/ab_table.py
# append; a file's database is named by its file name), ab.md (each row's medians side by side:
# ab_table.py table), build.log.
set -uo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
IFS=',' read -r -a databases <<<"${1:?usage: bench/gpu/ab-tuning.sh DATABASES [DEB_DIR] [OUT_DIR]}"
deb_dir=${2:-$root/.device-deps/debs}
out=${3:-${OUT:-$root/build-gpu-out}}
rounds=${FP4CL_AB_ROUNDS:-3}
commands=${FP4CL_AB_BENCH:-"moe --preset qwen3-30b-a3b --tokens 1,2,3,4,5,6,7,8 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 20;\
moe --preset mixtral-8x7b --tokens 1,8 --scheme nvfp4-w4a16,nvfp4-w4a4 --iters 10"}
((${#databases[@]} >= 2)) || { echo "ab-tuning.sh: name at least two databases, got '$1'" >&2; exit 1; }
names=()
for db in "${databases[@]}"; do
  case $db in
    shipped | none) names+=("$db") ;;
    *)
      [ -f "$db" ] || { echo "ab-tuning.sh: no tuning file '$db' (a file, shipped or none)" >&2; exit 1; }
      names+=("$(basename "$db")") ;;
  esac
done
[ "$(printf '%s\n' "${names[@]}" | sort -u | wc -l)" -eq "${#names[@]}" ] ||
  { echo "ab-tuning.sh: two databases share a name (${names[*]}); give the files different names" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out/ab.csv"
gpu_host_env "$deb_dir"
gpu_build "$out" --target fp4cl_bench
home=$(mktemp -d)  # no user database
trap 'rm -rf "$home"' EXIT
IFS=';' read -r -a lines <<<"$commands"
n=${#databases[@]}
for ((r = 1; r <= rounds; ++r)); do
  for c in "${lines[@]}"; do
    for ((i = 0; i < n; ++i)); do
      d=$(((r - 1 + i) % n))
      db=${databases[$d]}
      file=$db
      [ "$db" = shipped ] && file=
      log "round $r ${names[$d]}: $c"
      # shellcheck disable=SC2086  # the command is words
      HOME=$home XDG_CONFIG_HOME=$home FP4CL_TUNING_FILE=$file $bench $c --csv >"$out/part.csv" 2>"$out/part.log" ||
        { log "failed: $(tail -3 "$out/part.log")"; continue; }
      python3 "$root/bench/gpu/ab_table.py" append "$out/part.csv" "$out/ab.csv" "${names[$d]}" "$r" >&2 || exit 1
    done
  done
done
rm -f "$out/part.csv" "$out/part.log"
python3 "$root/bench/gpu/ab_table.py" table "$out/ab.csv" | tee "$out/ab.md"
