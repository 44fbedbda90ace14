// A scenario point as run_point's input (app/harness/point_spec.h).
#include "app/harness/point_spec.h"

namespace moc {

PointSpec to_spec(const ScenarioPoint& p, bool no_profile) {
  PointSpec s;
  s.mode = p.mode;
  s.model = p.model;
  s.batch = p.batch;
  s.seq = p.seq;
  s.prompt = p.measure.prompt;
  s.generate = p.measure.generate;
  s.cold = p.measure.cold;
  s.measure.warmup = p.measure.warmup;
  s.measure.min_reps = p.measure.min_reps;
  s.measure.max_reps = p.measure.max_reps;
  s.measure.time_bound_s = p.measure.time_bound_s;
  s.measure.target_noise = p.measure.target_noise;
  s.profile = p.profile_kernels && !no_profile;
  s.profile_steps = p.profile_steps;
  if (p.precision == "bf16" || p.precision == "bf16-fp32master") s.model.param_dtype = s.model.act_dtype = DType::bf16;
  if (p.precision == "fp32") s.model.param_dtype = s.model.act_dtype = DType::f32;
  s.fp32_master = p.precision == "bf16-fp32master";
  s.model.ffn.topk_backend = p.topk_backend == "raft" ? TopkBackend::raft : TopkBackend::own;
  s.weights = p.weights;
  s.data = p.data;
  s.zero1 = p.zero1;
  s.comm_overlap = p.comm_overlap;
  return s;
}

}  // namespace moc
