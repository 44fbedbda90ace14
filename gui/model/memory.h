// The Memory view's data: a point's allocator timeline (the measured repetition's memory events) as live
// bytes per class -- weights, gradients, optimizer state, KV cache, workspace and activations per module --
// stacked; the peak and what was live at it; the paper's and mocbench's activation models beside the
// measured activations; and, across a run's points, the breakdown at each point's peak (the paper's Figure 1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "db/results_db.h"

namespace moc::gui {

struct MemoryTimeline {
  std::vector<std::string> classes;  // stacking order, bottom first ("weights", ..., "activations: ffn")
  std::vector<double> t_ms;          // step-expanded times (each event twice: before and after)
  std::vector<std::vector<double>> top;  // [class][i]: cumulative stacked bytes (the class's upper edge)
  double peak_bytes = 0, peak_t_ms = 0;
  std::vector<double> at_peak;  // [class] live bytes at the peak
  // Activation bytes: measured peak (peak_activation_bytes) and the two models, NaN when the run lacks them.
  double measured_activation = 0, model_activation = 0, paper_activation = 0;
  int folded_events = 0;     // events before a long idle gap, folded into the starting levels
  double folded_gap_ms = 0;  // that gap
  bool empty() const { return t_ms.empty(); }
};

// Classes live before the repetition began (weights, optimizer state, ...) are not in its events: their
// starting level is the class's peak metric (peak_<category>_bytes) less the highest level its events reach.
MemoryTimeline build_memory(const std::vector<db::MemEventRecord>& events, const db::PointRecord& p);

// Class of an event: its category, activations split by module ("activations: attention").
std::string memory_class(const std::string& category, const std::string& module);

// Figure 1: for each point, bytes by coarse category at its peak.
struct PeakBars {
  std::vector<std::string> categories;  // weights, gradients, optimizer_state, activations, workspace, kv_cache
  std::vector<std::string> labels;
  std::vector<std::int64_t> point_ids;
  std::vector<std::vector<double>> bytes;  // [category][point]
};
void add_peak_bar(PeakBars* bars, const std::string& label, std::int64_t point_id, const MemoryTimeline& m);

}  // namespace moc::gui
