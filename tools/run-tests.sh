#!/usr/bin/env bash
# The whole test suite, as CI runs it (`.ci/run` and the README's second command call this after
# tools/install-deps.sh). Stages, each in its own build folder:
#   release  build/       Release, warnings as errors; ctest.
#   asan     build-asan/  GCC, -fsanitize=address,undefined at -O1 (no -g: a shorter cold build;
#                         frame pointers give the stack traces); the same ctest, every test under
#                         AddressSanitizer, LeakSanitizer and UBSan. Options and suppressions are
#                         compiled into the binaries (tools/sanitizers/). Warnings are the
#                         release stage's job (instrumented code gives GCC false positives).
#   fuzz     build-fuzz/  clang-14 with libFuzzer + ASan + UBSan; each target in fuzz/ runs for
#                         FP4CL_FUZZ_SECONDS (default 60) from seeds the library's writers make,
#                         FP4CL_FUZZ_JOBS (default nproc) targets side by side.
# Environment: FP4CL_TEST_STAGES (default "release asan fuzz") picks stages, in that order;
# FP4CL_FUZZ_SECONDS; FP4CL_JOBS (default nproc). Stops at the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."

stages=${FP4CL_TEST_STAGES:-release asan fuzz}
jobs=${FP4CL_JOBS:-$(nproc)}
fuzz_seconds=${FP4CL_FUZZ_SECONDS:-60}

stage_banner() { printf '\n=== fp4cl tests: %s (%s) ===\n' "$1" "$(date -u +%H:%M:%S)"; }

run_release() {
  stage_banner "release: build/, -Werror"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFP4CL_WERROR=ON
  cmake --build build -j"$jobs"
  ctest --test-dir build --output-on-failure -j"$jobs"
}

run_asan() {
  stage_banner "asan: build-asan/, AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_FLAGS_RELEASE=-O1 \
    -DFP4CL_SANITIZE=address,undefined
  cmake --build build-asan -j"$jobs"
  # Tests that cannot run under the sanitizers carry the label no_asan (install_package and
  # python_binding: uninstrumented programs, the Python interpreter and an outside project, that
  # load the sanitized libfp4cl.so; soak_short_detects_leak: ASan's quarantine hides the leak
  # it must see in the resident set).
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE no_asan
}

run_fuzz() {
  stage_banner "fuzz: build-fuzz/, libFuzzer ${fuzz_seconds}s per target"
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
    -DCMAKE_C_FLAGS_RELEASE=-O1 -DFP4CL_BUILD_TESTS=OFF -DFP4CL_FUZZ=ON -DFP4CL_SANITIZE=address,undefined
  cmake --build build-fuzz -j"$jobs" --target fp4cl_fuzzers
  bash fuzz/run-fuzzers.sh build-fuzz "$fuzz_seconds"
}

for stage in $stages; do
  case $stage in
    release) run_release ;;
    asan) run_asan ;;
    fuzz) run_fuzz ;;
    *) echo "fp4cl: unknown test stage '$stage' (release, asan, fuzz)" >&2; exit 2 ;;
  esac
done
stage_banner "all stages passed: $stages"
