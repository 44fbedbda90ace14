// Whole-model behaviour on the CPU backend: gradients against finite differences, KV-cache decoding
// against a full forward pass, training progress, decoding graphs and sampling, bf16 storage.
#include <algorithm>
#include <cmath>

#include "model/decoder.h"
#include "model/memory_model.h"
#include "model/trainer.h"
#include "model/transformer.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;

ModelConfig tiny_config(const std::string& ffn, bool gcp) {
  ModelConfig c = preset("tiny-gqa");
  c.vocab = 16;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.d_ffn = 37;
  c.layers = 2;
  c.init_std = 0.5f;
  apply_override(c, "ffn", ffn);
  c.ffn.k = 9;
  c.ffn.gcp = gcp;
  return c;
}

struct ModelGradCase {
  const char* ffn;
  bool gcp;
};

class ModelGrad : public ::testing::TestWithParam<ModelGradCase> {};

TEST_P(ModelGrad, AllParameterGradientsMatchFiniteDifferences) {
  const auto c = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  auto ops = make_cpu_ops();
  ModelConfig cfg = tiny_config(c.ffn, c.gcp);
  cfg.seed = seed;
  Transformer m(*ops, cfg);
  const int b = 2, s = 5;
  Tensor tok = ops->empty({b * s}, DType::i32, workspace_tag()), tgt = ops->empty({b * s}, DType::i32, workspace_tag());
  ops->upload_i32(tok, random_ids(rng, b * s, cfg.vocab));
  auto t = random_ids(rng, b * s, cfg.vocab);
  t[3] = -1;  // an ignored target
  ops->upload_i32(tgt, t);
  m.allocate_grads();
  m.forward(tok, tgt, b, s, true);
  auto selections = [&] {
    std::vector<std::int32_t> all;
    if (cfg.ffn.kind == FfnKind::dense) return all;
    for (int l = 0; l < cfg.layers; ++l) {
      auto v = ops->download_i32(m.ffn(l).selected());
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  // The MoC gradient is the derivative with the selection held fixed: finite differences replay the
  // forward's selection (a perturbation may otherwise flip a near-tie at the K-th channel).
  if (cfg.ffn.kind == FfnKind::moc)
    for (int l = 0; l < cfg.layers; ++l) {
      Tensor keep = ops->empty(m.ffn(l).selected().shape(), DType::i16, workspace_tag());
      ops->copy(keep, m.ffn(l).selected());
      m.ffn(l).force_selection(keep);
    }
  const auto base = selections();
  m.backward();
  auto loss = [&] { return m.forward(tok, tgt, b, s, false); };
  FdOptions opt;
  opt.samples = 6;
  opt.eps = 1e-3f;  // the tiny model is strongly curved (|f'''| ~ 1e3): larger steps mis-estimate
  opt.unchanged = [&] { return selections() == base; };  // holds by construction; guards the replay
  for (auto& p : m.params()) {
    SCOPED_TRACE(p.name);
    expect_grad_matches_fd(p.name.c_str(), p.value, ops->download_f32(p.grad), loss, rng, opt);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelGrad,
                         ::testing::Values(ModelGradCase{"dense", false}, ModelGradCase{"dense", true},
                                           ModelGradCase{"moc", false}, ModelGradCase{"moc", true},
                                           ModelGradCase{"moc_2:8", false}, ModelGradCase{"moc_2:8", true}),
                         [](const ::testing::TestParamInfo<ModelGradCase>& i) {
                           std::string n = std::string(i.param.ffn) + (i.param.gcp ? "_gcp" : "");
                           std::replace(n.begin(), n.end(), ':', 'x');
                           return n;
                         });

class Decode : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(Decode, KvCacheDecodingReproducesFullForwardLogits) {
  const auto [ffn, batch] = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  auto ops = make_cpu_ops();
  ModelConfig cfg = preset("tiny-gqa");
  apply_override(cfg, "ffn", ffn);
  cfg.seed = seed;
  cfg.init_std = 0.2f;
  Transformer m(*ops, cfg);
  const int S = 12, P = 5, V = cfg.vocab;
  auto ids = random_ids(rng, static_cast<std::size_t>(batch) * S, V);
  Tensor tok = ops->empty({batch * S}, DType::i32, workspace_tag());
  ops->upload_i32(tok, ids);
  auto full = ops->download_f32(m.forward_logits(tok, batch, S));

  // The decode layout switches the projections to [out, in], which the prefill then reads transposed;
  // preparing it twice (the Decoder prepares it again) changes nothing.
  m.prepare_decode();
  Decoder dec(m, batch, S);
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < batch; ++i) prompt.insert(prompt.end(), ids.begin() + i * S, ids.begin() + i * S + P);
  auto pre = ops->download_f32(dec.prefill(prompt, P));
  for (int i = 0; i < batch; ++i)
    for (int t = 0; t < P; ++t)
      for (int v = 0; v < V; ++v)
        ASSERT_NEAR(pre[static_cast<std::size_t>((i * P + t) * V + v)],
                    full[static_cast<std::size_t>((i * S + t) * V + v)], 1e-4)
            << "prefill row " << i << " pos " << t;
  for (int t = P; t < S; ++t) {
    std::vector<std::int32_t> step_ids;
    for (int i = 0; i < batch; ++i) step_ids.push_back(ids[static_cast<std::size_t>(i * S + t)]);
    auto lg = ops->download_f32(dec.step(step_ids));
    for (int i = 0; i < batch; ++i)
      for (int v = 0; v < V; ++v)
        ASSERT_NEAR(lg[static_cast<std::size_t>(i * V + v)], full[static_cast<std::size_t>((i * S + t) * V + v)],
                    1e-4)
            << "decode row " << i << " pos " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(BatchOneAndThree, Decode,
                         ::testing::Combine(::testing::Values("dense", "moc", "moc_2:8"), ::testing::Values(1, 3)),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, int>>& i) {
                           std::string n = std::string(std::get<0>(i.param)) + "_batch" + std::to_string(std::get<1>(i.param));
                           std::replace(n.begin(), n.end(), ':', 'x');
                           return n;
                         });

TEST(Generate, CapturedGraphMatchesStepByStepAndSeedsReproduce) {
  auto ops = make_cpu_ops();
  ModelConfig cfg = preset("tiny");
  apply_override(cfg, "ffn", "moc");
  cfg.init_std = 0.3f;
  Transformer m(*ops, cfg);
  std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  auto run = [&](bool graph, SamplingConfig sc) {
    Decoder d(m, 2, 20, sc);
    return d.generate(prompt, 4, 10, graph);
  };
  EXPECT_EQ(run(true, {}), run(false, {}));
  SamplingConfig hot{1.0f, 42};
  const auto a = run(true, hot);
  EXPECT_EQ(a, run(false, hot));
  EXPECT_EQ(a, run(true, hot));
  EXPECT_NE(a, run(true, {1.0f, 43})) << "a different seed should draw differently";
  for (const auto& row : a) {
    EXPECT_EQ(row.size(), 10u);
    for (auto t : row) EXPECT_TRUE(t >= 0 && t < cfg.vocab);
  }
}

TEST(Generate, GreedyPicksTheArgmaxOfTheStepLogits) {
  auto ops = make_cpu_ops();
  ModelConfig cfg = preset("tiny");
  cfg.init_std = 0.3f;
  Transformer m(*ops, cfg);
  Decoder gen(m, 1, 16);
  auto out = gen.generate({5, 9, 2}, 3, 4, false)[0];
  Decoder manual(m, 1, 16);
  auto lg = ops->download_f32(manual.prefill({5, 9, 2}, 3));
  std::vector<float> last(lg.end() - cfg.vocab, lg.end());
  std::int32_t tok = static_cast<std::int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[static_cast<std::size_t>(i)], tok);
    auto l = ops->download_f32(manual.step({tok}));
    tok = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  }
}

class Training : public ::testing::TestWithParam<const char*> {};

TEST_P(Training, TinyModelDrivesTheLossDownOnAFixedBatch) {
  auto ops = make_cpu_ops();
  ModelConfig cfg = preset("tiny");
  apply_override(cfg, "ffn", GetParam());
  Transformer m(*ops, cfg);
  const int b = 4, s = 16;
  std::mt19937 rng(fresh_seed());
  auto ids = random_ids(rng, b * s + 1, cfg.vocab);
  std::vector<std::int32_t> in(ids.begin(), ids.end() - 1), out(ids.begin() + 1, ids.end());
  Tensor tok = ops->empty({b * s}, DType::i32, workspace_tag()), tgt = ops->empty({b * s}, DType::i32, workspace_tag());
  ops->upload_i32(tok, in);
  ops->upload_i32(tgt, out);
  TrainConfig tc;
  tc.lr = 1e-2f;
  tc.warmup_steps = 5;
  tc.total_steps = 150;
  Trainer tr(m, tc);
  const double first = tr.step(tok, tgt, b, s).loss;
  double last = first;
  for (int i = 1; i < tc.total_steps; ++i) last = tr.step(tok, tgt, b, s).loss;
  EXPECT_NEAR(first, std::log(static_cast<double>(cfg.vocab)), 0.5);
  EXPECT_LT(last, first / 10.0) << GetParam() << ": " << first << " -> " << last;
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoc, Training, ::testing::Values("dense", "moc", "moc_2:8"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = i.param;
                           std::replace(n.begin(), n.end(), ':', 'x');
                           return n;
                         });

TEST(Training, LearningRateWarmsUpLinearlyThenFollowsACosine) {
  auto ops = make_cpu_ops();
  Transformer m(*ops, preset("tiny"));
  TrainConfig tc;
  tc.lr = 1.0f;
  tc.min_lr_ratio = 0.1f;
  tc.warmup_steps = 10;
  tc.total_steps = 110;
  Trainer tr(m, tc);
  EXPECT_FLOAT_EQ(tr.lr_at(1), 0.1f);
  EXPECT_FLOAT_EQ(tr.lr_at(10), 1.0f);
  EXPECT_NEAR(tr.lr_at(60), 0.55f, 1e-6);  // half-way down the cosine
  EXPECT_NEAR(tr.lr_at(110), 0.1f, 1e-6);
  EXPECT_NEAR(tr.lr_at(500), 0.1f, 1e-6);
}

TEST(Training, GradientClippingBoundsTheUpdateNorm) {
  auto ops = make_cpu_ops();
  ModelConfig cfg = preset("tiny");
  cfg.init_std = 1.0f;  // large weights, large gradients
  Transformer m(*ops, cfg);
  std::vector<std::int32_t> ids(32, 3);
  Tensor tok = ops->empty({32}, DType::i32, workspace_tag());
  ops->upload_i32(tok, ids);
  TrainConfig tc;
  tc.clip_norm = 0.01f;
  Trainer tr(m, tc);
  auto r = tr.step(tok, tok, 2, 16);
  EXPECT_GT(r.grad_norm, tc.clip_norm);  // the raw norm is reported before clipping
}

TEST(Bf16, Bf16ModelTracksTheF32Model) {
  auto ops = make_cpu_ops();
  ModelConfig cfg = preset("tiny");
  apply_override(cfg, "ffn", "moc");
  cfg.init_std = 0.1f;
  Transformer f32(*ops, cfg);
  cfg.param_dtype = cfg.act_dtype = DType::bf16;
  Transformer bf16(*ops, cfg);
  EXPECT_EQ(bf16.params()[0].value.dtype(), DType::bf16);
  std::mt19937 rng(fresh_seed());
  auto ids = random_ids(rng, 2 * 16, cfg.vocab);
  Tensor tok = ops->empty({32}, DType::i32, workspace_tag());
  ops->upload_i32(tok, ids);
  const double a = f32.forward(tok, tok, 2, 16, false), b = bf16.forward(tok, tok, 2, 16, false);
  EXPECT_NEAR(a, b, 0.02 * a);
  TrainConfig tc;
  tc.fp32_master = true;
  Trainer tr(bf16, tc);
  EXPECT_TRUE(std::isfinite(tr.step(tok, tok, 2, 16).loss));
}

TEST(Memory, MeasuredActivationsPerModuleEqualTheEngineModel) {
  for (const char* ffn : {"dense", "moc", "moc_2:8"})
    for (bool gcp : {false, true}) {
      auto ops = make_cpu_ops();
      ModelConfig cfg = preset("tiny-gqa");
      apply_override(cfg, "ffn", ffn);
      cfg.ffn.gcp = gcp;
      cfg.act_dtype = DType::bf16;
      Transformer m(*ops, cfg);
      const int b = 3, s = 16;
      Tensor tok = ops->empty({b * s}, DType::i32, workspace_tag());
      ops->upload_i32(tok, std::vector<std::int32_t>(b * s, 1));
      m.forward(tok, tok, b, s, true);
      const auto live = ops->memory().live();
      const auto model = engine_activation_model(cfg, b, s);
      SCOPED_TRACE(cfg.ffn_name());
      EXPECT_EQ(live.module(ActModule::attention), static_cast<std::int64_t>(model.attention * cfg.layers));
      EXPECT_EQ(live.module(ActModule::ffn), static_cast<std::int64_t>(model.ffn * cfg.layers));
      EXPECT_EQ(live.module(ActModule::norm), static_cast<std::int64_t>(model.norm * cfg.layers));
      EXPECT_EQ(live.module(ActModule::residual), static_cast<std::int64_t>(model.residual * cfg.layers));
      EXPECT_EQ(live.module(ActModule::head), static_cast<std::int64_t>(model.head));
      EXPECT_EQ(live.category(MemCategory::activations), static_cast<std::int64_t>(model.total()));
      m.backward();
      EXPECT_EQ(ops->memory().live().category(MemCategory::activations), 0) << "backward releases everything";
    }
}

TEST(Memory, AllocatorReportsCategoriesAndPeaksAndEnforcesItsLimit) {
  auto ops = make_cpu_ops(4096);
  MemoryTracker& t = ops->memory();
  {
    Tensor a = ops->empty({256}, DType::f32, weights_tag());  // 1 KiB
    Tensor b = ops->empty({512}, DType::bf16, {MemCategory::kv_cache});
    EXPECT_EQ(t.live().category(MemCategory::weights), 1024);
    EXPECT_EQ(t.live().category(MemCategory::kv_cache), 1024);
    EXPECT_THROW(ops->empty({1024}, DType::f32, workspace_tag()), OutOfMemory);
  }
  EXPECT_EQ(t.live().total(), 0);
  EXPECT_EQ(t.peak_total(), 2048);
  EXPECT_EQ(t.at_peak().category(MemCategory::kv_cache), 1024);
  std::int64_t sum = 0, peak = 0;
  for (const auto& e : t.events()) peak = std::max(peak, sum += e.bytes);
  EXPECT_EQ(sum, 0);
  EXPECT_EQ(peak, t.peak_total()) << "memory events replay to the reported peak";
}

}  // namespace
}  // namespace moc
