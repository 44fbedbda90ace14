#!/bin/bash
# Same-machine A/B of two builds on decode_bs1_4 points: the two device bundles (scripts/device_bundle.sh's
# build/cuda/dev.tar.xz, one of them built from another commit) run alternately on one GPU, so that the machine's
# own speed cancels out (numbers from different device calls are different machines: bench/RESULTS.md part 7).
#
# Make the second bundle here:  git worktree add /tmp/wt COMMIT && ln -s "$PWD/.local" /tmp/wt/.local (the pinned
#   wheels scripts/setup.sh put here; or run scripts/setup.sh there) && (cd /tmp/wt && scripts/device_bundle.sh -j2)
#   && mkdir -p build/ab && cp /tmp/wt/build/cuda/dev.tar.xz build/ab/b.tar.xz (~8 min on 2 cores), and
#   cp build/cuda/dev.tar.xz build/ab/a.tar.xz; carry both files (two bundles: ~33 MB).
# On the device:  bench/micro/ab_decode.sh build/ab/a.tar.xz build/ab/b.tar.xz [ROUNDS] [mocbench run --only ...]
#   default ROUNDS 3 and filters `--only mode=decode --only ffn=moc --only batch=1`. Each round runs A then B
#   (`--no-profile`); prints every run's median ms per point and, per build, the median over its rounds.
# BUDGET_S (seconds): no round starts that would end past it (give a device call's limit less ~20 s for the export).
# Knobs: AB_ENV_A / AB_ENV_B (space-separated VAR=value) are set for A's / B's runs only, so one bundle with an
#   environment knob can be A/B'd against itself (pass the same file twice), as in bench/micro/NOTES.md's
#   ninth-session experiments.
set -u
A=${1:?bundle A (.tar.xz)}
B=${2:?bundle B (.tar.xz)}
ROUNDS=${3:-3}
shift $(($# < 3 ? $# : 3))
FILTERS=("$@")
[ ${#FILTERS[@]} -eq 0 ] && FILTERS=(--only mode=decode --only ffn=moc --only batch=1)
OUT=${OUT:-/tmp/ab_out}
source "$(dirname "$0")/../tools/round_budget.sh"
budget_check "$(basename "$0")" || exit 2
mkdir -p "$OUT" build/ab/run_a build/ab/run_b
tar xJf "$A" -C build/ab/run_a && tar xJf "$B" -C build/ab/run_b || exit 1
export MOCBENCH_CACHE_DIR=${MOCBENCH_CACHE_DIR:-/tmp/cache}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
read -r -a ENV_a <<< "${AB_ENV_A:-}"
read -r -a ENV_b <<< "${AB_ENV_B:-}"
echo "A: $A ${AB_ENV_A:-}"
echo "B: $B ${AB_ENV_B:-}"
# Fresh databases: a machine that stays warm keeps OUT between device calls, and the medians below would pool an
# earlier call's runs (bench/micro/NOTES.md, twenty-eighth session).
rm -f "$OUT"/a.db "$OUT"/a.db-wal "$OUT"/a.db-shm "$OUT"/b.db "$OUT"/b.db-wal "$OUT"/b.db-shm
for r in $(seq 1 "$ROUNDS"); do
  budget_round_start "$r" "$ROUNDS" || break
  for x in a b; do
    D=$PWD/build/ab/run_$x/dev
    declare -n envs="ENV_$x"
    env "${envs[@]}" LD_LIBRARY_PATH="$D" "$D/mocbench" run scenarios/decode_bs1_4.toml --db "$OUT/$x.db" --no-profile --quiet \
      "${FILTERS[@]}" || echo "round $r build $x: mocbench run failed (rc $?)"
  done
  budget_round_end
done
for x in a b; do
  D=$PWD/build/ab/run_$x/dev
  LD_LIBRARY_PATH=$D "$D/mocbench" export --all --db "$OUT/$x.db" --format csv > "$OUT/$x.csv"
  # One file per database (the device tool brings back only a few files from $OUT): WAL checkpointed and removed.
  python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('pragma wal_checkpoint(TRUNCATE)'); c.close()" \
    "$OUT/$x.db" && rm -f "$OUT/$x.db-wal" "$OUT/$x.db-shm"
done
python3 "$(dirname "$0")/run_medians.py" "a=$OUT/a.csv" "b=$OUT/b.csv"
