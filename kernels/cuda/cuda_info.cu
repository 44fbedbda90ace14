#include <cuda_runtime.h>

#include "kernels/cuda/cuda_info.h"

namespace moc::cuda {

std::vector<GpuInfo> list_gpus(std::string* why) {
  std::vector<GpuInfo> out;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return out;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.total_mem_bytes = p.totalGlobalMem;
    g.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
    cudaDeviceGetAttribute(&g.sm_clock_khz, cudaDevAttrClockRate, i);
    cudaDeviceGetAttribute(&g.mem_clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&g.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    g.driver_version = driver;
    g.runtime_version = runtime;
    out.push_back(g);
  }
  if (out.empty() && why) *why = "no CUDA device visible";
  return out;
}

}  // namespace moc::cuda
