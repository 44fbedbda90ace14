// The Stages view's data: stamped kernels' device-side stages (prof::StageRecord: the decode FFN's k_gate
// "gate", k_select "top-K", k_updown "up" or "gate & up" then "down"; an older profile's persistent k_step
// qkv, attention, o, gate, top-K, up, down, head, ...) summed per stage name over the layers and the
// profiled steps -- time per step, share of the kernel, barrier wait per step -- the numbers
// `mocbench stats RUN --report stage_sum` prints (app/report/profile_stats.cpp), row for row.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profiling/trace.h"

namespace moc::gui {

struct StageRow {
  std::string kernel, stage;          // "k_step", "qkv"
  double instances_per_step = 0;      // launches x layers it ran in, per profiled step
  double time_per_step_ns = 0;        // summed over its instances, per profiled step
  double share_pct = 0;               // of the kernel's stamped time (every stage of that kernel summed)
  double wait_per_step_ns = 0;        // barrier wait (mean per block) summed over its instances, per step
  double mean_ns = 0, max_ns = 0;     // of one instance
};

struct StageTable {
  std::vector<StageRow> rows;  // one per (kernel, stage) in the order stages first appear (a step top to bottom)
  // The stamped launches that have a kernel record, and how much of those records' time their stages cover
  // (the rest is the launch before the first block starts and the exit after the last block ends).
  std::size_t launches = 0;
  double coverage_pct = 0;
  std::size_t unmatched = 0;  // stages without a kernel record in the trace
  std::uint64_t dropped = 0;  // stamped launches the device buffer could not hold
};
StageTable stage_table(const prof::ProfileTrace& t);

}  // namespace moc::gui
