// Shared by the CUDA backend's translation units: checked CUDA calls, the ops' stream, fp32 <-> storage
// conversions for f32/bf16 tensors, and a dtype dispatch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/ops.h"

namespace moc::cuda {

// Every CUDA call is checked; the message names the call, CUDA's reason and where it was made.
inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                             ") at " + file + ":" + std::to_string(line));
}
#define MOC_CUDA_CHECK(call) ::moc::cuda::check((call), #call, __FILE__, __LINE__)
// After a <<<...>>> launch: launch-configuration errors, named after the kernel.
#define MOC_CUDA_LAUNCHED(kernel_name) ::moc::cuda::check(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)

// The current device's limits the decode kernels plan by, queried once per device (every launch may ask).
struct DeviceLimits {
  int dev = 0, sms = 0;
  std::size_t smem_optin = 0, smem_sm = 0;
  double dram_gbs = 0;  // peak DRAM bandwidth, GB/s: 2 transfers a memory clock x the bus width
};
inline DeviceLimits device_limits() {
  static std::mutex mu;
  static std::map<int, DeviceLimits> cache;
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  DeviceLimits lim;
  lim.dev = dev;
  int v = 0;
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&lim.sms, cudaDevAttrMultiProcessorCount, dev));
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  lim.smem_optin = static_cast<std::size_t>(v);
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  lim.smem_sm = static_cast<std::size_t>(v);
  int khz = 0, bits = 0;
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev));
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev));
  lim.dram_gbs = 2.0 * khz * 1e3 * (bits / 8.0) / 1e9;
  cache[dev] = lim;
  return lim;
}

inline cudaStream_t stream_of(Ops& ops) { return static_cast<cudaStream_t>(ops.stream()); }

inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string("cuda ") + op + ": " + what);
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls fn with a null pointer of the tensor's element type (float or __nv_bfloat16): 
//   dispatch_float(t.dtype(), "op", [&](auto tag) { using T = std::remove_pointer_t<decltype(tag)>; ... });
template <class Fn>
void dispatch_float(DType dt, const char* op, Fn&& fn) {
  if (dt == DType::f32) fn(static_cast<float*>(nullptr));
  else if (dt == DType::bf16) fn(static_cast<__nv_bfloat16*>(nullptr));
  else throw std::invalid_argument(std::string("cuda ") + op + ": expected an f32 or bf16 tensor");
}

// Raises a kernel's dynamic shared memory limit (a per-function, per-device attribute) to at least `bytes`,
// once per device and size: launches in hot paths call it freely. Up to 48 KiB needs nothing.
inline void allow_dynamic_smem(const void* kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mu;
  static std::map<std::pair<int, std::uintptr_t>, std::size_t> done;
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto& cur = done[{dev, reinterpret_cast<std::uintptr_t>(kernel)}];
  if (cur >= bytes) return;
  MOC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  cur = bytes;
}
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

inline int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }
// The same for ints in device code too, and log2(e) (exp(x) = exp2(x * kLog2e)): the attention kernels'.
__host__ __device__ __forceinline__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
constexpr float kLog2e = 1.4426950408889634f;

}  // namespace moc::cuda
