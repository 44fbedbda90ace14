#!/bin/bash
# session 19 call 2: held-back PDL launches (dense ring, MoC up/down) A/B; PM-sampling timelines at boost clocks; ncu kernel sections
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda; D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
OUT=$OUT/ab1 timeout 130 bench/micro/knob_ab.sh $D MOCBENCH_RING_LATE "0 1" 3 --only mode=decode --only ffn=dense --only batch=1 > $OUT/ab1.txt 2>&1
echo "ab1 rc $? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/ab1.txt
OUT=$OUT/ab2 timeout 130 bench/micro/knob_ab.sh $D MOCBENCH_UD_LATE "0 1" 3 --only mode=decode --only ffn=moc --only batch=1 > $OUT/ab2.txt 2>&1
echo "ab2 rc $? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/ab2.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
RUN="$D/mocbench run scenarios/decode_bs1_4.toml --db /tmp/pm.db --no-profile --quiet --only mode=decode --only batch=1"
for cfg in "dense 0" "dense 1" "moc_2:8 1"; do
  set -- $cfg; tag=pm_${1/:/}_$2
  rm -f /tmp/pm.db*
  MOCBENCH_RING_LATE=$2 MOCBENCH_AB_LATE=$2 timeout 100 $NCU --clock-control none --nvtx --nvtx-include "step/" --graph-profiling graph --launch-skip 5 --launch-count 1 --section PmSampling -f -o /tmp/$tag $RUN --only ffn=$1 > $OUT/$tag.log 2>&1
  $NCU -i /tmp/$tag.ncu-rep --page raw --print-metric-instances values --csv > $OUT/$tag.csv 2>&1
  echo "$tag after $(( $(date +%s) - t0 )) s: $(wc -c < $OUT/$tag.csv) bytes"
done
rm -f /tmp/pm.db*
timeout 150 $NCU --clock-control none -k regex:'k_qkv_row|attn_decode_fast|k_gemv_row|k_updown' --launch-skip 400 --launch-count 8 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis \
  $RUN --only ffn=dense > $OUT/ncu_kernels.txt 2>&1
echo "ncu kernels rc $? after $(( $(date +%s) - t0 )) s"; grep -E "^  [a-z_]+.*\(|Duration|Issue Slots Busy|Memory Throughput|DRAM Throughput|Executed Ipc A" $OUT/ncu_kernels.txt | head -60
echo "done after $(( $(date +%s) - t0 )) s"
