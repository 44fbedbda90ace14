#!/bin/bash
# Packs the binaries the device runs need (stripped, with libtomlplusplus that the device lacks) into
# BUILD_DIR/dist/bins.tgz, to carry with the device tool. Usage: bench/micro/pack.sh BUILD_DIR
set -eu
B=${1:-build/hb}
rm -rf "$B/dist" && mkdir -p "$B/dist/s"
cp "$B/bench/ffn_decode_micro" "$B/tests/mocbench_tests" "$B/dist/s/"
strip "$B/dist/s/"*
cp -L /lib/x86_64-linux-gnu/libtomlplusplus.so.3 "$B/dist/s/"
tar czf "$B/dist/bins.tgz" -C "$B/dist/s" .
rm -rf "$B/dist/s"
ls -la "$B/dist"
