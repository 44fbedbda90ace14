#!/bin/bash
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda
D=$PWD/build/cuda/dev; export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 $D/mocbench_tests --gtest_filter='GpuDecodeFused.Qkv*:GpuDecode*:GpuModel*:GpuProfiling.Decode*' > $OUT/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure" $OUT/tests.txt | head
timeout 260 $D/mocbench run scenarios/decode_bs1_4.toml --db $OUT/study.db > $OUT/study.txt 2>&1
echo "study rc $?"
$D/mocbench export 1 --format csv --db $OUT/study.db -o $OUT/h100_decode_bs1_4.csv
timeout 170 python3 bench/peers/torch_decode_peer.py --studies ffn,decode --batches 1,2,3,4 --out $OUT/h100_peer_issue26.csv --budget-s 130 > $OUT/peer.txt 2>&1
echo "peer rc $?"; tail -3 $OUT/peer.txt
