#!/bin/bash
# session 19 call 1: GPU tests on HEAD code (+ AB_LATE knob, off), sanitizers on the a:b ring, AB_LATE A/B, ncu PM-sampling probe
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda; D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 200 $D/mocbench_tests --gtest_filter='GpuFfnDecode.*:GpuDecode.*:GpuProfiling.*:GpuStageStamps.*' > $OUT/tests.txt 2>&1
echo "tests rc $? after $(( $(date +%s) - t0 )) s"; grep -E "tests ran|PASSED|FAILED|Failure" $OUT/tests.txt | head -30
CS=/usr/local/cuda/bin/compute-sanitizer
timeout 200 $CS --tool racecheck --racecheck-report all $D/mocbench_tests --gtest_filter='GpuFfnDecode.AbRingAgreesWithTheGateAndUpDownKernels' > $OUT/racecheck.txt 2>&1
echo "racecheck rc $? after $(( $(date +%s) - t0 )) s"; tail -5 $OUT/racecheck.txt
timeout 150 $CS --tool memcheck $D/mocbench_tests --gtest_filter='GpuFfnDecode.AbRingAgreesWithTheGateAndUpDownKernels' > $OUT/memcheck.txt 2>&1
echo "memcheck rc $? after $(( $(date +%s) - t0 )) s"; tail -5 $OUT/memcheck.txt
OUT=$OUT/ab1 timeout 120 bench/micro/knob_ab.sh $D MOCBENCH_AB_LATE "0 1" 3 --only mode=decode --only ffn=moc_2:8 --only batch=1 > $OUT/ab1.txt 2>&1
echo "ab1 rc $? after $(( $(date +%s) - t0 )) s"; tail -4 $OUT/ab1.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
$NCU --version > $OUT/ncu_info.txt 2>&1
$NCU --list-sections >> $OUT/ncu_info.txt 2>&1
$NCU --help 2>&1 | grep -i -B1 -A3 "pm-sampling\|graph-profiling" >> $OUT/ncu_info.txt
grep -i "pm" $OUT/ncu_info.txt | head -20
timeout 120 $NCU --nvtx --nvtx-include "step/" --graph-profiling graph --launch-skip 5 --launch-count 1 --section PmSampling -f -o $OUT/pm \
  $D/mocbench run scenarios/decode_bs1_4.toml --db /tmp/pm.db --no-profile --quiet --only mode=decode --only ffn=dense --only batch=1 > $OUT/ncu_run.txt 2>&1
echo "ncu rc $? after $(( $(date +%s) - t0 )) s"; tail -5 $OUT/ncu_run.txt; ls -la $OUT/
if [ -f $OUT/pm.ncu-rep ]; then
  $NCU -i $OUT/pm.ncu-rep --page raw --print-metric-instances values --csv > $OUT/pm_raw.csv 2>&1
  $NCU -i $OUT/pm.ncu-rep --page details --print-details all > $OUT/pm_details.txt 2>&1
  wc -c $OUT/pm_raw.csv $OUT/pm_details.txt; head -c 1500 $OUT/pm_raw.csv
fi
echo "done after $(( $(date +%s) - t0 )) s"
