#!/bin/bash
# Before/after on one device in one call: runs a scenario with a baseline bundle and a candidate bundle
# (each a device_bundle.sh archive), stores both runs under $OUT and prints `mocbench compare` (B / A).
# The rule it serves: a refactor "may not make any kernel slower (same device, same call)".
# Usage (on the device, repo root):
#   bash bench/tools/ab_study.sh BASE.tar.xz NEW.tar.xz SCENARIO [TIME_BOUND_S] [ORDER]
# TIME_BOUND_S (optional) replaces the scenario's [measure] time_bound_s in a copy, so that two runs fit one
# call; ORDER: "ab" (default) or "aba" (the baseline again last: drift shows as A1 vs A2).
set -u
base_tar=$1 new_tar=$2 scen=$3 bound=${4:-} order=${5:-ab}
OUTD=${OUT:-out}
mkdir -p "$OUTD" /tmp/ab/a /tmp/ab/b
tar xJf "$base_tar" -C /tmp/ab/a && tar xJf "$new_tar" -C /tmp/ab/b || exit 1
A=/tmp/ab/a/dev B=/tmp/ab/b/dev
cp "$scen" /tmp/ab/scenario.toml
if [ -n "$bound" ]; then
  sed -i "s/^time_bound_s *=.*/time_bound_s = $bound/" /tmp/ab/scenario.toml
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$OUTD/gpu.txt" 2>&1
export MOCBENCH_CACHE_DIR=/tmp/ab/cache
run() {  # label, bundle dir
  local t0=$(date +%s)
  LD_LIBRARY_PATH=$2 "$2/mocbench" run /tmp/ab/scenario.toml --db "$OUTD/$1.db" --quiet > "$OUTD/$1.log" 2>&1
  echo "$1: rc=$? in $(( $(date +%s) - t0 )) s ($(head -1 "$2/BACKENDS.txt"))"
}
run a1 "$A"
run b "$B"
[ "$order" = aba ] && run a2 "$A"
LD_LIBRARY_PATH=$B "$B/mocbench" compare "$OUTD/a1.db" "$OUTD/b.db" | tee "$OUTD/compare_a1_b.txt"
if [ "$order" = aba ]; then
  LD_LIBRARY_PATH=$B "$B/mocbench" compare "$OUTD/a1.db" "$OUTD/a2.db" > "$OUTD/compare_a1_a2.txt"
  echo "(baseline drift, a1 vs a2, in compare_a1_a2.txt)"
fi
# Few files come back from the device: everything in one archive.
(cd "$OUTD" && tar czf ab.tgz *.db* *.log *.txt && rm -f *.db *.db-wal *.db-shm *.log)
