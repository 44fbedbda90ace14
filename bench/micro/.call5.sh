#!/bin/bash
set -u
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda
D=$PWD/build/cuda/dev; export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 70 compute-sanitizer --tool racecheck $D/mocbench_tests --gtest_filter='GpuFfnDecode.DenseRingAgreesWithTheUpDownKernel' > $OUT/race.txt 2>&1; echo "racecheck rc=$?"
grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/race.txt | head -4
S0=$(date +%s)
timeout 250 $D/mocbench run scenarios/decode_bs1_4.toml --db $OUT/study.db > $OUT/study.txt 2>&1; echo "study rc=$? $(( $(date +%s) - S0 )) s"
$D/mocbench export 1 --format csv --db $OUT/study.db -o $OUT/h100_decode_bs1_4.csv; echo "export rc=$?"
tail -30 $OUT/study.txt
timeout 165 python3 bench/peers/torch_decode_peer.py --studies ffn,decode --batches 1,2,3,4 --out $OUT/h100_peer_issue26.csv --budget-s 130 > $OUT/peer.txt 2>&1; echo "peer rc=$?"
tail -5 $OUT/peer.txt
