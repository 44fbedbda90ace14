// GPU discovery for run records and `mocbench devices`. Plain C++ header: callers need no CUDA headers.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace moc::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t total_mem_bytes = 0;
  std::size_t l2_bytes = 0;
  int sm_clock_khz = 0;
  int mem_clock_khz = 0;
  int mem_bus_bits = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;
};

// All visible GPUs; empty (and *why set) when there is no driver or no device.
std::vector<GpuInfo> list_gpus(std::string* why = nullptr);

}  // namespace moc::cuda
