#!/bin/bash
# session 19 call 3: batch-1 QKV / O / LM head on the mma tiles (MOCBENCH_GEMV_MMA bits 1 QKV, 2 gemv): correctness, A/B, instruction counts
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda; D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
MOCBENCH_GEMV_MMA=3 timeout 150 $D/mocbench_tests --gtest_filter='GpuDecodeFused.*:GpuDecode.*' > $OUT/tests.txt 2>&1
echo "tests(knob 3) rc $? after $(( $(date +%s) - t0 )) s"; grep -E "tests ran|PASSED|FAILED|Failure" $OUT/tests.txt | head -20
OUT=$OUT/ab1 timeout 170 bench/micro/knob_ab.sh $D MOCBENCH_GEMV_MMA "0 1 3" 3 --only mode=decode --only ffn=dense --only batch=1 > $OUT/ab1.txt 2>&1
echo "ab1 rc $? after $(( $(date +%s) - t0 )) s"; tail -4 $OUT/ab1.txt
OUT=$OUT/ab2 timeout 100 bench/micro/knob_ab.sh $D MOCBENCH_GEMV_MMA "0 3" 2 --only mode=decode --only ffn=moc_2:8 --only batch=1 > $OUT/ab2.txt 2>&1
echo "ab2 rc $? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/ab2.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
RUN="$D/mocbench run scenarios/decode_bs1_4.toml --db /tmp/pm.db --no-profile --quiet --only mode=decode --only batch=1 --only ffn=dense"
MOCBENCH_GEMV_MMA=3 timeout 90 $NCU --clock-control none -k regex:'k_qkv|k_gemv' --launch-skip 400 --launch-count 3 \
  --section SpeedOfLight --section InstructionStats --section LaunchStats --section Occupancy $RUN > $OUT/ncu_kernels.txt 2>&1
echo "ncu rc $? after $(( $(date +%s) - t0 )) s"; grep -E "^  [a-z_:]+.*\(|Duration|Executed Instructions  |Registers Per|DRAM Throughput" $OUT/ncu_kernels.txt | head -30
echo "done after $(( $(date +%s) - t0 )) s"
