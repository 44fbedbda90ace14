#!/usr/bin/env bash
# Builds the `cuda` preset for the GPU machine and puts next to it (build/cuda/devlib) the shared
# libraries the binaries need that the GPU machine lacks (it has the CUDA libraries and libsqlite3, but no
# OpenMP or Fortran runtime), with stripped copies of the executables, and that folder as build/cuda/dev.tar.xz
# (~16 MB): carry the archive where transfers are limited (the folder is ~71 MB; RAFT's top-K kernels are most
# of the CUDA library). On the GPU machine: tar xJf build/cuda/dev.tar.xz -C build/cuda;
# export LD_LIBRARY_PATH=$PWD/build/cuda/dev; build/cuda/dev/mocbench ...
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset cuda >/dev/null
cmake --build --preset cuda "$@"
rm -rf build/cuda/dev build/cuda/devlib
mkdir -p build/cuda/dev
for bin in build/cuda/app/mocbench build/cuda/tests/mocbench_tests build/cuda/kernels/libmocbench_cuda.so; do
  [ -x "$bin" ] || continue
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libgomp*|libgfortran*|libquadmath*|libsentencepiece*|libprotobuf-lite*|libtomlplusplus*|libopenblas*|librmm*|librapids_logger*) cp -L "$lib" build/cuda/dev/ ;;
    esac
  done
  strip -o "build/cuda/dev/$(basename "$bin")" "$bin"
done
for f in build/cuda/bench/ffn_decode_micro; do
  [ -x "$f" ] && strip -o "build/cuda/dev/$(basename "$f")" "$f"
done
rm -f build/cuda/dev.tar.xz
tar -C build/cuda -cJf build/cuda/dev.tar.xz dev
du -sh build/cuda/dev build/cuda/dev.tar.xz | cut -f1
