#!/bin/bash
# On the GPU machine (device tool, carry ["BUILD_DIR/dev"]): the GpuMoc tests, topk_micro (checks and the
# blocks-per-SM sweep), the topk scenario (ours and RAFT, CSV), then the optional steps: `sanitize`
# (compute-sanitizer racecheck and memcheck on the top-K tests) and `ncu` (the headline kernel's sections).
# Logs under $OUT, a summary on stdout. Usage: bench/micro/run_topk_device.sh BUILD_DIR [tests] [train] [micro]
# [scenario] [sanitize] [ncu] [source]
set -u
B=${1:-build/htopk}
D=$B/dev
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$D
shift
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
cat "$OUT/smi.txt"
TOPK_TESTS='GpuMoc.Select*:GpuMoc.RowTopK*:GpuMoc.Raft*'
for step in "$@"; do
  case "$step" in
    tests)
      timeout 150 "$D/mocbench_tests" --gtest_filter='GpuMoc*' > "$OUT/tests.txt" 2>&1; echo "rc=$?" >> "$OUT/tests.txt"
      grep -E "^\[  (FAILED|PASSED|SKIPPED|     OK) |rc=" "$OUT/tests.txt" | head -40
      grep -A4 -E "Failure$" "$OUT/tests.txt" | head -60 ;;
    train)  # the training tests that select on the GPU (padded FFN rows: MocSelect::width)
      timeout 60 "$D/mocbench_tests" --gtest_filter='*GpuTrain*' > "$OUT/train.txt" 2>&1; echo "rc=$?" >> "$OUT/train.txt"
      grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|rc=" "$OUT/train.txt" | head -20 ;;
    micro)
      timeout 90 "$D/topk_micro" > "$OUT/micro.txt" 2>&1; echo "rc=$?" >> "$OUT/micro.txt"; cat "$OUT/micro.txt" ;;
    scenario)
      timeout 150 "$D/mocbench" run scenarios/topk.toml --db /tmp/t.db --quiet > "$OUT/scenario.txt" 2>&1
      echo "rc=$?" >> "$OUT/scenario.txt"; tail -5 "$OUT/scenario.txt"
      "$D/mocbench" export --all --db /tmp/t.db --format csv -o "$OUT/t.csv" > /dev/null 2>&1
      python3 - "$OUT/t.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = [k for k in ('preset', 'batch', 'seq', 'topk_backend', 'latency_us', 'noise', 'reps', 'status', 'error') if rows and k in rows[0]]
print(' '.join(keys))
for r in rows: print(' '.join(r.get(k, '') for k in keys))
PY
      ;;
    sanitize)
      for tool in racecheck memcheck; do
        timeout 75 compute-sanitizer --tool $tool "$D/mocbench_tests" --gtest_filter="$TOPK_TESTS" > "$OUT/$tool.txt" 2>&1
        echo "rc=$?" >> "$OUT/$tool.txt"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|rc=|PASSED|FAILED" "$OUT/$tool.txt" | head -10
      done ;;
    ncu)
      for preset in 1b 60m; do
        timeout 100 ncu --clock-control none -k regex:row_topk --launch-count 1 --section SpeedOfLight \
          --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats --section WarpStateStats \
          "$D/topk_micro" --only $preset --reps 1 > "$OUT/ncu_$preset.txt" 2>&1
        echo "rc=$?" >> "$OUT/ncu_$preset.txt"
        grep -vE "^\s*$|----" "$OUT/ncu_$preset.txt" | grep -E "row_topk|Duration|Issue Slots|Eligible|Active Warps|Warp Cycles|Achieved Occ|Executed Ipc A|rc=" | cut -c1-110 | head -20
      done ;;
    source)
      timeout 100 ncu --clock-control none -k regex:row_topk --launch-count 1 --section SourceCounters \
        --section WarpStateStats --page source --print-source sass --csv "$D/topk_micro" --only 1b --reps 1 \
        > "$OUT/source_1b.csv" 2> "$OUT/source_1b.err"; echo "source rc=$? $(wc -l < "$OUT/source_1b.csv") lines"
      head -3 "$OUT/source_1b.csv" | cut -c1-300; tail -3 "$OUT/source_1b.err" ;;
  esac
done
exit 0
