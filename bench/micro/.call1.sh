#!/bin/bash
set -u
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda
D=$PWD/build/cuda/dev; export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 80 $D/ffn_decode_micro --skip-bench > $OUT/checks.txt 2>&1; echo "checks rc=$?"
grep -E "^(FAIL|==)" $OUT/checks.txt | head -20
timeout 60 $D/ffn_decode_micro --skip-checks --only dense > $OUT/bench.txt 2>&1; echo "bench rc=$?"
grep -E "^\|" $OUT/bench.txt | head -40
timeout 150 $D/mocbench_tests --gtest_filter='GpuFfnDecode*:GpuDecode*:GpuStageStamps*:GpuProfiling*' > $OUT/tests.txt 2>&1; echo "tests rc=$?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|tests ran" $OUT/tests.txt | head -20
OUT=$OUT/knob timeout 280 bench/micro/knob_ab.sh $D MOCBENCH_DENSE_RING "1 0" 3 --only mode=decode --only batch=1 --only ffn=dense 2>&1 | tail -15
