// What run_point is given for a scenario point: its mode, model, shapes and measure settings (cold, reps, ...),
// precision, weights and data, the profile pass unless no_profile. The caller sets what belongs to the process
// (stop flag, communicator, memory limit, peak FLOP/s).
#pragma once
#include "app/harness/point_bench.h"
#include "app/scenario/scenario.h"

namespace moc {

PointSpec to_spec(const ScenarioPoint& p, bool no_profile);

}  // namespace moc
