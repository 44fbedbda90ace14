// The per-kernel roofline of a profile: each kernel's device time against what its op declared it must move
// and compute (KernelRecord::op_bytes / op_flops, kernels/op_cost.h) and the device's measured ceilings
// (copy bandwidth, dense GEMM rate: `mocbench devices --measure`, stored with each run). Shared by `mocbench
// stats --report roofline` and the dashboard's Roofline view and Timeline colouring. Plain C++: no CUDA.
//
// Rules.
// - A kernel's floor is max(bytes / bandwidth, FLOPs / peak): the least time the hardware allows for what its
//   op must do. % of floor = floor / time (100% = at the ceiling). Lost time = time - floor.
// - One declaration can cover several kernels (an op that launches two, cuBLASLt's split-K and its
//   reduction): its bytes and FLOPs are split among them by their share of the declaration's device time
//   (evenly when they took none), so each gets the op's achieved rate and the rows sum to the declared totals.
// - Kernels whose op declared nothing are listed as undeclared (no floor), never given one.
// - Times are under a TimeMode (exclusive by default: a PDL kernel's wait is its predecessor's time).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profiling/trace.h"

namespace moc::prof {

struct Ceilings {
  double copy_GBps = 0;    // bytes read + written per second, 1e9 (0: unknown)
  double gemm_tflops = 0;  // dense GEMM FLOP/s, 1e12 (0: unknown)
  bool known() const { return copy_GBps > 0 && gemm_tflops > 0; }
};

// A kernel's share of its declaration: bytes and FLOPs (-1: undeclared).
struct KernelCost {
  double bytes = -1, flops = -1;
  bool bound = false;
  bool declared() const { return bytes >= 0; }
};
// For each of t.kernels, its share under `times` (device_times(t, mode).kernels).
std::vector<KernelCost> kernel_costs(const ProfileTrace& t, const std::vector<std::int64_t>& times);

// Floor of a cost on a device (ns); 0 when the ceilings are unknown.
double floor_ns(double bytes, double flops, const Ceilings& c);

// One row: a kernel name in one phase, over every profiled step (per-step values divide by the steps).
struct RooflineRow {
  std::string kernel, phase, op;  // op: the declaring op's name(s), '+'-joined when several
  std::int64_t instances = 0;
  double time_ns = 0;                    // per step
  double bytes = 0, flops = 0;           // per step (declared share)
  bool declared = false, bound = false;  // bound: some bytes are an upper bound
  double floor_ns = 0, lost_ns = 0;      // per step (lost = time - floor; 0 when undeclared)
  double GBps() const { return time_ns > 0 ? bytes / time_ns : 0; }
  double tflops() const { return time_ns > 0 ? flops / time_ns / 1e3 : 0; }
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }  // FLOP per byte
};

struct Roofline {
  TimeMode mode = TimeMode::exclusive;
  Ceilings ceilings;
  int steps = 1;
  std::vector<RooflineRow> rows;  // declared by lost time, descending; then undeclared by time
  double time_ns = 0, declared_ns = 0, floor_ns = 0;  // per step, over every kernel
};
Roofline roofline(const ProfileTrace& t, const Ceilings& c, TimeMode mode = TimeMode::exclusive);

// Each kernel's % of floor (floor / its time x 100), NaN where undeclared, unknown ceilings, or no time.
std::vector<double> kernel_floor_pct(const ProfileTrace& t, const Ceilings& c, TimeMode mode = TimeMode::exclusive);

}  // namespace moc::prof
