// The kernel timeline's data: a point's profile as lanes -- one per (device, stream) holding its kernels,
// copies and sets, then one per depth of the phase ranges -- and the level-of-detail query the view draws
// from: the items of a lane inside a time window, where runs of items narrower than a few pixels are merged
// into one span (as Tracy does), so a frame costs O(pixels x log items) however many kernels there are.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "profiling/trace.h"

namespace moc::gui {

enum class ItemKind : std::uint8_t { kernel, memcpy, memset, range };

struct TimelineItem {
  std::int64_t start = 0, end = 0;
  std::int32_t color = 0;  // index into Timeline::phases: the phase it belongs to
  std::int32_t index = 0;  // into the trace's kernels / memcpys / memsets / ranges (by kind)
  ItemKind kind = ItemKind::kernel;
};

struct TimelineLane {
  std::string label;       // "GPU 0 stream 7", "CPU ops", "phases 0"
  bool phases = false;     // a lane of phase ranges (depth = its depth)
  int depth = 0;
  std::vector<TimelineItem> items;  // by start
  std::int64_t max_duration = 0;
};

struct Timeline {
  std::shared_ptr<const prof::ProfileTrace> trace;
  std::vector<TimelineLane> lanes;
  std::vector<std::string> phases;  // colour classes: innermost range names, layer.N merged into "layer"
  std::int64_t start_ns = 0, end_ns = 0;
  std::size_t items = 0;
};

Timeline build_timeline(std::shared_ptr<const prof::ProfileTrace> trace);

// One thing to draw: a single item (count 1) or `count` merged items from `first` on.
struct VisibleSpan {
  std::int64_t start = 0, end = 0;
  std::int32_t first = 0, count = 1;
};

// The spans of `lane` overlapping [t0, t1) at `ns_per_px`: items at least `min_px` wide alone, runs of
// narrower items (each starting within min_px of the previous one's end) merged. Appends to `out`.
void visible_spans(const TimelineLane& lane, std::int64_t t0, std::int64_t t1, double ns_per_px, double min_px,
                   std::vector<VisibleSpan>* out);

// The item of `lane` under time t (within `slack_ns`), the shortest when several; -1 when none.
int item_at(const TimelineLane& lane, std::int64_t t, std::int64_t slack_ns);

// A kernel's display name: its short name (its demangled name when short is empty).
const std::string& kernel_name(const prof::KernelRecord& k);

// A synthetic profile of n kernels on `streams` streams with nested phase ranges (the benchmark and tests).
prof::ProfileTrace synthetic_trace(std::size_t n, int streams);

}  // namespace moc::gui
