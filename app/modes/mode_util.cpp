#include "app/modes/mode_util.h"

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

}  // namespace moc
