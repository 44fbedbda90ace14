#!/bin/bash
# Builds bench/micro/topk_micro.cu against a CUDA build dir (default build/htopk) into BUILD_DIR/topk_micro.
set -eu
B=${1:-build/htopk}
cd "$(dirname "$0")/../.."
/usr/local/cuda/bin/nvcc -O3 -std=c++17 --generate-code=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -lineinfo -DMOCBENCH_HAVE_CUDA=1 -I. bench/micro/topk_micro.cu -o "$B/topk_micro" \
  -L"$B/kernels" -lmocbench_cuda "$B/kernels/libmocbench_kernels.a" -Xlinker -rpath,'$ORIGIN' -Xcompiler -fopenmp
