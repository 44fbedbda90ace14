#include "gui/model/kernel_stats.h"

#include <algorithm>
#include <unordered_map>

#include "gui/model/timeline.h"
#include "profiling/duration_stats.h"

namespace moc::gui {

DurationStats duration_stats(std::vector<double> ns) {
  // `mocbench stats` computes its statistics with the same function (profiling/duration_stats.h).
  const prof::DurationSummary p = prof::summarize_durations(std::move(ns));
  return {p.count, p.total, p.mean, p.median, p.min, p.max};
}

std::vector<KernelRow> kernel_table(const prof::ProfileTrace& t, prof::TimeMode mode) {
  const prof::DeviceTimes times = prof::device_times(t, mode);
  std::vector<KernelRow> rows;
  std::unordered_map<std::string, std::size_t> row_of;
  for (std::size_t i = 0; i < t.kernels.size(); ++i) {
    const std::string& name = kernel_name(t.kernels[i]);
    auto [it, fresh] = row_of.emplace(name, rows.size());
    if (fresh) rows.push_back({name, {}, {}});
    rows[it->second].durations_ns.push_back(static_cast<double>(times.kernels[i]));
  }
  for (auto& r : rows) {
    std::sort(r.durations_ns.begin(), r.durations_ns.end());
    r.stats = duration_stats(r.durations_ns);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const KernelRow& a, const KernelRow& b) { return a.stats.total_ns > b.stats.total_ns; });
  return rows;
}

std::vector<KernelPointRow> kernel_over_run(const std::vector<db::PointRecord>& points, const ProfileOfPoint& profile_of,
                                            const std::string& name, prof::TimeMode mode) {
  std::vector<KernelPointRow> out;
  for (const auto& p : points) {
    const auto trace = profile_of ? profile_of(p.id) : nullptr;
    if (!trace) continue;
    bool runs_it = false;
    for (const auto& k : trace->kernels)
      if (kernel_name(k) == name) {
        runs_it = true;
        break;
      }
    if (!runs_it) continue;  // device_times only for points that ran it
    const prof::DeviceTimes times = prof::device_times(*trace, mode);
    std::vector<double> ns;
    for (std::size_t i = 0; i < trace->kernels.size(); ++i)
      if (kernel_name(trace->kernels[i]) == name) ns.push_back(static_cast<double>(times.kernels[i]));
    out.push_back({p.id, trace->steps, duration_stats(std::move(ns))});
  }
  return out;
}

}  // namespace moc::gui
