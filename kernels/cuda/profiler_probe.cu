#include "kernels/cuda/profiler_probe.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/stage_stamps.cuh"

namespace moc::cuda::probe {
namespace {

using step::globaltimer;

// Stamped whole while stamping is on (stage_stamps.cuh): from after its wait to its end.
__global__ void spin_kernel(long long ns, int* sink, step::StampBuf* stamps) {
  pdl_trigger();  // the successor may start now and wait in its pdl_wait()
  pdl_wait();
  step::Stamper st;
  step::stamp_start(stamps, static_cast<int>(gridDim.x), st, step::StampKernel::spin, step::StageId::work);
  if (threadIdx.x == 0) {
    const unsigned long long t0 = globaltimer();
    unsigned long long now = t0;
    int spins = 0;
    while (now - t0 < static_cast<unsigned long long>(ns)) {
      now = globaltimer();
      ++spins;
    }
    if (spins < 0) *sink = spins;  // never: keeps the loop
  }
  step::stamp_end(stamps, static_cast<int>(gridDim.x), st);
}

}  // namespace

void spin_chain(const std::vector<std::int64_t>& spin_ns, bool pdl, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  step::StampBuf* stamps = step::stamp_buffer();
  for (std::int64_t ns : spin_ns) {
    if (pdl) {
      launch_pdl("spin_kernel", spin_kernel, dim3(1), dim3(32), 0, st, static_cast<long long>(ns),
                 static_cast<int*>(nullptr), stamps);
    } else {
      spin_kernel<<<1, 32, 0, st>>>(static_cast<long long>(ns), nullptr, stamps);
      MOC_CUDA_CHECK(cudaGetLastError());
    }
  }
}

double timed_spin_ms(const std::vector<std::int64_t>& spin_ns, int reps, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  cudaEvent_t a, b;
  MOC_CUDA_CHECK(cudaEventCreate(&a));
  MOC_CUDA_CHECK(cudaEventCreate(&b));
  spin_chain(spin_ns, false, stream);  // warm-up
  MOC_CUDA_CHECK(cudaEventRecord(a, st));
  for (int r = 0; r < reps; ++r) spin_chain(spin_ns, false, stream);
  MOC_CUDA_CHECK(cudaEventRecord(b, st));
  MOC_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  MOC_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  MOC_CUDA_CHECK(cudaEventDestroy(a));
  MOC_CUDA_CHECK(cudaEventDestroy(b));
  return static_cast<double>(ms) / reps;
}

void* make_stream() {
  cudaStream_t s = nullptr;
  MOC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void destroy_stream(void* stream) { MOC_CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(stream))); }
void synchronize(void* stream) { MOC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

}  // namespace moc::cuda::probe
