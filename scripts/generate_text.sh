#!/usr/bin/env bash
# Text in, text out, around `mocbench generate` (which takes and gives token ids): the prompt tokenized with the
# model's own tokenizer (scripts/tokenize_gguf.py: a GGUF's BPE or a folder's tokenizer.json, through Hugging
# Face's `tokenizers`; mocbench has no tokenizer of its own for published models, by design), the ids generated,
# then prompt and continuation decoded the same way. Needs scripts/setup.sh's tokenizers wheel (and, for GGUF
# models, scripts/setup_gguf_py.sh's gguf package).
# Usage: scripts/generate_text.sh MODEL "PROMPT" [mocbench generate options: -n 32 --device cuda --ffn moc --k 0.5
#        --temperature 0.8 --seed 1 ...]
# MOCBENCH: the mocbench binary (default: build/default/app/mocbench).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
model=$1 prompt=$2
shift 2
mocbench=${MOCBENCH:-$root/build/default/app/mocbench}
py() { PYTHONPATH="$root/.local/gguf-py/site:$root/.local/tokenizers-py/site" /usr/bin/python3 "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s' "$prompt" > "$tmp/prompt.txt"
py "$root/scripts/tokenize_gguf.py" "$model" "$tmp/ids.txt" "$tmp/prompt.txt" --no-eos 2>/dev/null
ids=$(cat "$tmp/ids.txt")
out=$("$mocbench" generate "$model" --ids "$ids" --format json "$@")
gen=$(printf '%s' "$out" | py -c 'import json, sys; print(" ".join(map(str, json.load(sys.stdin)["ids"])))')
py "$root/scripts/tokenize_gguf.py" "$model" --decode "$ids $gen"
echo
