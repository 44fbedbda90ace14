// What several modes build alike: random inputs and weights, timing a piece of work on the backend.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "app/harness/measure.h"
#include "kernels/ops.h"
#include "model/config.h"

namespace moc {

class PointState;

// Times fn on the backend: CUDA events around its ops on the GPU, the host clock between two
// synchronizations elsewhere (Ops::timed).
template <class Fn>
double timed(Ops& ops, Fn&& fn) {
  return ops.timed(std::function<void()>(std::forward<Fn>(fn)));
}

inline double median_of(std::vector<double> v) { return summarize(v).median_s; }

Tensor random_tensor(Ops& ops, std::mt19937& rng, const Shape& shape, DType dt, const MemTag& tag, float std);
// An FFN weight as the Transformer stores it: `rows` x `cols` random values with `pad_rows` / `pad_cols`
// zero channels appended (ModelConfig::ffn_cols()).
Tensor random_ffn_weight(Ops& ops, std::mt19937& rng, std::int64_t rows, std::int64_t cols, std::int64_t pad_rows,
                         std::int64_t pad_cols, DType dt);
std::vector<std::int32_t> random_ids(std::mt19937& rng, std::size_t n, int vocab);

// One FFN layer's random weights (`copies` of them), input and output, for ffn-train and ffn-decode. The
// allocator's peak is reset first, so that what was measured before stays out of the point's peak memory.
struct FfnLayerBuffers {
  std::vector<Tensor> wg, wu, wd;
  Tensor x, y;
};
FfnLayerBuffers ffn_layer_buffers(PointState& state, bool train, std::int64_t rows, int copies);

// A gate analysis (model/activation_analysis.h) into a point's record: per layer the pre- and post-SiLU
// histograms (series gate_pre_hist.L<l>, gate_post_hist.L<l>, overlap_hist.L<l>) with the top-K thresholds,
// the mean kept |SiLU| mass and overlap, and the unions of B tokens against independent selections
// (union_b<B>, series union_by_batch): what text training and eval points store.
struct GateAnalysis;
struct PointOutcome;
void store_gate_analysis(const GateAnalysis& ga, PointOutcome& out);

}  // namespace moc
