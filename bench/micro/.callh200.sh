#!/bin/bash
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda; D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
$D/mocbench run scenarios/decode_bs1_4.toml --db $OUT/study.db > $OUT/study.txt 2>&1
echo "study rc $? after $(( $(date +%s) - t0 )) s"
$D/mocbench export 1 --format csv --db $OUT/study.db -o $OUT/h200_decode_bs1_4.csv
python3 bench/peers/torch_decode_peer.py --studies ffn,decode --batches 1,2,3,4 --out $OUT/h200_peer_issue26.csv --budget-s 55 > $OUT/peer.txt 2>&1
echo "peer rc $? after $(( $(date +%s) - t0 )) s"
