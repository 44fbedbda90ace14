#!/usr/bin/env bash
# Runs the paper scenarios (scenarios/paper/*.toml, or the ones named) into one results database, going
# on past a failed scenario, then prints the database's runs. Then: mocbench report --db DB -o DIR.
# Usage: scripts/run_paper.sh DB [MOCBENCH] [SCENARIO.toml ...]
#   MOCBENCH defaults to build/default/app/mocbench (on the GPU machine: build/cuda/dev/mocbench).
set -uo pipefail
cd "$(dirname "$0")/.."
db=${1:?usage: scripts/run_paper.sh DB [MOCBENCH] [SCENARIO.toml ...]}
shift
bin=build/default/app/mocbench
if [ $# -gt 0 ] && [[ "$1" != *.toml ]]; then bin=$1; shift; fi
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  # Every paper scenario; paper_numbers.toml beside them holds the paper's published numbers, not a scenario.
  for f in scenarios/paper/*.toml; do
    [ "$(basename "$f")" = paper_numbers.toml ] || files+=("$f")
  done
fi
failed=0
for f in "${files[@]}"; do
  echo "== $f"
  start=$(date +%s)
  if ! "$bin" run "$f" --db "$db"; then
    echo "run_paper: $f did not finish cleanly (its points are stored; see above)" >&2
    failed=1
  fi
  echo "== $f: $(( $(date +%s) - start )) s"
done
"$bin" list --db "$db"
exit $failed
