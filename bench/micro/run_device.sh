#!/bin/bash
# On the GPU machine (device tool): unpack the carried binaries (bench/micro/pack.sh), run the
# micro-benchmark's checks and timings and the GpuFfnDecode tests, optionally compute-sanitizer and ncu;
# logs under $OUT. Usage: bench/micro/run_device.sh BUILD_DIR [sanitize] [ncu]
set -u
B=${1:-build/hb}
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/bins "$OUT"
tar xzf "$B/dist/bins.tgz" -C /tmp/bins
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
timeout 40 /tmp/bins/ffn_decode_micro --skip-bench > "$OUT/checks.txt" 2>&1; echo "rc=$?" >> "$OUT/checks.txt"
timeout 40 /tmp/bins/ffn_decode_micro --skip-checks > "$OUT/bench.txt" 2>&1; echo "rc=$?" >> "$OUT/bench.txt"
LD_LIBRARY_PATH=/tmp/bins timeout 60 /tmp/bins/mocbench_tests --gtest_filter='GpuFfnDecode*' > "$OUT/tests.txt" 2>&1
echo "rc=$?" >> "$OUT/tests.txt"
shift
for step in "$@"; do
  if [ "$step" = sanitize ]; then
    timeout 60 compute-sanitizer --tool memcheck /tmp/bins/ffn_decode_micro --skip-bench > "$OUT/memcheck.txt" 2>&1
    echo "rc=$?" >> "$OUT/memcheck.txt"
  fi
  if [ "$step" = ncu ]; then
    timeout 60 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
      /tmp/bins/ffn_decode_micro --profile > "$OUT/ncu.txt" 2>&1
    echo "rc=$?" >> "$OUT/ncu.txt"
  fi
done
cat "$OUT/smi.txt"
grep -E "^(FAIL|==)" "$OUT/checks.txt" | head -40; tail -1 "$OUT/checks.txt"
grep -vE "^(PASS|RUN)" "$OUT/bench.txt" | head -80
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|rc=" "$OUT/tests.txt" | head -30
[ -f "$OUT/memcheck.txt" ] && tail -3 "$OUT/memcheck.txt"
[ -f "$OUT/ncu.txt" ] && grep -E "\)x\(|Duration|DRAM Throughput|Achieved Occupancy|rc=" "$OUT/ncu.txt" | cut -c1-120 | head -60
exit 0
