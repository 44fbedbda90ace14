#include "profiling/roofline.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "profiling/phases.h"

namespace moc::prof {

std::vector<KernelCost> kernel_costs(const ProfileTrace& t, const std::vector<std::int64_t>& times) {
  std::vector<KernelCost> out(t.kernels.size());
  // Kernels of one declaration in one step: (step, op_call) -> indices.
  std::map<std::pair<int, std::int64_t>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < t.kernels.size(); ++i)
    if (t.kernels[i].op_bytes >= 0 && t.kernels[i].op_call >= 0) groups[{t.kernels[i].step, t.kernels[i].op_call}].push_back(i);
  for (const auto& [key, idx] : groups) {
    double total = 0;
    for (auto i : idx) total += static_cast<double>(times[i]);
    const auto& k0 = t.kernels[idx.front()];
    for (auto i : idx) {
      const double share = total > 0 ? static_cast<double>(times[i]) / total : 1.0 / static_cast<double>(idx.size());
      out[i].bytes = static_cast<double>(k0.op_bytes) * share;
      out[i].flops = static_cast<double>(std::max<std::int64_t>(0, k0.op_flops)) * share;
      out[i].bound = k0.op_bound;
    }
  }
  return out;
}

double floor_ns(double bytes, double flops, const Ceilings& c) {
  if (!c.known()) return 0;
  return std::max(bytes / c.copy_GBps, flops / (c.gemm_tflops * 1e3));
}

Roofline roofline(const ProfileTrace& t, const Ceilings& c, TimeMode mode) {
  Roofline r;
  r.mode = mode;
  r.ceilings = c;
  r.steps = std::max(1, t.steps);
  const DeviceTimes dt = device_times(t, mode);
  const auto costs = kernel_costs(t, dt.kernels);
  const PhaseIndex ix(t);
  struct Acc {
    RooflineRow row;
    std::set<std::string> ops;
  };
  std::map<std::tuple<bool, std::string, std::string>, Acc> acc;  // (declared, kernel, phase)
  for (std::size_t i = 0; i < t.kernels.size(); ++i) {
    const auto& k = t.kernels[i];
    const bool declared = costs[i].declared();
    auto& a = acc[{declared, k.short_name, ix.phase(k.range_id)}];
    a.row.kernel = k.short_name;
    a.row.phase = ix.phase(k.range_id);
    a.row.declared = declared;
    ++a.row.instances;
    a.row.time_ns += static_cast<double>(dt.kernels[i]);
    if (declared) {
      a.row.bytes += costs[i].bytes;
      a.row.flops += costs[i].flops;
      a.row.bound = a.row.bound || costs[i].bound;
      a.ops.insert(k.op);
    }
  }
  const double steps = r.steps;
  for (auto& [key, a] : acc) {
    RooflineRow row = a.row;
    row.time_ns /= steps;
    row.bytes /= steps;
    row.flops /= steps;
    for (const auto& o : a.ops) row.op += (row.op.empty() ? "" : "+") + o;
    if (row.declared) {
      row.floor_ns = floor_ns(row.bytes, row.flops, c);
      row.lost_ns = row.time_ns - row.floor_ns;
      r.declared_ns += row.time_ns;
      r.floor_ns += row.floor_ns;
    }
    r.time_ns += row.time_ns;
    r.rows.push_back(std::move(row));
  }
  std::stable_sort(r.rows.begin(), r.rows.end(), [](const RooflineRow& x, const RooflineRow& y) {
    if (x.declared != y.declared) return x.declared;
    return x.declared ? x.lost_ns > y.lost_ns : x.time_ns > y.time_ns;
  });
  return r;
}

std::vector<double> kernel_floor_pct(const ProfileTrace& t, const Ceilings& c, TimeMode mode) {
  const DeviceTimes dt = device_times(t, mode);
  const auto costs = kernel_costs(t, dt.kernels);
  std::vector<double> out(t.kernels.size(), std::numeric_limits<double>::quiet_NaN());
  if (!c.known()) return out;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (costs[i].declared() && dt.kernels[i] > 0)
      out[i] = 100.0 * floor_ns(costs[i].bytes, costs[i].flops, c) / static_cast<double>(dt.kernels[i]);
  return out;
}

}  // namespace moc::prof
