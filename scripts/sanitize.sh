#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of the host code (CPU backend; no CUDA, no GUI) and
# every test under it. Usage: scripts/sanitize.sh [ctest arguments, e.g. -R Cli]
# Findings fail the test that hit them (UBSan does not recover; ASan aborts on the first error).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOCBENCH_CUDA=OFF -DMOCBENCH_GUI=OFF \
  -DMOCBENCH_SANITIZE=ON >/dev/null
cmake --build build/asan -j "$(nproc)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir build/asan -j "$(nproc)" --output-on-failure "$@"
