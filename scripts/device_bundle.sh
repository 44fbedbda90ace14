#!/usr/bin/env bash
# Builds the `cuda` preset for the GPU machine and puts next to it (build/cuda/devlib) the shared
# libraries the binaries need that the GPU machine lacks (it has the CUDA libraries and libsqlite3, but no
# OpenMP or Fortran runtime), with stripped copies of the executables, and that folder as build/cuda/dev.tar.xz
# (~16 MB): carry the archive where transfers are limited (the folder is ~71 MB; RAFT's top-K kernels are most
# of the CUDA library). On the GPU machine: tar xJf build/cuda/dev.tar.xz -C build/cuda;
# export LD_LIBRARY_PATH=$PWD/build/cuda/dev; build/cuda/dev/mocbench ...
#
# The optional GPU backends come from pinned wheels (RAFT select_k, the cuDNN SDPA frontend): this script
# fetches them first (scripts/setup_raft.sh, scripts/setup_cudnn_frontend.sh; quiet when present) and refuses
# to build a bundle that would silently lack one (MOCBENCH_BUNDLE_ALLOW_MISSING=1 builds it anyway). The
# bundle's BACKENDS.txt says what it contains; it is printed at the end.
# Usage: scripts/device_bundle.sh [--configure-only] [cmake --build options, e.g. -j2]
set -euo pipefail
cd "$(dirname "$0")/.."
configure_only=0
if [ "${1:-}" = --configure-only ]; then
  configure_only=1
  shift
fi
export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null 2>&1 || { echo "device_bundle: no nvcc (the CUDA 13 toolkit): nothing to bundle" >&2; exit 2; }
for s in setup_raft.sh setup_cudnn_frontend.sh; do
  if ! "scripts/$s"; then
    echo "device_bundle: scripts/$s failed (above); without it the bundle lacks that backend" >&2
    [ "${MOCBENCH_BUNDLE_ALLOW_MISSING:-0}" = 1 ] || exit 1
  fi
done
log=$(cmake --preset cuda 2>&1) || { echo "$log" >&2; exit 1; }
backends=$(echo "$log" | sed -n 's/^-- mocbench: //p')
missing=$(echo "$backends" | grep -E '^(RAFT|cuDNN SDPA) OFF' || true)
if [ -n "$missing" ]; then
  echo "device_bundle: an optional GPU backend is off:" >&2
  echo "$missing" >&2
  [ "${MOCBENCH_BUNDLE_ALLOW_MISSING:-0}" = 1 ] || { echo "device_bundle: refusing (MOCBENCH_BUNDLE_ALLOW_MISSING=1 to build without it)" >&2; exit 1; }
fi
if [ "$configure_only" = 1 ]; then
  echo "$backends"
  exit 0
fi
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
{
  echo "mocbench device bundle, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "$backends"
} > build/cuda/dev/BACKENDS.txt
rm -f build/cuda/dev.tar.xz
tar -C build/cuda -cJf build/cuda/dev.tar.xz dev
du -sh build/cuda/dev build/cuda/dev.tar.xz | cut -f1
cat build/cuda/dev/BACKENDS.txt
