#!/bin/bash
# session 19 call 4: final code -- GPU tests, the study, its export, the PyTorch peer
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda; D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 200 $D/mocbench_tests --gtest_filter='GpuFfnDecode.*:GpuDecode.*:GpuDecodeFused.*:GpuProfiling.*:GpuStageStamps.*' > $OUT/tests.txt 2>&1
echo "tests rc $? after $(( $(date +%s) - t0 )) s"; grep -E "tests ran|PASSED|FAILED|Failure" $OUT/tests.txt | head -30
timeout 240 $D/mocbench run scenarios/decode_bs1_4.toml --db $OUT/study.db > $OUT/study.txt 2>&1
echo "study rc $? after $(( $(date +%s) - t0 )) s"
$D/mocbench export 1 --format csv --db $OUT/study.db -o $OUT/h100_decode_bs1_4.csv
timeout 150 python3 bench/peers/torch_decode_peer.py --studies ffn,decode --batches 1,2,3,4 --out $OUT/h100_peer_issue26.csv --budget-s 100 > $OUT/peer.txt 2>&1
echo "peer rc $? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/peer.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump) && /usr/local/cuda/bin/cuobjdump -sass -fun k_qkv_row $D/libmocbench_cuda.so > $OUT/qkv_row.sass 2>&1; wc -l $OUT/qkv_row.sass
timeout 60 $NCU --clock-control none -k regex:k_qkv_row --launch-skip 400 --launch-count 1 --section SourceCounters --section InstructionStats -f -o /tmp/qkv \
  $D/mocbench run scenarios/decode_bs1_4.toml --db /tmp/q.db --no-profile --quiet --only mode=decode --only batch=1 --only ffn=dense > $OUT/qkv_ncu.log 2>&1
$NCU -i /tmp/qkv.ncu-rep --page source --print-source sass --csv > $OUT/qkv_source.csv 2>&1; wc -c $OUT/qkv_source.csv
echo "done after $(( $(date +%s) - t0 )) s"
