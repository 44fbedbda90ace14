#!/bin/bash
# On the GPU machine (device tool, carry ["BUILD_DIR/dev"] from bench/micro/pack.sh): the micro-benchmark's
# checks and timings, the GpuFfnDecode tests, optionally compute-sanitizer memcheck of the checks and ncu;
# logs under $OUT, a summary on stdout. Usage: bench/micro/run_device.sh BUILD_DIR [sanitize] [ncu]
set -u
B=${1:-build/hf}
D=$B/dev
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$D
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
timeout 50 "$D/ffn_decode_micro" --skip-bench > "$OUT/checks.txt" 2>&1; echo "rc=$?" >> "$OUT/checks.txt"
timeout 45 "$D/ffn_decode_micro" --skip-checks > "$OUT/bench.txt" 2>&1; echo "rc=$?" >> "$OUT/bench.txt"
timeout 45 "$D/mocbench_tests" --gtest_filter='GpuFfnDecode*' > "$OUT/tests.txt" 2>&1; echo "rc=$?" >> "$OUT/tests.txt"
shift
for step in "$@"; do
  if [ "$step" = sanitize ]; then
    timeout 40 compute-sanitizer --tool memcheck "$D/ffn_decode_micro" --skip-bench > "$OUT/memcheck.txt" 2>&1
    echo "rc=$?" >> "$OUT/memcheck.txt"
  fi
  if [ "$step" = ncu ]; then
    timeout 35 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
      "$D/ffn_decode_micro" --profile > "$OUT/ncu.txt" 2>&1
    echo "rc=$?" >> "$OUT/ncu.txt"
  fi
done
cat "$OUT/smi.txt"
grep -E "^(FAIL|==)" "$OUT/checks.txt" | head -30; tail -1 "$OUT/checks.txt"
grep -vE "^(PASS|RUN)" "$OUT/bench.txt" | grep -v "^$" | head -150
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|rc=|tests ran" "$OUT/tests.txt" | head -30
[ -f "$OUT/memcheck.txt" ] && grep -E "ERROR SUMMARY|rc=|FAIL" "$OUT/memcheck.txt" | head -5
[ -f "$OUT/ncu.txt" ] && grep -E "\)x\(|Duration|DRAM Throughput|Achieved Occupancy|rc=" "$OUT/ncu.txt" | cut -c1-120 | head -60
exit 0
