#!/bin/bash
# The decode study and the PyTorch peer in one call. Usage: .call2.sh PREFIX (h100 / h200) [racecheck]
P=$1
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda; D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
git log --oneline -1
T0=$(date +%s)
$D/mocbench run scenarios/decode_bs1_4.toml --db $OUT/study.db > $OUT/study.txt 2>&1; echo "study rc=$? $(( $(date +%s) - T0 )) s"
tail -4 $OUT/study.txt
$D/mocbench export 1 --format csv --db $OUT/study.db -o $OUT/${P}_decode_bs1_4.csv; echo "export rc=$?"
python3 bench/peers/torch_decode_peer.py --studies ffn,decode --batches 1,2,3,4 --out $OUT/${P}_peer_issue26.csv --budget-s 130 > $OUT/peer.txt 2>&1
echo "peer rc=$? $(( $(date +%s) - T0 )) s"; tail -3 $OUT/peer.txt
if [ "${2:-}" = racecheck ]; then
  timeout $(( 560 - ($(date +%s) - T0) )) compute-sanitizer --tool racecheck $D/mocbench_tests --gtest_filter='GpuFfnDecode.NormInside*' > $OUT/racecheck_norm.txt 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck_norm.txt | tail -3
fi
echo "all done $(( $(date +%s) - T0 )) s"
