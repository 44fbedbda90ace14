#!/bin/bash
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda; D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
T0=$(date +%s)
OUT=$OUT/knob bench/micro/knob_ab.sh $D MOCBENCH_MOC_NORM "1 0" 2 --only mode=decode --only batch=1 > $OUT/ab.txt 2>&1
tail -12 $OUT/ab.txt; echo "ab done $(( $(date +%s) - T0 )) s"
timeout 220 $D/mocbench_tests --gtest_filter='Gpu*:OpHarness*:ReportTable*' > $OUT/tests.txt 2>&1; echo "rc=$?" >> $OUT/tests.txt
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|rc=" $OUT/tests.txt | tail -12; echo "tests done $(( $(date +%s) - T0 )) s"
for f in 0 1; do
  MOCBENCH_RING_FENCE=$f timeout 50 compute-sanitizer --tool racecheck --racecheck-report hazard $D/mocbench_tests --gtest_filter=GpuFfnDecode.DenseRingAgreesWithTheUpDownKernel > $OUT/race_ring_$f.txt 2>&1
  echo "fence $f rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $OUT/race_ring_$f.txt | tail -3
done
echo "ring race done $(( $(date +%s) - T0 )) s"
for t in racecheck memcheck; do
  timeout 75 compute-sanitizer --tool $t $D/mocbench_tests --gtest_filter='GpuFfnDecode.NormInside*' > $OUT/${t}_norm.txt 2>&1
  echo "$t rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $OUT/${t}_norm.txt | tail -3
done
echo "all done $(( $(date +%s) - T0 )) s"
