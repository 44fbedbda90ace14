// The kernel timeline's data: a point's profile as lanes -- one per (device, stream) holding its kernels,
// copies and sets, then one per depth of the phase ranges -- and the level-of-detail query the view draws
// from: the items of a lane inside a time window, where runs of items narrower than a few pixels are merged
// into one span (as Tracy does), so a frame costs O(pixels x log items) however many kernels there are.
// Records that overlap on one lane (a PDL kernel starts before its predecessor ends) go on sub-rows of the
// lane, as Nsight Systems draws concurrent kernels: greedy interval packing, each item on the lowest row free
// at its start. Each op item also knows where its exclusive time begins (prof::device_times): [start, own)
// is the part that overlapped earlier work, drawn hatched.
// A kernel that stamps its own stages on the device (prof::StageRecord: the decode FFN's k_gate, k_select,
// k_updown; in profiles recorded before its retirement the persistent decode step k_step, per layer) gets a
// stage lane right under its stream's lane ("k_gate / k_select ... stages": the kernels it holds): one item
// per stage of each launch, coloured by the stage's name (one colour class per name, "stage: qkv", whatever
// the layer), labelled "qkv L3" ("gate" for a stage outside the layers).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "profiling/trace.h"

namespace moc::gui {

enum class ItemKind : std::uint8_t { kernel, memcpy, memset, range, stage };

struct TimelineItem {
  std::int64_t start = 0, end = 0;
  std::int64_t own = 0;    // exclusive time begins here (prof::device_times); = start for ranges and stages
  std::int32_t color = 0;  // index into Timeline::phases: its colour class (phase, or "stage: <name>")
  std::int32_t index = 0;  // into the trace's kernels / memcpys / memsets / ranges / stages (by kind)
  ItemKind kind = ItemKind::kernel;
  std::int32_t row = 0;    // sub-row of its lane
  std::int64_t inclusive_ns() const { return end - start; }
  std::int64_t exclusive_ns() const { return end - own; }
  std::int64_t wait_ns() const { return own - start; }  // the part that overlapped earlier work
  std::int64_t duration_ns(prof::TimeMode m) const { return m == prof::TimeMode::exclusive ? exclusive_ns() : inclusive_ns(); }
};

struct TimelineLane {
  std::string label;       // "GPU 0 stream 7", "CPU ops", "k_step stages", "step", "attention / ffn / head"
  bool phases = false;     // a lane of phase ranges (depth = its depth)
  bool stages = false;     // a lane of stage stamps: the stages of the kernels on the lane above it
  int depth = 0;
  // Sorted by (row, start): row r's items are items[row_begin[r], row_begin[r + 1]); on a row none overlap.
  std::vector<TimelineItem> items;
  std::vector<std::size_t> row_begin{0, 0};
  std::vector<std::int64_t> row_max_duration{0};
  int rows() const { return static_cast<int>(row_max_duration.size()); }
};

struct Timeline {
  std::shared_ptr<const prof::ProfileTrace> trace;
  std::vector<TimelineLane> lanes;
  // Colour classes: innermost range names (layer.N merged into "layer"), "memcpy", "memset", and for stage
  // items "stage: <stage name>" (stage_class).
  std::vector<std::string> phases;
  // Parallel to trace->stages: the index in trace->kernels of each stage's kernel record (prof::stage_kernels),
  // -1 when it has none (such stages go on a lane of their own after the stream lanes).
  std::vector<std::ptrdiff_t> stage_kernel;
  std::int64_t start_ns = 0, end_ns = 0;
  std::size_t items = 0;
  // Sums over every kernel, copy and set: exclusive = the busy time (prof::busy_ns); inclusive counts overlaps
  // as often as they overlap.
  std::int64_t exclusive_sum_ns = 0, inclusive_sum_ns = 0;
  std::int64_t sum_ns(prof::TimeMode m) const { return m == prof::TimeMode::exclusive ? exclusive_sum_ns : inclusive_sum_ns; }
  // A stage item's share of its kernel record's (inclusive) time, in [0, 1]; 0 when it has no record.
  double stage_share(const TimelineItem& stage) const;
};

Timeline build_timeline(std::shared_ptr<const prof::ProfileTrace> trace);

// Greedy interval packing: each item (in start order) goes on the lowest row whose last item ended by its
// start. Sets every item's row and returns the rows used (the fewest possible for intervals).
int pack_rows(std::vector<TimelineItem>* items);

// A phase lane's name from the names of the ranges it holds (first appearance order, layer.N already merged):
// "step"; "attention / ffn / head"; more than `max_names` end in " ...".
std::string phase_lane_label(const std::vector<std::string>& names, std::size_t max_names = 3);

// Time-axis ticks at round values: the step is the smallest 1, 2 or 5 x 10^n ns >= min_step_ns (at least
// 1 ns), the ticks every multiple of it in [t0, t1], labelled by format_tick.
struct TimeTick {
  double ns = 0;
  std::string label;
};
double tick_step(double min_step_ns);
std::vector<TimeTick> time_ticks(double t0_ns, double t1_ns, double min_step_ns);
// "0", "200 ns", "1.2 us", "100 us", "1.0005 ms": the value's unit, as many decimals as the step needs.
std::string format_tick(double ns, double step_ns);

// One thing to draw: a single item (count 1) or `count` merged items from `first` on.
struct VisibleSpan {
  std::int64_t start = 0, end = 0;
  std::int32_t first = 0, count = 1;
};

// The spans of sub-row `row` of `lane` overlapping [t0, t1) at `ns_per_px`: items at least `min_px` wide
// alone, runs of narrower items (each starting within min_px of the previous one's end) merged. `first`
// indexes lane.items. Appends to `out`.
void visible_spans(const TimelineLane& lane, int row, std::int64_t t0, std::int64_t t1, double ns_per_px, double min_px,
                   std::vector<VisibleSpan>* out);

// The item (index into lane.items) on sub-row `row` of `lane` under time t (within `slack_ns`), the shortest
// when several; -1 when none.
int item_at(const TimelineLane& lane, int row, std::int64_t t, std::int64_t slack_ns);

// A kernel's display name: its short name (its demangled name when short is empty).
const std::string& kernel_name(const prof::KernelRecord& k);

// A stage's colour class: "stage: qkv" (one per stage name, every layer alike).
std::string stage_class(const std::string& stage);
// A stage item's label: "qkv L3"; a stage outside the layers by its name alone ("head").
std::string stage_label(const prof::StageRecord& s);

// A synthetic profile of n kernels on `streams` streams with nested phase ranges (the benchmark and tests).
// pdl: every third kernel starts 500 ns before its predecessor on the stream ends (programmatic dependent
// launch), so the lane needs two sub-rows and exclusive time differs from inclusive.
prof::ProfileTrace synthetic_trace(std::size_t n, int streams, bool pdl = false);

// A synthetic profile of a multi-stage stamped kernel as older databases hold the retired persistent decode
// step (the views must still show them): per step one "k_step" launch on GPU 0 stream 7 (after a short
// "k_embed" kernel on the same stream), stamped as that kernel was -- "start", per layer qkv, attention, o,
// gate, top-K, up, down (each with a barrier wait), then "head" and "output" -- tiling the launch from 300 ns
// after its record starts to its end. Stage durations vary with the seed. (Test and benchmark data: it
// covers layers, barrier waits and many stages per launch, which the decode FFN kernels' stamps do not.)
prof::ProfileTrace synthetic_stage_trace(int steps, int layers, std::uint32_t seed = 1);

}  // namespace moc::gui
