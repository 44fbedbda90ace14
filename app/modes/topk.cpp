// topk: the MoC channel selection (Ops::moc_select) alone, on random gate values of batch x seq rows; a dense
// model's point selects its ffn.k channels by the same rule. Needs no model beyond its config. Declares the
// selection's bytes and FLOPs (kernels/op_cost.h's moc_select: the gate values in, the indices out).
#include "app/modes/mode.h"
#include "app/modes/mode_util.h"
#include "kernels/op_cost.h"

namespace moc {

namespace {

void run_topk(PointState& st) {
  Ops& ops = st.ops();
  const ModelConfig& cfg = st.config();
  const std::int64_t rows = static_cast<std::int64_t>(st.spec().batch) * st.spec().seq;
  Tensor g = random_tensor(ops, st.rng(), {rows, cfg.d_ffn}, cfg.act_dtype, workspace_tag(), 1.0f);
  const MocSelect sel = cfg.ffn.kind == FfnKind::moc ? cfg.ffn.selection()
                                                     : MocSelect{cfg.ffn.k, 0, 0, cfg.ffn.rule, cfg.ffn.topk_backend};
  if (sel.kept(cfg.d_ffn) <= 0) throw ConfigError("topk mode needs k > 0");
  Tensor idx = ops.empty({rows, sel.kept(cfg.d_ffn)}, DType::i16, workspace_tag());
  const std::function<double()> sample = [&] {
    return st.repetition([&] {
      ScopedRange sr(st.ranges(), "ffn.topk");
      ops.moc_select(g, sel, idx);
    });
  };
  const Stats& stats = st.exec(sample);
  const OpCost c = cost::moc_select(g, idx);
  st.set_cost({.bytes = static_cast<double>(c.bytes), .flops = static_cast<double>(c.flops)});
  st.metric("latency_us", stats.median_s * 1e6);
  st.metric("rows_per_s", static_cast<double>(rows) / stats.median_s);
}

}  // namespace

extern const Mode kTopkMode;
const Mode kTopkMode{
    .name = "topk",
    .needs = "random gate values; the selection rule of the model's FFN (ffn.k for a dense model)",
    .repetition = "one selection of the kept channels of batch x seq rows of gate values",
    .flush_when_cold = true,
    .refuse = nullptr,
    .run = run_topk,
};

}  // namespace moc
