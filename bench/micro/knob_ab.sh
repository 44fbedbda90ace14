#!/bin/bash
# One bundle, one environment knob, several values, interleaved on one GPU: the way bench/micro/NOTES.md's
# experiments are measured (an EXPERIMENT commit reads VAR, the bundle is built, the commit reverted). Each round runs
# the scenario's selected points once per value, in the given order (`--no-profile`), so that drift of the machine
# spreads over all values; prints every run's median ms per point and, per value, the median over the rounds.
# (bench/micro/ab_decode.sh compares two bundles instead.)
#
# On the device:  bench/micro/knob_ab.sh BUNDLE VAR "V1 V2 ..." [ROUNDS] [mocbench run --only ...]
#   BUNDLE: scripts/device_bundle.sh's build/cuda/dev.tar.xz (or an unpacked dev folder); ROUNDS default 2;
#   filters default `--only mode=decode --only batch=1`. SCENARIO (default scenarios/decode_bs1_4.toml) and OUT
#   (default /tmp/knob_out: one CSV per value, knob_<value>.csv) from the environment; BUDGET_S (seconds) starts no
#   round that would end past it (give a device call's limit less ~20 s for the export and summary).
#   Example: bench/micro/knob_ab.sh build/cuda/dev.tar.xz MOCBENCH_UD_FIN "0 1 2 3"
set -u
BUNDLE=${1:?bundle (.tar.xz or dev folder)}
VAR=${2:?environment variable}
VALUES=${3:?values, space-separated}
ROUNDS=${4:-2}
shift $(($# < 4 ? $# : 4))
FILTERS=("$@")
[ ${#FILTERS[@]} -eq 0 ] && FILTERS=(--only mode=decode --only batch=1)
SCENARIO=${SCENARIO:-scenarios/decode_bs1_4.toml}
source "$(dirname "$0")/../tools/round_budget.sh"
budget_check "$(basename "$0")" || exit 2
OUT=${OUT:-/tmp/knob_out}
[[ "$VAR" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "knob_ab.sh: '$VAR' is not a variable name" >&2; exit 2; }
read -r -a VALS <<< "$VALUES"
for v in "${VALS[@]}"; do
  [[ "$v" =~ ^[A-Za-z0-9_.:-]+$ ]] || { echo "knob_ab.sh: value '$v' would not make a file name" >&2; exit 2; }
done
mkdir -p "$OUT"
source "$(dirname "$0")/../tools/bundle_dir.sh"
D=$(bundle_dir "$BUNDLE" build/knob) || exit 1
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=${MOCBENCH_CACHE_DIR:-/tmp/cache}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
for v in "${VALS[@]}"; do
  rm -f "$OUT/knob_$v.db" "$OUT/knob_$v.db-wal" "$OUT/knob_$v.db-shm"
done
for r in $(seq 1 "$ROUNDS"); do
  budget_round_start "$r" "$ROUNDS" || break
  for v in "${VALS[@]}"; do
    env "$VAR=$v" "$D/mocbench" run "$SCENARIO" --db "$OUT/knob_$v.db" --no-profile --quiet "${FILTERS[@]}" ||
      echo "round $r $VAR=$v: mocbench run failed (rc $?)"
  done
  budget_round_end
done
for v in "${VALS[@]}"; do
  "$D/mocbench" export --all --db "$OUT/knob_$v.db" --format csv > "$OUT/knob_$v.csv"
  # The databases stay on the device (the device tool brings back only a few files): the CSVs carry the medians.
  rm -f "$OUT/knob_$v.db" "$OUT/knob_$v.db-wal" "$OUT/knob_$v.db-shm"
done
ARGS=()
for v in "${VALS[@]}"; do ARGS+=("$VAR=$v=$OUT/knob_$v.csv"); done
python3 "$(dirname "$0")/run_medians.py" "${ARGS[@]}"
