#!/bin/bash
set -u
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda
D=$PWD/build/cuda/dev; export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
timeout 60 $D/mocbench run scenarios/decode_bs1_4.toml --only mode=decode --only batch=1 --db $OUT/prof.db > $OUT/prof.txt 2>&1; echo "prof rc=$?"
python3 bench/micro/chain.py $OUT/prof.db --stages 2>&1 | head -80
OUT=$OUT/knob timeout 300 bench/micro/knob_ab.sh $D MOCBENCH_RING_S "6 4 3 2" 2 --only mode=decode --only batch=1 --only ffn=dense 2>&1 | tail -6
