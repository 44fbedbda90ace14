#include "gui/model/stage_stats.h"

#include <algorithm>
#include <map>

namespace moc::gui {

StageTable stage_table(const prof::ProfileTrace& t) {
  StageTable tb;
  const double steps = std::max(1, t.steps);
  struct Acc {
    std::size_t first = 0, count = 0;  // first: index of its first stage record (the row order)
    std::int64_t total = 0, max = 0, wait = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> acc;
  std::map<std::string, std::int64_t> kernel_total;  // every stage of a kernel summed
  for (std::size_t i = 0; i < t.stages.size(); ++i) {
    const auto& g = t.stages[i];
    auto [it, fresh] = acc.try_emplace({g.kernel, g.stage});
    Acc& a = it->second;
    if (fresh) a.first = i;
    const std::int64_t d = g.end_ns - g.start_ns;
    ++a.count;
    a.total += d;
    a.max = std::max(a.max, d);
    a.wait += g.wait_ns;
    kernel_total[g.kernel] += d;
  }
  for (const auto& [key, a] : acc) {
    const double total = static_cast<double>(a.total), kt = static_cast<double>(kernel_total[key.first]);
    tb.rows.push_back({key.first, key.second, static_cast<double>(a.count) / steps, total / steps, kt > 0 ? 100.0 * total / kt : 0.0,
                       static_cast<double>(a.wait) / steps, total / static_cast<double>(a.count), static_cast<double>(a.max)});
  }
  std::stable_sort(tb.rows.begin(), tb.rows.end(), [&](const StageRow& x, const StageRow& y) {
    return acc.at({x.kernel, x.stage}).first < acc.at({y.kernel, y.stage}).first;
  });
  // The stamped launches against their kernel records.
  const auto owner = prof::stage_kernels(t);
  std::map<std::ptrdiff_t, std::int64_t> covered;
  for (std::size_t i = 0; i < t.stages.size(); ++i) {
    if (owner[i] < 0) ++tb.unmatched;
    else covered[owner[i]] += t.stages[i].end_ns - t.stages[i].start_ns;
  }
  double stage_ns = 0, kernel_ns = 0;
  for (const auto& [k, ns] : covered) {
    const auto& r = t.kernels[static_cast<std::size_t>(k)];
    stage_ns += static_cast<double>(ns);
    kernel_ns += static_cast<double>(r.end_ns - r.start_ns);
  }
  tb.launches = covered.size();
  tb.coverage_pct = kernel_ns > 0 ? 100.0 * stage_ns / kernel_ns : 0.0;
  tb.dropped = t.dropped_stamps;
  return tb;
}

}  // namespace moc::gui
