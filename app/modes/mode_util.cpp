#include "app/modes/mode_util.h"

#include "model/activation_analysis.h"

#include "app/modes/mode.h"

namespace moc {

Tensor random_tensor(Ops& ops, std::mt19937& rng, const Shape& shape, DType dt, const MemTag& tag, float std) {
  Tensor t = ops.empty(shape, dt, tag);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  for (auto& x : v) x = d(rng);
  ops.upload_f32(t, v);
  return t;
}

Tensor random_ffn_weight(Ops& ops, std::mt19937& rng, std::int64_t rows, std::int64_t cols, std::int64_t pad_rows,
                         std::int64_t pad_cols, DType dt) {
  const std::int64_t R = rows + pad_rows, C = cols + pad_cols;
  Tensor t = ops.empty({R, C}, dt, weights_tag());
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> v(static_cast<std::size_t>(R * C), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) v[static_cast<std::size_t>(r * C + c)] = d(rng);
  ops.upload_f32(t, v);
  return t;
}

std::vector<std::int32_t> random_ids(std::mt19937& rng, std::size_t n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

FfnLayerBuffers ffn_layer_buffers(PointState& state, bool train, std::int64_t rows, int copies) {
  Ops& ops = state.ops();
  const ModelConfig& cfg = state.config();
  std::mt19937& rng = state.rng();
  ops.memory().reset_peak();
  // ffn-decode keeps W_gate and W_up transposed (the decode layout: a channel is one contiguous row);
  // ffn-train stores them as the Transformer does: [d, ffn_cols] / [ffn_cols, d], zero padding channels.
  const std::int64_t hid = cfg.hidden, ffn_ch = cfg.d_ffn, pad = train ? cfg.ffn_cols() - cfg.d_ffn : 0;
  FfnLayerBuffers b;
  for (int c = 0; c < copies; ++c) {
    for (auto* w : {&b.wg, &b.wu})
      w->push_back(train ? random_ffn_weight(ops, rng, hid, ffn_ch, 0, pad, cfg.param_dtype)
                         : random_ffn_weight(ops, rng, ffn_ch, hid, 0, 0, cfg.param_dtype));
    b.wd.push_back(random_ffn_weight(ops, rng, ffn_ch, hid, pad, 0, cfg.param_dtype));
  }
  b.x = random_tensor(ops, rng, {rows, cfg.hidden}, cfg.act_dtype, workspace_tag(), 1.0f);
  b.y = ops.empty({rows, cfg.hidden}, cfg.act_dtype, workspace_tag());
  return b;
}

void store_gate_analysis(const GateAnalysis& ga, PointOutcome& out) {
  auto& m = out.metrics;
  double mass = 0, overlap = 0;
  for (std::size_t l = 0; l < ga.layers.size(); ++l) {
    const auto& L = ga.layers[l];
    const std::string suffix = ".L" + std::to_string(l);
    auto hist = [&](const std::string& name, const Histogram& h) {
      Series s{name + suffix, {}, {}};
      for (std::size_t i = 0; i < h.density.size(); ++i) {
        s.x.push_back(h.centre(i));
        s.y.push_back(h.density[i]);
      }
      out.series.push_back(std::move(s));
    };
    hist("gate_pre_hist", L.pre);
    hist("gate_post_hist", L.post);
    hist("overlap_hist", L.overlap);
    m.push_back({"gate_threshold_pre" + suffix, L.threshold_pre});
    m.push_back({"gate_threshold_post" + suffix, L.threshold_post});
    m.push_back({"overlap_mean" + suffix, L.overlap_mean});
    mass += L.kept_mass;
    overlap += L.overlap_mean;
  }
  const double nl = static_cast<double>(std::max<std::size_t>(ga.layers.size(), 1));
  m.push_back({"analysis_kept", ga.kept});
  m.push_back({"analysis_tokens", ga.tokens});
  m.push_back({"kept_silu_mass", mass / nl});
  m.push_back({"overlap_mean", overlap / nl});
  Series u{"union_by_batch", {}, {}}, ui{"union_independent_by_batch", {}, {}};
  for (std::size_t b = 0; b < ga.union_mean.size(); ++b) {
    u.x.push_back(static_cast<double>(b + 1));
    u.y.push_back(ga.union_mean[b]);
    ui.x.push_back(static_cast<double>(b + 1));
    ui.y.push_back(ga.union_independent[b]);
    m.push_back({"union_b" + std::to_string(b + 1), ga.union_mean[b]});
    m.push_back({"union_independent_b" + std::to_string(b + 1), ga.union_independent[b]});
  }
  out.series.push_back(std::move(u));
  out.series.push_back(std::move(ui));
}

}  // namespace moc
