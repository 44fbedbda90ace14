#!/bin/bash
# Bundles what the device runs need (stripped binaries, the shared CUDA library, libgomp) into BUILD_DIR/dev,
# to carry with the device tool (carry ["BUILD_DIR/dev"], < 64 MiB). Usage: bench/micro/pack.sh BUILD_DIR
set -eu
B=${1:-build/hf}
rm -rf "$B/dev" && mkdir -p "$B/dev"
for f in app/mocbench tests/mocbench_tests bench/ffn_decode_micro kernels/libmocbench_cuda.so; do
  strip -o "$B/dev/$(basename $f)" "$B/$f"
done
cp -L /lib/x86_64-linux-gnu/libgomp.so.1 "$B/dev/"
du -sh "$B/dev"
