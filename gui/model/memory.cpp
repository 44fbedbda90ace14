#include "gui/model/memory.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "gui/model/sweep.h"

namespace moc::gui {

namespace {
const char* kCategoryOrder[] = {"weights", "gradients", "optimizer_state", "kv_cache", "workspace", "activations"};

int category_rank(const std::string& cls) {
  for (int i = 0; i < 6; ++i)
    if (cls.starts_with(kCategoryOrder[i])) return i;
  return 6;
}

std::string coarse(const std::string& cls) {
  const auto colon = cls.find(':');
  return colon == std::string::npos ? cls : cls.substr(0, colon);
}
}  // namespace

std::string memory_class(const std::string& category, const std::string& module) {
  if (category == "activations" && !module.empty() && module != "none") return "activations: " + module;
  return category;
}

MemoryTimeline build_memory(const std::vector<db::MemEventRecord>& events, const db::PointRecord& p) {
  MemoryTimeline m;
  m.measured_activation = metric_of(p, "peak_activation_bytes");
  m.model_activation = metric_of(p, "activation_model_bytes");
  m.paper_activation = metric_of(p, "activation_paper_bytes");

  // Classes: every category with a peak metric, and every class seen in the events.
  std::vector<std::string> classes;
  auto add_class = [&](const std::string& c) {
    if (std::find(classes.begin(), classes.end(), c) == classes.end()) classes.push_back(c);
  };
  for (const char* c : kCategoryOrder) {
    const double v = metric_of(p, std::string("peak_") + c + "_bytes");
    if (!std::isnan(v) && v > 0 && std::string(c) != "activations") add_class(c);
  }
  for (const auto& e : events) add_class(memory_class(e.category, e.module));
  std::stable_sort(classes.begin(), classes.end(),
                   [](const std::string& a, const std::string& b) { return category_rank(a) < category_rank(b); });
  if (classes.empty()) return m;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < classes.size(); ++i) index[classes[i]] = i;

  // Starting levels: a category's peak metric less the highest level its events reach (per category, then
  // given to the category's first class).
  std::map<std::string, double> level, high;
  for (const auto& e : events) {
    const std::string c = e.category;
    level[c] += static_cast<double>(e.bytes);
    high[c] = std::max(high[c], level[c]);
  }
  std::vector<double> live(classes.size(), 0.0);
  for (const char* c : kCategoryOrder) {
    const double peak = metric_of(p, std::string("peak_") + c + "_bytes");
    if (std::isnan(peak)) continue;
    const double start = std::max(0.0, peak - high[c]);
    if (start <= 0) continue;
    std::size_t slot = classes.size();
    for (std::size_t i = 0; i < classes.size(); ++i)
      if (coarse(classes[i]) == c) {
        slot = i;
        break;
      }
    if (slot == classes.size()) {
      // An activation category with no module class yet: give it its own class.
      classes.push_back(c);
      live.push_back(0.0);
      slot = classes.size() - 1;
      index[c] = slot;
    }
    live[slot] = start;
  }
  m.classes = classes;
  m.top.assign(classes.size(), {});
  m.at_peak.assign(classes.size(), 0.0);
  // An allocation long before the step (the GPU backend reserves its GEMM workspace while setting the point
  // up) would squeeze the step into a sliver: events before an idle gap longer than half the span are folded
  // into the starting levels.
  std::size_t first = 0;
  if (events.size() > 2) {
    const std::int64_t span = events.back().t_ns - events.front().t_ns;
    std::int64_t widest = 0;
    std::size_t after = 0;
    for (std::size_t i = 1; i < events.size(); ++i)
      if (events[i].t_ns - events[i - 1].t_ns > widest) {
        widest = events[i].t_ns - events[i - 1].t_ns;
        after = i;
      }
    if (span > 0 && widest * 2 > span) {
      first = after;
      m.folded_events = static_cast<int>(after);
      m.folded_gap_ms = static_cast<double>(widest) / 1e6;
    }
  }
  // Folded events are not drawn, but the level they reach still counts: a transient peak before the gap (how
  // wide the gap is depends on scheduling, so any event can end up folded) stands at t = 0, where the fold is.
  for (std::size_t i = 0; i < first; ++i) {
    live[index[memory_class(events[i].category, events[i].module)]] += static_cast<double>(events[i].bytes);
    double acc = 0;
    for (double v : live) acc += v;
    if (acc > m.peak_bytes) {
      m.peak_bytes = acc;
      m.peak_t_ms = 0;
      m.at_peak = live;
    }
  }
  const std::int64_t t0 = events.empty() ? 0 : events[first].t_ns;
  auto emit = [&](double t_ms) {
    m.t_ms.push_back(t_ms);
    double acc = 0;
    for (std::size_t i = 0; i < classes.size(); ++i) {
      acc += live[i];
      m.top[i].push_back(acc);
    }
    if (acc > m.peak_bytes) {
      m.peak_bytes = acc;
      m.peak_t_ms = t_ms;
      m.at_peak = live;
    }
  };
  emit(0);
  for (std::size_t i = first; i < events.size(); ++i) {
    const auto& e = events[i];
    const double t = static_cast<double>(e.t_ns - t0) / 1e6;
    emit(t);  // the level just before the event (a step)
    live[index[memory_class(e.category, e.module)]] += static_cast<double>(e.bytes);
    emit(t);
  }
  // A last sample a little after the last event (or at 1 ms when nothing was allocated: a flat band).
  emit(events.empty() ? 1.0 : static_cast<double>(events.back().t_ns - t0) / 1e6 * 1.02 + 1e-6);
  return m;
}

void add_peak_bar(PeakBars* bars, const std::string& label, std::int64_t point_id, const MemoryTimeline& m) {
  const std::size_t col = bars->labels.size();
  bars->labels.push_back(label);
  bars->point_ids.push_back(point_id);
  for (std::size_t i = 0; i < m.classes.size(); ++i) {
    const std::string c = coarse(m.classes[i]);
    auto it = std::find(bars->categories.begin(), bars->categories.end(), c);
    if (it == bars->categories.end()) {
      bars->categories.push_back(c);
      bars->bytes.emplace_back();
      it = bars->categories.end() - 1;
    }
    auto& row = bars->bytes[static_cast<std::size_t>(it - bars->categories.begin())];
    row.resize(col + 1, 0.0);
    row[col] += m.at_peak[i];
  }
  for (auto& row : bars->bytes) row.resize(col + 1, 0.0);
}

}  // namespace moc::gui
