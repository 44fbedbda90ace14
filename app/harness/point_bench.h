// One sweep point, run on a backend: builds what the mode needs, measures it through measure(), and
// collects metrics, memory (peak by category, the event timeline of one repetition) and host ranges.
#pragma once
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/harness/measure.h"
#include "app/modes/text_train.h"
#include "kernels/comm.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "profiling/ranges.h"
#include "profiling/trace.h"

namespace moc {

struct PointSpec {
  std::string mode;  // train | decode | ffn-train | ffn-decode | topk
  ModelConfig model;
  int batch = 1;
  int seq = 256;
  int prompt = 128;    // decode
  int generate = 128;  // decode: tokens per prefill before the cache is refilled
  bool cold = true;    // ffn-decode: rotate weight copies; other modes: Ops::flush_caches before each repetition
  std::size_t cold_bytes = std::size_t{256} << 20;  // weight bytes to rotate through when cold
  bool fp32_master = false;
  TextData data;        // train: train on this corpus; decode: prompts from its validation documents
  std::string weights;  // train / decode: load these weights (a safetensors checkpoint) instead of random ones
  // The backend's memory limit when known (0: none): a train point whose memory-model lower bound exceeds
  // it is refused as OutOfMemory before anything is allocated, with the bytes needed and available.
  std::size_t memory_limit_bytes = 0;
  double peak_flops = 0;     // the device's dense bf16 peak (FLOP/s) for MFU; 0: not reported  // train: bf16 parameters with fp32 master weights and AdamW states
  MeasureSettings measure;
  // Profile: after the timed repetitions, profile_steps more with every kernel traced (CUPTI on the GPU, a
  // recording Ops decorator on the CPU), plus the same work traced vs untraced for the tracing overhead.
  bool profile = false;
  int profile_steps = 1;
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGINT): the point ends with Interrupted
  // train: one rank of a data-parallel point (app/harness/dist_run.h); null for one GPU. Each rank trains on its
  // own tokens (the seed offset by the rank; rank 0's are the single-GPU point's), in lockstep: the ranks
  // agree on every stop decision of the measuring loop, and rank 0 ends with every rank's metrics.
  Communicator* comm = nullptr;
  bool zero1 = false;
  bool comm_overlap = true;
};

class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

// A time series or histogram of a point (a training run's loss by step, a gate histogram by bin).
struct Series {
  std::string name;
  std::vector<double> x, y;
};

// What one repetition must move and compute, where the code already knows it (from the model config and the
// cost models of model/ and kernels/op_cost.h): the numerators of achieved GB/s, TFLOP/s and % of a floor.
// 0: the mode does not know it. Not stored as metrics.
struct RepetitionCost {
  double bytes = 0;
  double flops = 0;
};

struct PointOutcome {
  Stats stats;  // per repetition: a training step, a decode step, an FFN call, a selection
  std::vector<std::pair<std::string, double>> metrics;
  MemSnapshot peak;
  std::int64_t peak_bytes = 0;
  std::vector<MemEvent> memory_events;       // of the first measured repetition
  std::int64_t memory_baseline_bytes = 0;     // live bytes when that repetition began
  std::vector<HostRangeTimer::Event> ranges;  // of the first measured repetition
  std::optional<prof::ProfileTrace> profile;  // the profiled steps, when profiling was on and possible
  std::string profile_note;                   // why a requested profile is missing (e.g. CUPTI is busy)
  std::vector<std::pair<std::string, double>> profile_metrics;  // profile_*: appended to metrics at the end
  std::vector<Series> series;
  RepetitionCost cost;  // of one repetition, as the mode declares it (app/modes/mode.h)
};

// The mode names, in the registry's order (app/modes/mode.h).
std::vector<std::string> point_modes();
// Model FLOPs per token of a training step (PaLM's convention: 6 x the matmul parameters a token runs
// through, as executed, plus the attention's 12 x layers x hidden x seq); MFU's numerator.
double train_flops_per_token(const ModelConfig& cfg, int seq);
// The matmul parameters one token runs through in one FFN layer as executed (dense 3 d d_ffn; MoC's down
// projection on its kept channels only): the FFN term of train_flops_per_token.
double ffn_matmul_params(const ModelConfig& cfg);
// Runs the point's mode (app/modes/) through the harness: warm-up, repetitions, profile pass, shared metrics.
// Throws OutOfMemory when the point does not fit, ConfigError for an impossible point.
PointOutcome run_point(Ops& ops, const PointSpec& spec);

}  // namespace moc
