// ffn-train: one FFN layer's forward and backward on batch x seq rows, weights as the Transformer stores them
// (random; zero padding channels). Needs no model beyond the layer. Declares the layer's model FLOPs by the
// convention of train_flops_per_token (6 x the FFN's matmul parameters as executed, per row).
#include "app/modes/mode.h"
#include "app/modes/mode_util.h"
#include "model/ffn.h"

namespace moc {

namespace {

void run_ffn_train(PointState& st) {
  Ops& ops = st.ops();
  const ModelConfig& cfg = st.config();
  const std::int64_t rows = static_cast<std::int64_t>(st.spec().batch) * st.spec().seq;
  FfnLayerBuffers b = ffn_layer_buffers(st, /*train=*/true, rows, /*copies=*/1);
  Ffn ffn(ops, cfg, 0);
  Tensor gg = ops.empty(b.wg[0].shape(), cfg.param_dtype, {MemCategory::gradients});
  Tensor gu = ops.empty(b.wu[0].shape(), cfg.param_dtype, {MemCategory::gradients});
  Tensor gd = ops.empty(b.wd[0].shape(), cfg.param_dtype, {MemCategory::gradients});
  Tensor dx = ops.empty({rows, cfg.hidden}, cfg.act_dtype, workspace_tag());
  std::vector<double> fwd, bwd;  // the warm-up and timed repetitions' (not the profile pass's)
  const std::function<double()> sample = [&] {
    return st.repetition([&] {
      const FfnWeights w{&b.wg[0], &b.wu[0], &b.wd[0]};
      const double f = timed(ops, [&] { ffn.forward(b.x, w, b.y, 0.0f, true, st.ranges()); });
      const double g = timed(ops, [&] { ffn.backward(b.x, b.y, w, dx, {&gg, &gu, &gd}, st.ranges()); });
      if (st.timing()) {
        fwd.push_back(f);
        bwd.push_back(g);
      }
    });
  };
  const Stats& stats = st.exec(sample);
  st.set_cost({.flops = 6 * ffn_matmul_params(cfg) * static_cast<double>(rows)});
  st.metric("fwd_bwd_ms", stats.median_s * 1e3);
  st.metric("forward_ms", median_of(fwd) * 1e3);
  st.metric("backward_ms", median_of(bwd) * 1e3);
  st.metric("tokens_per_s", static_cast<double>(rows) / stats.median_s);
  st.metric("ffn_activation_bytes", static_cast<double>(Ffn::stored_bytes(cfg, rows)));
}

}  // namespace

extern const Mode kFfnTrainMode;
const Mode kFfnTrainMode{
    .name = "ffn-train",
    .needs = "one FFN layer's random weights and gradients",
    .repetition = "one FFN layer's forward and backward on batch x seq rows",
    .flush_when_cold = true,
    .refuse = nullptr,
    .run = run_ffn_train,
};

}  // namespace moc
