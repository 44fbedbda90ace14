#!/usr/bin/env bash
# Hugging Face's `tokenizers` (Apache-2.0) from one pinned PyPI wheel, unpacked into .local/tokenizers-py (never
# installed as a Python package, never vendored): scripts/tokenize_gguf.py runs a model's own tokenizer with it
# (a GGUF's byte-level BPE, a Hugging Face folder's tokenizer.json), and tests/test_tokenize_script.cpp checks
# that script in CI. ~3 MB. Runs under Debian's python3. Idempotent and quiet when the pinned version is present.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pinned_wheel.sh
. scripts/pinned_wheel.sh

tok=.local/tokenizers-py/site
pin="tokenizers==0.23.3"
if [ -f "$tok/.mocbench-pin" ] && [ "$(cat "$tok/.mocbench-pin")" = "$pin" ]; then
  exit 0
fi
echo "setup_tokenizers_py: installing $pin into $tok"
fetch_pinned_wheel setup_tokenizers_py .local/tokenizers-py/wheels "$pin" \
  "tokenizers-0.23.3-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl" \
  376851d22bcf9d650a5c3090bb83e6cf9e895fbf0595369fa4cd43c1f69b5f87 --platform manylinux2014_x86_64 --python-version 3.11
unpack_pinned_wheel "$pinned_wheel" "$tok" tokenizers/ "$pin"
