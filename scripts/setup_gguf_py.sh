#!/usr/bin/env bash
# The `gguf` Python package (llama.cpp's own GGUF reader, writer and quantizers; pure Python, MIT) from one
# pinned PyPI wheel, unpacked into .local/gguf-py (never installed, never vendored): the oracle of issue #29's
# GGUF tests (tests/oracle/: a tiny GGUF written by gguf's writer and quantizers, a float64 NumPy forward fed
# by gguf's dequantizer). Runs under Debian's python3 with Debian's python3-numpy (scripts/setup.sh).
# Idempotent and quiet when the pinned version is present.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${MOCBENCH_GGUF_PY_PREFIX:-$PWD/.local/gguf-py}"
pin="gguf==0.19.0"
wheel="gguf-0.19.0-py3-none-any.whl"
sha="70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd"
stamp="$prefix/site/.mocbench-pin"
want="$pin $sha"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "setup_gguf_py: installing $pin into ${prefix#"$PWD"/}/site"
# shellcheck source=scripts/pinned_wheel.sh
. scripts/pinned_wheel.sh  # (the working folder is the repository root)
fetch_pinned_wheel setup_gguf_py "$prefix/wheels" "$pin" "$wheel" "$sha"

unpack_pinned_wheel "$pinned_wheel" "$prefix/site" gguf/ "$want"
