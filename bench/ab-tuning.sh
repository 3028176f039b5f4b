#!/usr/bin/env bash
# A/B of the tuning databases on this machine's default device: the linear shapes and MoE presets
# timed in alternating rounds with the databases (shipped ones plus FP4CL_TUNING_FILE or the
# user's) and with a baseline (FP4CL_AB_BASELINE: by default the built-in defaults alone,
# FP4CL_TUNING_FILE=none), one line per (shape,
# scheme, tokens): the kernel and median of each side in round order, then the ratio of their
# medians. The check before a tuned entry is shipped, or after one was (bench/README.md,
# "Tuning"). Rows are checked against the reference in the first round.
#
#   bench/ab-tuning.sh BUILD [ROUNDS] [SHAPES] [TOKENS] [SCHEMES]
#     BUILD    a build folder holding bench/fp4cl-bench
#     ROUNDS   alternating rounds (default 2)
#     SHAPES   NxK (a linear layer) or moe:PRESET (fp4cl-bench moe --preset), comma-separated
#              (default 28672x4096,4096x4096,2048x768)
#     TOKENS   token counts (default 1,8,64,512)
#     SCHEMES  default nvfp4-w4a16,nvfp4-w4a4
#   FP4CL_AB_BASELINE  what the other side runs: none (default: the built-in defaults alone),
#                      shipped (the shipped databases without a user file: is a candidate file,
#                      given as FP4CL_TUNING_FILE, better than what ships?), or a database file
#                      (the shipped ones plus it)
#   FP4CL_AB_ITERS     timed calls per row (default 30)
#   FP4CL_AB_ROUTINGS  routings an MoE row cycles through (default 16, as the tuner: one routing
#                      alone times one set of per-expert counts)
# Progress goes to stderr as it is measured: each fp4cl-bench call's rows, and after each round
# but the last the table of the rounds so far. So a run stopped by a time limit (a lent GPU's call)
# still leaves every finished round's comparison in its log.
set -euo pipefail
build=${1:?usage: bench/ab-tuning.sh BUILD [ROUNDS] [SHAPES] [TOKENS] [SCHEMES]}
rounds=${2:-2}
shapes=${3:-28672x4096,4096x4096,2048x768}
tokens=${4:-1,8,64,512}
schemes=${5:-nvfp4-w4a16,nvfp4-w4a4}
bench="$build/bench/fp4cl-bench"
[ -x "$bench" ] || { echo "ab-tuning.sh: no $bench (build the fp4cl_bench target first)" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ab-tuning.sh: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
raw=$(mktemp)
err=$(mktemp)
empty=$(mktemp)
trap 'rm -f "$raw" "$err" "$empty"' EXIT
# The baseline side's FP4CL_TUNING_FILE.
baseline=${FP4CL_AB_BASELINE:-none}
case "$baseline" in
  none) base_file=none ;;
  shipped)
    echo '{"schema": "fp4cl-tuning", "version": 1, "devices": []}' >"$empty"
    base_file=$empty ;;
  *)
    [ -f "$baseline" ] || { echo "ab-tuning.sh: FP4CL_AB_BASELINE '$baseline' is neither none, shipped nor a file" >&2; exit 2; }
    base_file=$baseline ;;
esac

# The comparison of the rows in $raw so far, as a Markdown table.
table() {
  echo "| shape | scheme | tokens | tuned: kernel, µs per round | baseline ($baseline): kernel, µs per round | tuned / baseline |"
  echo "|---|---|---:|---|---|---:|"
  python3 - "$raw" <<'PY'
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    side, shape, scheme, tokens, kernel, us = line.strip().split(",")
    rows.setdefault((shape, scheme, int(tokens)), {"tuned": [], "defaults": []})[side].append((kernel, float(us)))
for (shape, scheme, tokens), sides in rows.items():
    cells = []
    for side in ("tuned", "defaults"):
        kernels = sorted({k for k, _ in sides[side]})
        cells.append(f"{'/'.join(kernels)} " + " / ".join(f"{us:.1f}" for _, us in sides[side]))
    t = statistics.median(us for _, us in sides["tuned"])
    d = statistics.median(us for _, us in sides["defaults"])
    print(f"| {shape} | {scheme} | {tokens} | {cells[0]} | {cells[1]} | {t / d:.2f} |")
PY
}

for ((r = 1; r <= rounds; ++r)); do
  for side in tuned defaults; do
    for shape in ${shapes//,/ }; do
      if [[ "$shape" =~ ^([0-9]+)x([0-9]+)$ ]]; then
        what=(linear -n "${BASH_REMATCH[1]}" -k "${BASH_REMATCH[2]}")
      elif [[ "$shape" =~ ^moe:([a-z0-9.-]+)$ ]]; then
        what=(moe --preset "${BASH_REMATCH[1]}" --routings "${FP4CL_AB_ROUTINGS:-16}")
      else
        echo "ab-tuning.sh: shape '$shape' is neither NxK nor moe:PRESET" >&2
        exit 2
      fi
      env_file=()
      [ "$side" = defaults ] && env_file=(FP4CL_TUNING_FILE="$base_file")
      check=()
      [ "$r" -gt 1 ] && check=(--no-check)
      # CSV columns 2-6: shape, scheme, tokens, kernel, median µs (a failed check stops the run).
      out=$(env "${env_file[@]}" "$bench" "${what[@]}" --tokens "$tokens" --scheme "$schemes" \
        --iters "${FP4CL_AB_ITERS:-30}" "${check[@]}" --csv 2>"$err") ||
        { cat "$err" >&2; echo "ab-tuning.sh: fp4cl-bench ${what[*]} failed ($side, round $r)" >&2; exit 1; }
      rows=$(tail -n +2 <<<"$out" | cut -d, -f2-6 | sed "s/^/$side,/")
      echo "$rows" >>"$raw"
      echo "[ab-tuning $(date -u +%H:%M:%S)] round $r of $rounds, $side, $shape:" >&2
      mapfile -t lines <<<"$rows"
      printf '  %s\n' "${lines[@]}" >&2
    done
  done
  if [ "$r" -lt "$rounds" ]; then
    echo "[ab-tuning] after round $r of $rounds:" >&2
    table >&2
  fi
done
table
