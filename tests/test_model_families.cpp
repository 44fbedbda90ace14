// The Qwen3-like (QK-norm) and Mixtral-like (mixture of experts) model families on the CPU backend:
// gradients against finite differences (the router's too, with the routing held fixed, including where the
// top-2 is at a tie), the MoE layer against a dense reference of its definition, KV-cache decoding of a
// QK-norm model, the memory model against the allocator to the byte, and what scenarios refuse.
#include <algorithm>
#include <cmath>
#include <map>

#include "app/scenario/scenario.h"
#include "model/decoder.h"
#include "model/memory_model.h"
#include "model/transformer.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;

ModelConfig small(const char* preset_name, const std::string& ffn, bool gcp, std::uint64_t seed) {
  ModelConfig c = preset(preset_name);
  c.vocab = 16;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.d_ffn = 37;  // odd: stored padded to 40 columns
  c.layers = 2;
  c.init_std = 0.5f;
  c.seed = seed;
  apply_override(c, "ffn", ffn);
  c.ffn.k = 9;
  c.ffn.gcp = gcp;
  return c;
}

// Holds every discrete choice of the last forward fixed: MoC selections (dense layers and experts) and
// the experts' routing. Returns a probe that lists them, to check the replay.
std::function<std::vector<std::int32_t>()> freeze_choices(Transformer& m, Ops& ops) {
  const ModelConfig& cfg = m.config();
  auto freeze = [&](Ffn& f) {
    if (!f.selected().defined() || cfg.ffn.kind == FfnKind::dense) return;
    Tensor keep = ops.empty(f.selected().shape(), DType::i16, workspace_tag());
    ops.copy(keep, f.selected());
    f.force_selection(keep);
  };
  for (int l = 0; l < cfg.layers; ++l) {
    if (cfg.moe()) {
      m.moe(l).force_routing(m.moe(l).routing());
      for (int e = 0; e < cfg.experts; ++e) freeze(m.moe(l).expert(e));
    } else {
      freeze(m.ffn(l));
    }
  }
  return [&m, &ops, cfg] {
    std::vector<std::int32_t> all;
    for (int l = 0; l < cfg.layers; ++l) {
      if (cfg.moe()) {
        const auto& r = m.moe(l).routing();
        all.insert(all.end(), r.begin(), r.end());
      }
    }
    return all;
  };
}

struct FamilyCase {
  const char* preset;
  const char* ffn;
  bool gcp;
};

class FamilyGrad : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(FamilyGrad, AllParameterGradientsMatchFiniteDifferences) {
  const auto c = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  auto ops = make_cpu_ops();
  const ModelConfig cfg = small(c.preset, c.ffn, c.gcp, seed);
  Transformer m(*ops, cfg);
  // Gains away from one, so that a gain used in the wrong place (q's for k's) shows.
  for (auto& p : m.params())
    if (!p.decay) {
      auto v = randn(rng, static_cast<std::size_t>(p.value.numel()), 0.3f);
      for (float& x : v) x += 1.0f;
      ops->upload_f32(p.value, v);
    }
  const int b = 2, s = 5;
  Tensor tok = ops->empty({b * s}, DType::i32, workspace_tag()), tgt = ops->empty({b * s}, DType::i32, workspace_tag());
  ops->upload_i32(tok, random_ids(rng, b * s, cfg.vocab));
  auto t = random_ids(rng, b * s, cfg.vocab);
  t[3] = -1;
  ops->upload_i32(tgt, t);
  m.allocate_grads();
  m.forward(tok, tgt, b, s, true);
  // The MoC and routing gradients are derivatives with the discrete choices held fixed.
  auto probe = freeze_choices(m, *ops);
  const auto base = probe();
  m.backward();
  auto loss = [&] { return m.forward(tok, tgt, b, s, false); };
  FdOptions opt;
  opt.samples = 6;
  opt.eps = 1e-3f;
  opt.unchanged = [&] { return probe() == base; };
  int checked = 0;
  for (auto& p : m.params()) {
    SCOPED_TRACE(p.name);
    expect_grad_matches_fd(p.name.c_str(), p.value, ops->download_f32(p.grad), loss, rng, opt);
    ++checked;
  }
  if (cfg.qk_norm) {
    EXPECT_NO_THROW(m.param("layer1.q_norm"));
    EXPECT_NO_THROW(m.param("layer1.k_norm"));
  }
  if (cfg.moe()) {
    EXPECT_NO_THROW(m.param("layer0.router"));
    EXPECT_NO_THROW(m.param("layer1.expert3.w_down"));
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGrad,
                         ::testing::Values(FamilyCase{"tiny-qwen3", "dense", false}, FamilyCase{"tiny-qwen3", "moc", true},
                                           FamilyCase{"tiny-moe", "dense", false}, FamilyCase{"tiny-moe", "dense", true},
                                           FamilyCase{"tiny-moe", "moc", false}, FamilyCase{"tiny-moe", "moc", true},
                                           FamilyCase{"tiny-moe", "moc_2:8", false}),
                         [](const ::testing::TestParamInfo<FamilyCase>& i) {
                           std::string n = std::string(i.param.preset) + "_" + i.param.ffn + (i.param.gcp ? "_gcp" : "");
                           for (char& ch : n)
                             if (ch == ':' || ch == '-') ch = 'x';
                           return n;
                         });

// All router logits equal (a zero router): every token's top-2 is a tie of all experts, broken towards
// the lower index (experts 0 and 1, weights 1/2 each), and the router's gradient at that tie -- with the
// routing held -- matches finite differences.
TEST(Moe, RouterGradientAtATieMatchesFiniteDifferences) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  auto ops = make_cpu_ops();
  const ModelConfig cfg = small("tiny-moe", "moc", false, seed);
  Transformer m(*ops, cfg);
  for (int l = 0; l < cfg.layers; ++l) ops->fill(m.param("layer" + std::to_string(l) + ".router").value, 0.0f);
  const int b = 2, s = 4;
  Tensor tok = ops->empty({b * s}, DType::i32, workspace_tag()), tgt = ops->empty({b * s}, DType::i32, workspace_tag());
  ops->upload_i32(tok, random_ids(rng, b * s, cfg.vocab));
  ops->upload_i32(tgt, random_ids(rng, b * s, cfg.vocab));
  m.allocate_grads();
  m.forward(tok, tgt, b, s, true);
  for (int l = 0; l < cfg.layers; ++l) {
    const auto& r = m.moe(l).routing();
    ASSERT_EQ(r.size(), static_cast<std::size_t>(b * s * cfg.experts_per_token));
    for (std::size_t i = 0; i < r.size(); i += 2) {
      EXPECT_EQ(r[i], 0);
      EXPECT_EQ(r[i + 1], 1);
    }
  }
  auto probe = freeze_choices(m, *ops);
  const auto base = probe();
  m.backward();
  auto loss = [&] { return m.forward(tok, tgt, b, s, false); };
  FdOptions opt;
  opt.samples = 16;
  opt.eps = 1e-3f;
  opt.unchanged = [&] { return probe() == base; };
  for (int l = 0; l < cfg.layers; ++l) {
    Param& p = m.param("layer" + std::to_string(l) + ".router");
    const auto g = ops->download_f32(p.grad);
    double norm = 0;
    for (float v : g) norm += std::fabs(v);
    EXPECT_GT(norm, 0.0) << "the router learns even from a tie";
    expect_grad_matches_fd(p.name.c_str(), p.value, g, loss, rng, opt);
  }
}

// The MoE layer is its definition: out = x + sum over each token's top-2 experts of weight * FFN_e(x),
// weights = softmax of the two largest router logits. The reference runs every expert densely on every
// token (what the grouped implementation avoids) and combines on the host.
TEST(Moe, GroupedExpertsEqualTheDenseDefinition) {
  for (const char* ffn : {"dense", "moc", "moc_2:8"}) {
    SCOPED_TRACE(ffn);
    const auto seed = fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    auto ops = make_cpu_ops();
    ModelConfig cfg = small("tiny-moe", ffn, false, seed);
    cfg.experts = 5;
    cfg.experts_per_token = 2;
    const int n = 23, d = cfg.hidden, E = cfg.experts;
    const ModelConfig& cr = cfg;
    Tensor x = random_tensor(*ops, rng, {n, d});
    Tensor router = random_tensor(*ops, rng, {d, E});
    std::vector<Tensor> wg, wu, wd;
    std::vector<FfnWeights> w;
    for (int e = 0; e < E; ++e) {
      wg.push_back(random_tensor(*ops, rng, {d, cfg.d_ffn}, 0.5f));
      wu.push_back(random_tensor(*ops, rng, {d, cfg.d_ffn}, 0.5f));
      wd.push_back(random_tensor(*ops, rng, {cfg.d_ffn, d}, 0.5f));
    }
    for (int e = 0; e < E; ++e) w.push_back({&wg[static_cast<std::size_t>(e)], &wu[static_cast<std::size_t>(e)], &wd[static_cast<std::size_t>(e)]});
    MoeFfn moe(*ops, cr, 0);
    Tensor out = ops->empty({n, d}, DType::f32, workspace_tag());
    ops->copy(out, x);
    moe.forward(x, router, w, out, false);
    const auto got = ops->download_f32(out);

    const auto xs = ops->download_f32(x), rs = ops->download_f32(router);
    std::vector<std::vector<float>> dense_out;
    for (int e = 0; e < E; ++e) {
      Ffn f(*ops, cr, 0);
      Tensor y = ops->empty({n, d}, DType::f32, workspace_tag());
      f.forward(x, w[static_cast<std::size_t>(e)], y, 0.0f, false);
      dense_out.push_back(ops->download_f32(y));
    }
    const auto& route = moe.routing();
    for (int t = 0; t < n; ++t) {
      std::vector<std::pair<float, int>> lg;
      for (int e = 0; e < E; ++e) {
        double acc = 0;
        for (int j = 0; j < d; ++j) acc += static_cast<double>(xs[static_cast<std::size_t>(t * d + j)]) * rs[static_cast<std::size_t>(j * E + e)];
        lg.push_back({static_cast<float>(acc), e});
      }
      std::stable_sort(lg.begin(), lg.end(), [](auto a, auto b) { return a.first > b.first; });
      ASSERT_EQ(route[static_cast<std::size_t>(2 * t)], lg[0].second) << "token " << t;
      ASSERT_EQ(route[static_cast<std::size_t>(2 * t + 1)], lg[1].second) << "token " << t;
      const double e0 = 1.0, e1 = std::exp(static_cast<double>(lg[1].first - lg[0].first));
      const double w0 = e0 / (e0 + e1), w1 = e1 / (e0 + e1);
      for (int j = 0; j < d; ++j) {
        const auto i = static_cast<std::size_t>(t * d + j);
        const double want = xs[i] + w0 * dense_out[static_cast<std::size_t>(lg[0].second)][i] +
                            w1 * dense_out[static_cast<std::size_t>(lg[1].second)][i];
        ASSERT_NEAR(got[i], want, 1e-4 * (1 + std::fabs(want))) << "token " << t << " column " << j;
      }
    }
  }
}

TEST(QkNorm, KvCacheDecodingReproducesFullForwardLogits) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  auto ops = make_cpu_ops();
  for (const char* ffn : {"dense", "moc"}) {
    SCOPED_TRACE(ffn);
    ModelConfig cfg = preset("tiny-qwen3");
    apply_override(cfg, "ffn", ffn);
    cfg.seed = seed;
    cfg.init_std = 0.2f;
    Transformer m(*ops, cfg);
    const int batch = 3, S = 10, P = 4, V = cfg.vocab;
    auto ids = random_ids(rng, static_cast<std::size_t>(batch) * S, V);
    Tensor tok = ops->empty({batch * S}, DType::i32, workspace_tag());
    ops->upload_i32(tok, ids);
    const auto full = ops->download_f32(m.forward_logits(tok, batch, S));
    m.prepare_decode();
    Decoder dec(m, batch, S);
    std::vector<std::int32_t> prompt;
    for (int i = 0; i < batch; ++i)  // element by element: GCC 12 -O3 misreads a range insert here (-Wstringop-overflow)
        for (int t = 0; t < P; ++t) prompt.push_back(ids[static_cast<std::size_t>(i * S + t)]);
    const auto pre = ops->download_f32(dec.prefill(prompt, P));
    for (int i = 0; i < batch; ++i)
      for (int t = 0; t < P; ++t)
        for (int v = 0; v < V; ++v)
          ASSERT_NEAR(pre[static_cast<std::size_t>((i * P + t) * V + v)], full[static_cast<std::size_t>((i * S + t) * V + v)], 1e-4);
    for (int t = P; t < S; ++t) {
      std::vector<std::int32_t> step_ids;
      for (int i = 0; i < batch; ++i) step_ids.push_back(ids[static_cast<std::size_t>(i * S + t)]);
      const auto lg = ops->download_f32(dec.step(step_ids));
      for (int i = 0; i < batch; ++i)
        for (int v = 0; v < V; ++v)
          ASSERT_NEAR(lg[static_cast<std::size_t>(i * V + v)], full[static_cast<std::size_t>((i * S + t) * V + v)], 1e-4)
              << "decode row " << i << " pos " << t;
    }
  }
}

// What a training step keeps, measured by the allocator per module, equals the engine's memory model to
// the byte -- for QK-norm attention and for the mixture of experts (whatever the routing: the kept bytes
// depend on tokens x experts_per_token only).
TEST(FamilyMemory, MeasuredActivationsEqualTheEngineModel) {
  for (const char* p : {"tiny-qwen3", "tiny-moe"})
    for (const char* ffn : {"dense", "moc", "moc_2:8"})
      for (bool gcp : {false, true}) {
        auto ops = make_cpu_ops();
        ModelConfig cfg = preset(p);
        apply_override(cfg, "ffn", ffn);
        cfg.ffn.gcp = gcp;
        cfg.act_dtype = DType::bf16;
        Transformer m(*ops, cfg);
        const int b = 3, s = 16;
        std::mt19937 rng(7);
        Tensor tok = ops->empty({b * s}, DType::i32, workspace_tag());
        ops->upload_i32(tok, random_ids(rng, b * s, cfg.vocab));
        m.forward(tok, tok, b, s, true);
        const auto live = ops->memory().live();
        const auto model = engine_activation_model(cfg, b, s);
        SCOPED_TRACE(std::string(p) + " " + cfg.ffn_name());
        EXPECT_EQ(live.module(ActModule::attention), static_cast<std::int64_t>(model.attention * cfg.layers));
        EXPECT_EQ(live.module(ActModule::ffn), static_cast<std::int64_t>(model.ffn * cfg.layers));
        EXPECT_EQ(live.module(ActModule::norm), static_cast<std::int64_t>(model.norm * cfg.layers));
        EXPECT_EQ(live.module(ActModule::residual), static_cast<std::int64_t>(model.residual * cfg.layers));
        EXPECT_EQ(live.module(ActModule::head), static_cast<std::int64_t>(model.head));
        EXPECT_EQ(live.category(MemCategory::activations), static_cast<std::int64_t>(model.total()));
        if (cfg.moe()) {
          // The routing really spreads the tokens (more than one expert gets rows).
          std::map<int, int> per_expert;
          for (int e : m.moe(0).routing()) ++per_expert[e];
          EXPECT_GT(per_expert.size(), 1u);
        }
        m.backward();
        EXPECT_EQ(ops->memory().live().category(MemCategory::activations), 0) << "backward releases everything";
      }
}

TEST(FamilyPresets, PaperSizesAndParameterCounts) {
  auto ops = make_cpu_ops();
  const ModelConfig q = preset("qwen3-300m");
  EXPECT_TRUE(q.qk_norm);
  EXPECT_EQ(q.kv_heads, 8);
  EXPECT_FLOAT_EQ(q.rope_theta, 1e6f);
  const ModelConfig m180 = preset("mixtral-180m"), m530 = preset("mixtral-530m");
  EXPECT_EQ(m180.experts, 8);
  EXPECT_EQ(m180.experts_per_token, 2);
  EXPECT_EQ(m180.hidden, 512);
  EXPECT_EQ(m180.d_ffn, 1376);
  EXPECT_EQ(m530.hidden, 768);
  EXPECT_EQ(m530.layers, 12);
  // Parameter counts from the shapes (no allocation): the names say 300M, 180M, 530M.
  auto params = [](const ModelConfig& c) {
    const double d = c.hidden, kvd = static_cast<double>(c.kv_heads) * c.head_dim();
    const double layer = 2 * d * d + 2 * d * kvd + 3 * d * c.d_ffn * c.ffn_blocks() + d * c.experts +
                         2 * d + (c.qk_norm ? 2 * c.head_dim() : 0);
    return c.layers * layer + 2 * d * c.vocab + d;
  };
  EXPECT_NEAR(params(q) / 1e6, 300, 15);
  EXPECT_NEAR(params(m180) / 1e6, 180, 10);
  EXPECT_NEAR(params(m530) / 1e6, 530, 15);
  // And the engine counts the same on a tiny member of each family, as does the memory model's count.
  for (const char* p : {"tiny", "tiny-qwen3", "tiny-moe"}) {
    const ModelConfig c = preset(p);
    Transformer t(*ops, c);
    EXPECT_EQ(static_cast<double>(t.parameter_count()), params(c)) << p;
    EXPECT_EQ(static_cast<double>(t.parameter_count()), parameter_count(c)) << p;
  }
}

TEST(FamilyScenarios, ModesTheEngineCannotRunAreRefusedBeforeAnyWork) {
  auto refused = [](const std::string& text, const std::string& needle) {
    try {
      (void)parse_scenario(text, "family.toml");
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return true;
    }
    return false;
  };
  EXPECT_TRUE(refused("mode = \"decode\"\n[model]\npreset = \"tiny-moe\"\n", "mode train only"));
  EXPECT_TRUE(refused("mode = \"ffn-decode\"\n[model]\npreset = \"mixtral-180m\"\n", "mode train only"));
  EXPECT_TRUE(refused("mode = \"train\"\n[model]\npreset = \"tiny\"\nexperts = 4\nexperts_per_token = 5\n",
                      "experts_per_token"));
  EXPECT_FALSE(refused("mode = \"train\"\n[model]\npreset = \"mixtral-180m\"\nk = 256\n[axes]\nffn = [\"dense\", \"moc\"]\n", ""));
  EXPECT_FALSE(refused("mode = \"decode\"\n[model]\npreset = \"qwen3-300m\"\n", ""));
}

}  // namespace
}  // namespace moc
