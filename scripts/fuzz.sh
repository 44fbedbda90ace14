#!/usr/bin/env bash
# Fuzzes the scenario parser, the results-database opener and the GGUF reader (libFuzzer + ASan + UBSan; tests/fuzz/README.md).
#   scripts/fuzz.sh [smoke]    a bounded session, as CI runs it: 20 s per target
#   scripts/fuzz.sh SECONDS    SECONDS per target (the measurement in bench/RESULTS.md: 300)
#   ... [TARGET...]            only these targets (fuzz_scenario, fuzz_results_db, fuzz_gguf; default all)
# Builds build/fuzz with clang (installing Debian's clang when missing), runs each target in turn on a fresh
# copy of its seed corpus, and prints per target libFuzzer's final line ("Done N runs in S second(s)") and the
# result. Exits 1 on any crash, timeout (one input over 5 s), leak, out-of-memory or sanitizer report; the
# input is kept under build/fuzz/findings/ and `build/fuzz/<target> FILE` replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/fuzz.sh [smoke|SECONDS] [fuzz_scenario|fuzz_results_db|fuzz_gguf ...]" >&2; exit 2; }
case "${1:-smoke}" in
  smoke) seconds=20 ;;
  '' | *[!0-9]*) usage ;;
  *) seconds=$1 ;;
esac
[ "$seconds" -gt 0 ] || usage
shift $(($# > 0 ? 1 : 0))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_scenario fuzz_results_db fuzz_gguf)
for t in "${targets[@]}"; do
  case "$t" in fuzz_scenario | fuzz_results_db | fuzz_gguf) ;; *) usage ;; esac
done

# clang with libFuzzer (Debian 12: clang 14 and libclang-rt-14-dev). Probe by linking an empty target.
probe() {
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -x c++ - -fsanitize=fuzzer,address,undefined -o /dev/null >/dev/null 2>&1
}
if ! command -v clang++ >/dev/null 2>&1 || ! probe; then
  echo "fuzz: installing clang and libclang-rt-dev (libFuzzer)"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends clang libclang-rt-dev >/dev/null
  probe || { echo "fuzz: clang++ cannot link a libFuzzer target" >&2; exit 1; }
fi

build=build/fuzz
start=$SECONDS
if [ ! -f "$build/build.ninja" ]; then
  nice -n 19 cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
nice -n 19 cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1 ||
  { tail -40 "$build/build.log" >&2; echo "fuzz: building $build failed (log: $build/build.log)" >&2; exit 1; }
echo "fuzz: built $build in $((SECONDS - start)) s; $seconds s per target"

run="$build/run"
rm -rf "$run"
mkdir -p "$run/fuzz_scenario" "$run/fuzz_results_db" "$run/fuzz_gguf" "$build/findings"
# The database target's file and its -wal/-shm live in RAM when possible; removed however this ends.
tmp=$(mktemp -d "$([ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/mocbench-fuzz.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export FUZZ_TMPDIR="$tmp"

cp scenarios/*.toml tests/fuzz/seeds/scenario/*.toml "$run/fuzz_scenario/"
cp tests/fuzz/seeds/gguf/*.gguf "$run/fuzz_gguf/"
"$build/make_db_seeds" "$run/fuzz_results_db"
# Inputs that once found bugs in the store (fixed): replayed first, as every seed is.
for f in tests/fuzz/seeds/db/*.sqlite.gz; do gzip -dc "$f" >"$run/fuzz_results_db/$(basename "$f" .gz)"; done

status=0
for target in "${targets[@]}"; do
  args=(-max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$build/findings/$target-")
  # Scenario inputs up to 256 KiB: long enough for axes of tens of thousands of values (a seed has 20,000).
  if [ "$target" = fuzz_scenario ]; then args+=(-max_len=262144 -dict=tests/fuzz/scenario.dict); fi
  log="$run/$target.log"
  rc=0
  nice -n 19 "$build/$target" "${args[@]}" "$run/$target" >"$log" 2>&1 || rc=$?
  done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find "$run/$target" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    echo "$target: ${done_line:-?}: ${execs:-?} executions, clean (corpus $corpus inputs)"
  else
    status=1
    echo "$target: FAILED (exit $rc) after ${execs:-?} executions; log $log"
    grep -E 'ERROR: |runtime error|SUMMARY|fuzz_[a-z_]+: |Test unit written' "$log" | head -8 | sed 's/^/  /'
    echo "  replay: $build/$target <the file named above>"
  fi
done
echo "fuzz: done in $((SECONDS - start)) s"
exit "$status"
