#!/usr/bin/env bash
# Set up, build and run every test. Usage: scripts/test.sh [preset]   (default: default)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
export PATH="/usr/local/cuda/bin:$PATH"
scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" -j "$(nproc)"
# The fuzz targets (issue #16): build them and fuzz each for a bounded 20 s with ASan + UBSan (tests/fuzz/README.md).
scripts/fuzz.sh smoke
