#!/bin/bash
# Issue #26's closing run in one device call: the decode study (scenarios/decode_bs1_4.toml, measured and
# profiled), the PyTorch peer after it on the same GPU, the study's CSV export named for the GPU, the per-kernel
# roofline of every point and the profile-truth table (profiled busy time against the timed median). Everything
# lands in $OUT; summary.txt is the short version, printed last.
#
# On the device, repo root:  bench/tools/final_study.sh BUNDLE [PEER_BUDGET_S] [mocbench run filters ...]
#   BUNDLE: scripts/device_bundle.sh's build/cuda/dev.tar.xz, or an unpacked dev folder. PEER_BUDGET_S: the peer's
#   --budget-s (default 200; 0: no peer). Filters (e.g. --only batch=1) go to `mocbench run`; none: the whole study
#   (~195 s on an H200), which with the default peer budget fits one 600 s call.
# Then, here: cp FILES_AT/<gpu>_decode_bs1_4.csv bench/results/ (and the peer CSV to bench/peers/) and write the
# tables into bench/RESULTS.md with the device named.
# The device returns at most 8 files from $OUT, of 16 MiB at most: this script leaves 7 there (summary.txt, study.db
# -- xz-packed when larger than 15 MiB --, the export, the peer CSV, roofline.txt, truth.md, and the logs -- study,
# export, peer, nvidia-smi -- as one logs.tar.gz), so run it with $OUT otherwise empty (or OUT=$OUT/study and nothing
# else under $OUT); it says so when it finds more.
set -u
BUNDLE=${1:?bundle (.tar.xz or dev folder)}
PEER_BUDGET=${2:-200}
shift $(($# < 2 ? $# : 2))
FILTERS=("$@")
OUTD=${OUT:-/tmp/final_study}
SCENARIO=${SCENARIO:-scenarios/decode_bs1_4.toml}
[[ "$PEER_BUDGET" =~ ^[0-9]+$ ]] || { echo "final_study.sh: peer budget '$PEER_BUDGET' is not a number of seconds" >&2; exit 2; }
mkdir -p "$OUTD"
LOGS=$(mktemp -d)  # the logs, packed into $OUTD/logs.tar.gz at the end
source "$(dirname "$0")/bundle_dir.sh"
D=$(bundle_dir "$BUNDLE" build/final) || exit 1
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=${MOCBENCH_CACHE_DIR:-/tmp/cache}
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUTD/summary.txt"; }
: > "$OUTD/summary.txt"

# The GPU's short name for the export's file name: h100, h200, ... (cpu where there is none).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
tag=$(echo "$gpu" | grep -oiE '\b[A-Z]{1,2}[0-9]{2,4}\b' | head -1 | tr 'A-Z' 'a-z')
[ -n "$tag" ] || tag=cpu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$LOGS/gpu.txt" 2>&1
say "device: ${gpu:-none} (export tag $tag); bundle $(head -1 "$D/BACKENDS.txt" 2>/dev/null)"

DB=$OUTD/study.db
rm -f "$DB" "$DB-wal" "$DB-shm"
"$D/mocbench" run "$SCENARIO" --db "$DB" "${FILTERS[@]}" > "$LOGS/study.txt" 2>&1
rc=$?
say "study rc $rc"
if [ $rc -eq 0 ]; then
  run_id=1  # (a fresh database)
  "$D/mocbench" export "$run_id" --db "$DB" --format csv -o "$OUTD/${tag}_decode_bs1_4.csv" 2> "$LOGS/export.txt"
  say "export rc $? -> ${tag}_decode_bs1_4.csv ($(($(wc -l < "$OUTD/${tag}_decode_bs1_4.csv") - 1)) points)"
  "$D/mocbench" stats "$run_id" --db "$DB" --report roofline > "$OUTD/roofline.txt" 2>&1
  say "roofline rc $?"
  python3 bench/tools/profile_truth.py "$D/mocbench" "$DB" > "$OUTD/truth.md" 2>&1
  say "profile truth rc $?"
  # (its read-only connection leaves an empty -wal and its -shm: the database is whole without them)
  [ -s "$DB-wal" ] || rm -f "$DB-wal" "$DB-shm"
  # (a file over 16 MiB does not come back from the device; the database compresses well)
  if [ "$(stat -c %s "$DB")" -gt $((15 * 1024 * 1024)) ] && xz -T0 -6 "$DB"; then say "study.db packed as study.db.xz"; fi
fi

if [ "$PEER_BUDGET" -gt 0 ]; then
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
    python3 bench/peers/torch_decode_peer.py --studies ffn,decode --batches 1,2,3,4 --budget-s "$PEER_BUDGET" \
      --out "$OUTD/${tag}_peer.csv" > "$LOGS/peer.txt" 2>&1
    say "peer rc $? -> ${tag}_peer.csv"
  else
    say "peer skipped: no torch with a CUDA GPU here"
  fi
fi
# The study's tables (the CLI's summary after the run), then the short version.
sed -n '/^ffn-decode:/,$p' "$LOGS/study.txt" | tail -40
tar czf "$OUTD/logs.tar.gz" -C "$LOGS" . && rm -rf "$LOGS"
n=$(find "${OUT:-$OUTD}" -type f | wc -l)
[ "$n" -le 8 ] || say "WARNING: $n files under ${OUT:-$OUTD}; the device returns 8 -- some of these will not come back"
cat "$OUTD/summary.txt"
