#!/bin/bash
# On the GPU machine (device tool): unpack the carried binaries, run the micro-benchmark's checks and timings
# and the GpuFfnDecode tests; logs under $OUT. Usage: bench/micro/run_device.sh BUILD_DIR [sanitize]
set -u
B=${1:-build/hb}
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/bins "$OUT"
tar xzf "$B/dist/bins.tgz" -C /tmp/bins
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
timeout 60 /tmp/bins/ffn_decode_micro --skip-bench > "$OUT/checks.txt" 2>&1; echo "rc=$?" >> "$OUT/checks.txt"
timeout 40 /tmp/bins/ffn_decode_micro --skip-checks > "$OUT/bench.txt" 2>&1; echo "rc=$?" >> "$OUT/bench.txt"
LD_LIBRARY_PATH=/tmp/bins timeout 70 /tmp/bins/mocbench_tests --gtest_filter='GpuFfnDecode*' > "$OUT/tests.txt" 2>&1; echo "rc=$?" >> "$OUT/tests.txt"
if [ "${2:-}" = sanitize ]; then
  timeout 75 compute-sanitizer --tool memcheck /tmp/bins/ffn_decode_micro --skip-bench > "$OUT/memcheck.txt" 2>&1
  echo "rc=$?" >> "$OUT/memcheck.txt"
fi
cat "$OUT/smi.txt"
grep -E "^(FAIL|==)" "$OUT/checks.txt" | head -40; tail -2 "$OUT/checks.txt"
grep -vE "^(PASS|RUN)" "$OUT/bench.txt" | head -80
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|rc=" "$OUT/tests.txt" | head -30
[ -f "$OUT/memcheck.txt" ] && tail -5 "$OUT/memcheck.txt"
exit 0
