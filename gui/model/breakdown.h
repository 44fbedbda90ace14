// The Breakdown view's data: per point, the paper's latency breakdown (gate / up & down / top-K / other) --
// from the profile's kernel records where the point was profiled, from its timed phase metrics otherwise --
// and, for steps with phase ranges, the time of each phase. Traced bars count each op's device time exclusive
// (the default: overlapping PDL kernels counted once, the parts sum to the busy time) or inclusive.
// Labels stay readable at many bars: bars are grouped by the outermost varying axis (its value is the group
// label) and labelled by the others' values.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "db/results_db.h"
#include "profiling/phases.h"
#include "profiling/trace.h"

namespace moc::gui {

struct BreakdownBar {
  std::int64_t point_id = 0;
  std::string group;  // the outermost varying axis, "batch=4" ("" when fewer than two axes vary)
  std::string label;  // the values of the other varying axes, one per line
  std::array<double, prof::kPaperParts> parts{};  // in the group's unit
  double timed_total = 0;  // the point's timed total in the same unit (0: none)
  bool from_profile = false;
};

// Bars of one mode (one unit: us per FFN call for ffn-decode, ms per step otherwise).
struct BreakdownGroup {
  std::string mode, unit;
  std::vector<BreakdownBar> bars;
};

// Per-phase time of a step, from the phase_<name>_ms metrics: the phases that partition a step (embedding,
// attention, ffn, head, loss, optimizer, ...) and "other" = the step's time minus them.
struct PhaseBars {
  std::string mode;
  std::vector<std::string> phases;  // stacked in this order, "other" last
  std::vector<std::string> labels;  // one per point
  std::vector<std::string> groups;  // one per point: as BreakdownBar::group
  std::vector<std::int64_t> point_ids;
  std::vector<std::vector<double>> ms;  // [phase][point]
};

struct BreakdownData {
  prof::TimeMode mode = prof::TimeMode::exclusive;  // how traced bars count device time
  std::string group_axis;               // bars grouped by this axis ("" : not grouped)
  std::vector<std::string> label_axes;  // the axes the bar labels show the values of, in order
  std::vector<BreakdownGroup> groups;
  std::vector<PhaseBars> phases;
};

using ProfileOf = std::function<std::shared_ptr<const prof::ProfileTrace>(std::int64_t point_id)>;

// One point's bar (profile first, timed metrics otherwise); false when the point has neither.
bool breakdown_bar(const db::PointRecord& p, const prof::ProfileTrace* profile, BreakdownBar* out,
                   prof::TimeMode mode = prof::TimeMode::exclusive);
// Bars of a mode (and phase bars) come grouped: all of a group's points together, groups in order of first
// appearance, sweep order within.
BreakdownData build_breakdown(const std::vector<db::PointRecord>& points, const ProfileOf& profile_of,
                              prof::TimeMode mode = prof::TimeMode::exclusive);

// "batch=4 ffn=moc": the axes of p that vary across the run, separated by `sep` ("\n": a bar's tick label).
// with_names false: the values only ("moc\n4"; a bar's tick label under a header naming the axes).
std::string point_label(const db::PointRecord& p, const std::vector<std::string>& varying, const char* sep = " ",
                        bool with_names = true);

}  // namespace moc::gui
