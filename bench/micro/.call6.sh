#!/bin/bash
set -u
mkdir -p build/cuda && tar xJf build/cuda/dev.tar.xz -C build/cuda
D=$PWD/build/cuda/dev; export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
timeout 70 $D/mocbench run scenarios/decode_bs1_4.toml --only mode=decode --only ffn=dense --no-profile --db $OUT/conf.db > $OUT/conf.txt 2>&1; echo "rc=$?"
grep -E "^dense " $OUT/conf.txt | head
