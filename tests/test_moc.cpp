// Mixture-of-Channels: selection semantics, FFN variants against finite differences and a masked dense
// reference, GCP equivalence, stored activation bytes, and Theorem 1 (appendix A) by construction.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/config.h"
#include "model/ffn.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;

std::vector<std::int32_t> select_rows(Ops& o, const std::vector<float>& g, int n, int F, MocSelect sel) {
  Tensor gt = o.empty({n, F}, DType::f32, workspace_tag());
  o.upload_f32(gt, g);
  Tensor idx = o.empty({n, sel.kept(F)}, DType::i16, workspace_tag());
  o.moc_select(gt, sel, idx);
  return o.download_i32(idx);
}

TEST(MocSelect, RowTopKTakesTheLargestGateValuesNotAbsoluteValues) {
  auto o = make_cpu_ops();
  std::vector<float> g = {0.5f, -9.0f, 3.0f, 2.0f, -0.1f, 7.0f};
  auto idx = select_rows(*o, g, 1, 6, {3, 0, 0, SelectRule::gate});
  EXPECT_EQ(idx, (std::vector<std::int32_t>{2, 3, 5}));  // ascending channel order
}

TEST(MocSelect, TiesGoToTheLowerChannelIndex) {
  auto o = make_cpu_ops();
  std::vector<float> g(10, 1.0f);
  g[7] = 2.0f;
  EXPECT_EQ(select_rows(*o, g, 1, 10, {3, 0, 0, SelectRule::gate}), (std::vector<std::int32_t>{0, 1, 7}));
  std::vector<float> grouped(16, 0.0f);
  EXPECT_EQ(select_rows(*o, grouped, 1, 16, {0, 2, 8, SelectRule::gate}), (std::vector<std::int32_t>{0, 1, 8, 9}));
}

TEST(MocSelect, NaNIsNeverSelectedAheadOfANumber) {
  auto o = make_cpu_ops();
  std::vector<float> g = {std::nanf(""), -5.0f, std::nanf(""), -6.0f};
  EXPECT_EQ(select_rows(*o, g, 1, 4, {2, 0, 0, SelectRule::gate}), (std::vector<std::int32_t>{1, 3}));
}

TEST(MocSelect, GroupedKeepsAOfEveryBAndMinAROfAPartialLastGroup) {
  MocSelect s28{0, 2, 8, SelectRule::gate};
  EXPECT_EQ(s28.kept(5461), 2 * 682 + 2);  // 5461 = 682 * 8 + 5: the partial group of 5 keeps 2
  EXPECT_EQ(s28.kept(17), 2 * 2 + 1);      // partial group of 1 keeps 1
  EXPECT_EQ((MocSelect{0, 3, 8, SelectRule::gate}.kept(10)), 3 + 2);
  auto o = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  const int n = 3, F = 21;  // groups [0,8) [8,16) [16,21)
  auto g = randn(rng, n * F);
  auto idx = select_rows(*o, g, n, F, s28);
  ASSERT_EQ(idx.size(), static_cast<std::size_t>(n * s28.kept(F)));
  const int kept = s28.kept(F);
  for (int r = 0; r < n; ++r)
    for (int g0 = 0; g0 < F; g0 += 8) {
      const int len = std::min(8, F - g0);
      std::vector<int> order(static_cast<std::size_t>(len));
      std::iota(order.begin(), order.end(), g0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return g[r * F + a] > g[r * F + b]; });
      std::vector<int> want(order.begin(), order.begin() + 2);
      std::sort(want.begin(), want.end());
      const int slot = (g0 / 8) * 2;
      EXPECT_EQ(idx[static_cast<std::size_t>(r * kept + slot)], want[0]);
      EXPECT_EQ(idx[static_cast<std::size_t>(r * kept + slot + 1)], want[1]);
    }
}

TEST(MocSelect, SiluRuleRanksSiluOutputsAndAbsSiluRanksMagnitudes) {
  auto o = make_cpu_ops();
  // SiLU(-1) = -0.269, SiLU(-5) = -0.034, SiLU(0.1) = 0.052
  std::vector<float> g = {-1.0f, -5.0f, 0.1f};
  EXPECT_EQ(select_rows(*o, g, 1, 3, {2, 0, 0, SelectRule::gate}), (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(select_rows(*o, g, 1, 3, {2, 0, 0, SelectRule::silu}), (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(select_rows(*o, g, 1, 3, {2, 0, 0, SelectRule::abs_silu}), (std::vector<std::int32_t>{0, 2}));
}

TEST(MocSelect, OddWidthRowTopKMatchesASort) {
  auto o = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  const int n = 8, F = 5461, K = 1024;
  auto g = randn(rng, n * F);
  auto idx = select_rows(*o, g, n, F, {K, 0, 0, SelectRule::gate});
  for (int r = 0; r < n; ++r) {
    std::vector<float> row(g.begin() + r * F, g.begin() + (r + 1) * F);
    std::nth_element(row.begin(), row.begin() + (K - 1), row.end(), std::greater<>());
    const float kth = row[K - 1];
    for (int j = 0; j < K; ++j) EXPECT_GE(g[static_cast<std::size_t>(r * F + idx[static_cast<std::size_t>(r * K + j)])], kth);
    EXPECT_TRUE(std::is_sorted(idx.begin() + r * K, idx.begin() + (r + 1) * K));
  }
}

// ---- FFN variants
struct FfnFixture : public ::testing::Test {
  void make(const std::string& ffn, int d, int F, int k, bool gcp, SelectRule rule = SelectRule::gate) {
    cfg = preset("tiny");
    cfg.hidden = d;
    cfg.heads = cfg.kv_heads = 1;  // the FFN alone: attention shape only needs to validate
    cfg.d_ffn = F;
    apply_override(cfg, "ffn", ffn);
    cfg.ffn.k = k;
    cfg.ffn.gcp = gcp;
    cfg.ffn.rule = rule;
    cfg.validate();
  }
  void random_weights(std::mt19937& rng, float std = 0.5f) {
    wg = random_tensor(o, rng, {cfg.hidden, cfg.d_ffn}, std);
    wu = random_tensor(o, rng, {cfg.hidden, cfg.d_ffn}, std);
    wd = random_tensor(o, rng, {cfg.d_ffn, cfg.hidden}, std);
  }
  FfnWeights weights() const { return {&wg, &wu, &wd}; }
  // Runs forward+backward of an FFN with dout; returns output, dx and weight gradients.
  struct Result {
    std::vector<float> out, dx, dwg, dwu, dwd;
    std::vector<std::int32_t> idx;
  };
  Result run(Ffn& f, const Tensor& x, const std::vector<float>& dout_host) {
    const std::int64_t n = x.rows();
    Tensor out = poisoned(o, {n, cfg.hidden});
    f.forward(x, weights(), out, 0.0f, true);
    Result r;
    r.out = o.download_f32(out);
    if (cfg.ffn.kind == FfnKind::moc) r.idx = o.download_i32(f.selected());
    Tensor dout = o.empty({n, cfg.hidden}, DType::f32, workspace_tag());
    o.upload_f32(dout, dout_host);
    Tensor dx = poisoned(o, {n, cfg.hidden});
    Tensor gg = o.empty(wg.shape(), DType::f32, workspace_tag()), gu = o.empty(wu.shape(), DType::f32, workspace_tag()),
           gd = o.empty(wd.shape(), DType::f32, workspace_tag());
    o.fill(gg, 0.0f);
    o.fill(gu, 0.0f);
    o.fill(gd, 0.0f);
    f.backward(x, dout, weights(), dx, {&gg, &gu, &gd});
    r.dx = o.download_f32(dx);
    r.dwg = o.download_f32(gg);
    r.dwu = o.download_f32(gu);
    r.dwd = o.download_f32(gd);
    return r;
  }
  std::unique_ptr<Ops> ops = make_cpu_ops();
  Ops& o = *ops;
  ModelConfig cfg;
  Tensor wg, wu, wd;
};

struct VariantCase {
  const char* ffn;
  int k;
  bool gcp;
  SelectRule rule;
};

class FfnVariantGrad : public FfnFixture, public ::testing::WithParamInterface<VariantCase> {};

TEST_P(FfnVariantGrad, MatchesFiniteDifferences) {
  const auto c = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  make(c.ffn, 10, 37, c.k, c.gcp, c.rule);
  random_weights(rng);
  const int n = 5;
  Tensor x = random_tensor(o, rng, {n, cfg.hidden});
  auto w = randn(rng, static_cast<std::size_t>(n) * cfg.hidden);
  Ffn f(o, cfg, 0);
  auto r = run(f, x, w);
  Tensor out = o.empty({n, cfg.hidden}, DType::f32, workspace_tag());
  Ffn probe(o, cfg, 0);
  auto loss = [&] {
    probe.forward(x, weights(), out, 0.0f, false);
    return weighted_sum(o, out, w);
  };
  if (cfg.ffn.kind == FfnKind::moc) {  // differentiate with the forward's selection held fixed
    Tensor keep = o.empty(f.selected().shape(), DType::i16, workspace_tag());
    std::vector<std::uint16_t> ids(r.idx.begin(), r.idx.end());
    o.upload(keep, ids.data());
    probe.force_selection(keep);
  }
  FdOptions opt;
  opt.eps = 2e-3f;
  expect_grad_matches_fd("x", x, r.dx, loss, rng, opt);
  expect_grad_matches_fd("w_gate", wg, r.dwg, loss, rng, opt);
  expect_grad_matches_fd("w_up", wu, r.dwu, loss, rng, opt);
  expect_grad_matches_fd("w_down", wd, r.dwd, loss, rng, opt);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, FfnVariantGrad,
    ::testing::Values(VariantCase{"dense", 0, false, SelectRule::gate}, VariantCase{"dense", 0, true, SelectRule::gate},
                      VariantCase{"moc", 9, false, SelectRule::gate}, VariantCase{"moc", 9, true, SelectRule::gate},
                      VariantCase{"moc_2:8", 0, false, SelectRule::gate}, VariantCase{"moc_2:8", 0, true, SelectRule::gate},
                      VariantCase{"moc", 9, false, SelectRule::silu}, VariantCase{"moc_3:5", 0, true, SelectRule::abs_silu}),
    [](const ::testing::TestParamInfo<VariantCase>& i) {
      std::string n = std::string(i.param.ffn) + (i.param.gcp ? "_gcp_" : "_") + std::string(select_rule_name(i.param.rule));
      std::replace(n.begin(), n.end(), ':', 'x');
      return n;
    });

// Host double-precision SwiGLU with a per-row channel mask: the masked dense reference.
struct HostRef {
  std::vector<double> out, dx, dwg, dwu, dwd;
};
HostRef host_masked_ffn(const std::vector<float>& x, const std::vector<float>& wg, const std::vector<float>& wu,
                        const std::vector<float>& wd, const std::vector<float>& dout, int n, int d, int F,
                        const std::function<bool(int, int)>& keep) {
  HostRef r;
  r.out.assign(static_cast<std::size_t>(n * d), 0);
  r.dx.assign(static_cast<std::size_t>(n * d), 0);
  r.dwg.assign(static_cast<std::size_t>(d * F), 0);
  r.dwu.assign(static_cast<std::size_t>(d * F), 0);
  r.dwd.assign(static_cast<std::size_t>(F * d), 0);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < F; ++c) {
      if (!keep(i, c)) continue;
      double g = 0, u = 0;
      for (int a = 0; a < d; ++a) {
        g += static_cast<double>(x[i * d + a]) * wg[a * F + c];
        u += static_cast<double>(x[i * d + a]) * wu[a * F + c];
      }
      const double sg = 1 / (1 + std::exp(-g)), s = g * sg, z = s * u;
      double dz = 0;
      for (int a = 0; a < d; ++a) {
        r.out[static_cast<std::size_t>(i * d + a)] += z * wd[c * d + a];
        dz += static_cast<double>(dout[i * d + a]) * wd[c * d + a];
        r.dwd[static_cast<std::size_t>(c * d + a)] += z * dout[i * d + a];
      }
      const double dg = dz * u * sg * (1 + g * (1 - sg)), du = dz * s;
      for (int a = 0; a < d; ++a) {
        r.dwg[static_cast<std::size_t>(a * F + c)] += x[i * d + a] * dg;
        r.dwu[static_cast<std::size_t>(a * F + c)] += x[i * d + a] * du;
        r.dx[static_cast<std::size_t>(i * d + a)] += dg * wg[a * F + c] + du * wu[a * F + c];
      }
    }
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " element " << i;
}

using FfnEquivalence = FfnFixture;

TEST_F(FfnEquivalence, MocEqualsTheMaskedDenseReference) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (const char* variant : {"moc", "moc_2:8"}) {
    make(variant, 12, 37, 7, false);
    random_weights(rng);
    const int n = 6;
    Tensor x = random_tensor(o, rng, {n, cfg.hidden});
    auto dout = randn(rng, static_cast<std::size_t>(n) * cfg.hidden);
    Ffn f(o, cfg, 0);
    auto r = run(f, x, dout);
    const int K = cfg.kept_channels();
    auto keep = [&](int i, int c) {
      return std::find(r.idx.begin() + i * K, r.idx.begin() + (i + 1) * K, c) != r.idx.begin() + (i + 1) * K;
    };
    auto ref = host_masked_ffn(o.download_f32(x), o.download_f32(wg), o.download_f32(wu), o.download_f32(wd), dout, n,
                               cfg.hidden, cfg.d_ffn, keep);
    expect_close(r.out, ref.out, 1e-5, "out");
    expect_close(r.dx, ref.dx, 1e-5, "dx");
    expect_close(r.dwg, ref.dwg, 1e-5, "dW_gate");
    expect_close(r.dwu, ref.dwu, 1e-5, "dW_up");
    expect_close(r.dwd, ref.dwd, 1e-5, "dW_down");
  }
}

TEST_F(FfnEquivalence, MocWithKEqualToDffnEqualsDense) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  make("dense", 12, 37, 0, false);
  random_weights(rng);
  const int n = 5;
  Tensor x = random_tensor(o, rng, {n, cfg.hidden});
  auto dout = randn(rng, static_cast<std::size_t>(n) * cfg.hidden);
  Ffn dense(o, cfg, 0);
  auto a = run(dense, x, dout);
  ModelConfig dense_cfg = cfg;
  make("moc", 12, 37, 37, false);
  Ffn full(o, cfg, 0);
  auto b = run(full, x, dout);
  auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  expect_close(b.out, as_double(a.out), 1e-5, "out");
  expect_close(b.dx, as_double(a.dx), 1e-5, "dx");
  expect_close(b.dwg, as_double(a.dwg), 1e-5, "dW_gate");
  expect_close(b.dwu, as_double(a.dwu), 1e-5, "dW_up");
  expect_close(b.dwd, as_double(a.dwd), 1e-5, "dW_down");
}

TEST_F(FfnEquivalence, GcpOnAndOffGiveIdenticalGradients) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (const char* variant : {"dense", "moc", "moc_2:8"}) {
    make(variant, 12, 37, 9, false);
    random_weights(rng);
    const int n = 5;
    Tensor x = random_tensor(o, rng, {n, cfg.hidden});
    auto dout = randn(rng, static_cast<std::size_t>(n) * cfg.hidden);
    Ffn plain(o, cfg, 0);
    auto a = run(plain, x, dout);
    cfg.ffn.gcp = true;
    Ffn gcp(o, cfg, 0);
    auto b = run(gcp, x, dout);
    EXPECT_EQ(a.out, b.out) << variant;
    EXPECT_EQ(a.dx, b.dx) << variant;
    EXPECT_EQ(a.dwg, b.dwg) << variant;
    EXPECT_EQ(a.dwu, b.dwu) << variant;
    EXPECT_EQ(a.dwd, b.dwd) << variant;
  }
}

TEST_F(FfnEquivalence, MeasuredActivationBytesEqualWhatEachVariantDeclares) {
  std::mt19937 rng(fresh_seed());
  for (const char* variant : {"dense", "moc", "moc_2:8"})
    for (bool gcp : {false, true})
      for (DType act : {DType::f32, DType::bf16}) {
        make(variant, 16, 37, 9, gcp);
        cfg.act_dtype = act;
        random_weights(rng);
        const int n = 7;
        Tensor x = random_tensor(o, rng, {n, cfg.hidden});
        Tensor out = o.empty({n, cfg.hidden}, DType::f32, workspace_tag());
        Ffn f(o, cfg, 3);
        const auto before = o.memory().live().category(MemCategory::activations);
        f.forward(x, weights(), out, 0.0f, true);
        const auto stored = o.memory().live().category(MemCategory::activations) - before;
        EXPECT_EQ(stored, Ffn::stored_bytes(cfg, n, cfg.d_ffn)) << cfg.ffn_name() << " " << dtype_name(act);
        EXPECT_EQ(o.memory().live().module(ActModule::ffn), stored);
        f.release();
        EXPECT_EQ(o.memory().live().category(MemCategory::activations), before);
      }
  // The paper's Table 2 proportions in elements: MoC keeps bs*K*(4 values + 1 index).
  make("moc", 16, 37, 9, false);
  cfg.act_dtype = DType::bf16;
  EXPECT_EQ(Ffn::stored_bytes(cfg, 10), 10 * 9 * 5 * 2);
  cfg.ffn.gcp = true;
  EXPECT_EQ(Ffn::stored_bytes(cfg, 10), 10 * 9 * 3 * 2);
}

// ---- Theorem 1 (appendix A): a dense FFN of width d_ffn embeds into MoC_{a:b} of width b*ceil(d_ffn/a).
struct Embedding {
  int width;
  std::vector<int> column_of;  // dense channel c -> MoC channel
};
Embedding theorem1_map(int F, int a, int b) {
  Embedding e;
  e.width = b * ((F + a - 1) / a);
  for (int c = 0; c < F; ++c) e.column_of.push_back((c / a) * b + c % a);  // j - 1 = k'b + r', c = k'a + r'
  return e;
}

class Theorem1 : public FfnFixture {
 protected:
  // Builds the dense FFN (d, F) and its MoC_{2:8} embedding with the given selection rule; runs both.
  void run_both(SelectRule rule, std::mt19937& rng, const std::vector<float>* x_host = nullptr) {
    const int d = 12, F = 37, n = 6;
    make("dense", d, F, 0, false);
    random_weights(rng);
    dense_cfg = cfg;
    x = random_tensor(o, rng, {n, d});
    if (x_host) o.upload_f32(x, *x_host);
    dout = randn(rng, static_cast<std::size_t>(n) * d);
    Ffn dense(o, dense_cfg, 0);
    dense_r = run(dense, x, dout);
    dwg = o.download_f32(wg);
    dwu = o.download_f32(wu);
    dwd = o.download_f32(wd);

    map = theorem1_map(F, 2, 8);
    const int W = map.width;
    std::vector<float> mg(static_cast<std::size_t>(d * W), 0.0f), mu(mg.size(), 0.0f), md(mg.size(), 0.0f);
    for (int c = 0; c < F; ++c) {
      const int j = map.column_of[static_cast<std::size_t>(c)];
      for (int a = 0; a < d; ++a) {
        mg[static_cast<std::size_t>(a * W + j)] = dwg[static_cast<std::size_t>(a * F + c)];
        mu[static_cast<std::size_t>(a * W + j)] = dwu[static_cast<std::size_t>(a * F + c)];
        md[static_cast<std::size_t>(j * d + a)] = dwd[static_cast<std::size_t>(c * d + a)];  // the proof's W_down
      }
    }
    make("moc_2:8", d, W, 0, false, rule);
    wg = o.empty({d, W}, DType::f32, weights_tag());
    wu = o.empty({d, W}, DType::f32, weights_tag());
    wd = o.empty({W, d}, DType::f32, weights_tag());
    o.upload_f32(wg, mg);
    o.upload_f32(wu, mu);
    o.upload_f32(wd, md);
    Ffn moc(o, cfg, 0);
    moc_r = run(moc, x, dout);
  }
  ModelConfig dense_cfg;
  Tensor x;
  std::vector<float> dout, dwg, dwu, dwd;
  Result dense_r, moc_r;
  Embedding map;
};

TEST_F(Theorem1, AbsSiluSelectionReproducesTheDenseFfnAndItsGradients) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  run_both(SelectRule::abs_silu, rng);
  const int d = 12, F = 37, W = map.width;
  ASSERT_EQ(W, 8 * 19);
  for (std::size_t i = 0; i < dense_r.out.size(); ++i)
    EXPECT_NEAR(moc_r.out[i], dense_r.out[i], 1e-5 * (1 + std::fabs(dense_r.out[i])));
  for (std::size_t i = 0; i < dense_r.dx.size(); ++i)
    EXPECT_NEAR(moc_r.dx[i], dense_r.dx[i], 1e-5 * (1 + std::fabs(dense_r.dx[i])));
  std::vector<bool> real(static_cast<std::size_t>(W), false);
  for (int c = 0; c < F; ++c) real[static_cast<std::size_t>(map.column_of[static_cast<std::size_t>(c)])] = true;
  for (int c = 0; c < F; ++c) {
    const int j = map.column_of[static_cast<std::size_t>(c)];
    for (int a = 0; a < d; ++a) {
      const float g_dense = dense_r.dwg[static_cast<std::size_t>(a * F + c)];
      const float u_dense = dense_r.dwu[static_cast<std::size_t>(a * F + c)];
      const float d_dense = dense_r.dwd[static_cast<std::size_t>(c * d + a)];
      EXPECT_NEAR(moc_r.dwg[static_cast<std::size_t>(a * W + j)], g_dense, 1e-5 * (1 + std::fabs(g_dense)));
      EXPECT_NEAR(moc_r.dwu[static_cast<std::size_t>(a * W + j)], u_dense, 1e-5 * (1 + std::fabs(u_dense)));
      EXPECT_NEAR(moc_r.dwd[static_cast<std::size_t>(j * d + a)], d_dense, 1e-5 * (1 + std::fabs(d_dense)));
    }
  }
  // The padding channels carry no gradient.
  for (int j = 0; j < W; ++j) {
    if (real[static_cast<std::size_t>(j)]) continue;
    for (int a = 0; a < d; ++a) {
      EXPECT_EQ(moc_r.dwg[static_cast<std::size_t>(a * W + j)], 0.0f);
      EXPECT_EQ(moc_r.dwu[static_cast<std::size_t>(a * W + j)], 0.0f);
      EXPECT_EQ(moc_r.dwd[static_cast<std::size_t>(j * d + a)], 0.0f);
    }
  }
}

TEST_F(Theorem1, ThePracticalGateRuleDropsRealChannelsWithNegativeGates) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  run_both(SelectRule::gate, rng);
  const int d = 12, F = 37, n = 6;
  // Zero padding channels have G = 0, so a real channel with G < 0 loses to them: the practical rule
  // computes the dense FFN restricted, per token, to the channels whose gate is positive.
  auto xs = o.download_f32(x);
  auto gate = [&](int i, int c) {
    double g = 0;
    for (int a = 0; a < d; ++a) g += static_cast<double>(xs[static_cast<std::size_t>(i * d + a)]) * dwg[static_cast<std::size_t>(a * F + c)];
    return g;
  };
  int negative = 0;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < F; ++c) negative += gate(i, c) < 0;
  ASSERT_GT(negative, 0) << "random gates should include negative ones";
  auto ref = host_masked_ffn(xs, dwg, dwu, dwd, dout, n, d, F, [&](int i, int c) { return gate(i, c) > 0; });
  expect_close(moc_r.out, ref.out, 1e-5, "positive-gate restriction");
  double max_diff = 0;
  for (std::size_t i = 0; i < dense_r.out.size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(moc_r.out[i] - dense_r.out[i])));
  EXPECT_GT(max_diff, 1e-3) << "the practical rule departs from the dense FFN";
}

}  // namespace
}  // namespace moc

namespace moc {
namespace {
using namespace moc::test;

std::vector<float> transposed(const std::vector<float>& m, std::int64_t r, std::int64_t c) {
  std::vector<float> t(m.size());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) t[static_cast<std::size_t>(j * r + i)] = m[static_cast<std::size_t>(i * c + j)];
  return t;
}

// The decode FFN twin (the GPU decode kernels' oracle) equals the training-layout forward on the same
// selection, for dense, MoC and MoC 2:8, odd sizes, with out accumulated; its own selection is that of
// moc_select on the fp32 gate; parts run alone do what they say.
TEST(FfnDecodeTwin, MatchesTheForwardUnderItsOwnSelection) {
  auto o = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  for (const char* ffn : {"dense", "moc", "moc_2:8"})
    for (int rows : {1, 3}) {
      ModelConfig cfg = preset("tiny");
      cfg.hidden = 24;
      cfg.d_ffn = 301;
      apply_override(cfg, "ffn", ffn);
      if (cfg.ffn.kind == FfnKind::moc && !cfg.ffn.selection().grouped()) cfg.ffn.k = 37;
      const std::int64_t d = cfg.hidden, F = cfg.d_ffn;
      auto wg = randn(rng, d * F, 0.2f), wu = randn(rng, d * F, 0.2f), wd = randn(rng, F * d, 0.2f);
      auto x = randn(rng, rows * d), out0 = randn(rng, rows * d);
      auto up = [&](const std::vector<float>& v, Shape s) {
        Tensor t = o->empty(s, DType::f32, weights_tag());
        o->upload_f32(t, v);
        return t;
      };
      Tensor Wg = up(wg, {d, F}), Wu = up(wu, {d, F}), Wd = up(wd, {F, d});
      Tensor WgT = up(transposed(wg, d, F), {F, d}), WuT = up(transposed(wu, d, F), {F, d});
      Tensor X = up(x, {rows, d});
      Tensor y_dec = up(out0, {rows, d}), y_fwd = up(out0, {rows, d});
      Ffn f(*o, cfg, 0);
      const bool moc = cfg.ffn.kind == FfnKind::moc;
      const int kept = moc ? cfg.ffn.selection().kept(static_cast<int>(F)) : 0;
      Tensor idx = o->empty({rows, std::max(kept, 1)}, DType::i16, workspace_tag());
      f.decode(X, {&WgT, &WuT, &Wd, true}, y_dec, moc ? &idx : nullptr);
      if (moc) {
        // Its selection is moc_select's on the fp32 gate.
        Tensor G = o->empty({rows, F}, DType::f32, workspace_tag());
        o->gemm(X, false, Wg, false, G);
        Tensor ref = o->empty({rows, kept}, DType::i16, workspace_tag());
        o->moc_select(G, cfg.ffn.selection(), ref);
        EXPECT_EQ(o->download_i32(idx), o->download_i32(ref)) << ffn << " rows " << rows;
        f.force_selection(idx);
      }
      f.forward(X, {&Wg, &Wu, &Wd}, y_fwd, 1.0f, false);
      EXPECT_LT(rel_err(o->download_f32(y_dec), o->download_f32(y_fwd)), 1e-5) << ffn << " rows " << rows;
      // The decode layout also serves the generic forward (prefill): W_gate/W_up are read transposed.
      Tensor y_t = up(out0, {rows, d});
      f.forward(X, {&WgT, &WuT, &Wd, true}, y_t, 1.0f, false);
      EXPECT_LT(rel_err(o->download_f32(y_t), o->download_f32(y_fwd)), 1e-5);
      f.clear_forced_selection();
      // Gate (and selection) alone leave out untouched.
      Tensor y_part = up(out0, {rows, d});
      const MocSelect sel = moc ? cfg.ffn.selection() : MocSelect{};
      o->ffn_decode(X, {&WgT, &WuT, &Wd}, moc ? &sel : nullptr, y_part, nullptr, nullptr, kFfnGate | kFfnSelect);
      EXPECT_EQ(o->download_f32(y_part), out0);
      if (moc) {  // up/down alone with the selection given equals the whole call
        o->ffn_decode(X, {&WgT, &WuT, &Wd}, &sel, y_part, &idx, nullptr, kFfnUpDown);
        EXPECT_LT(rel_err(o->download_f32(y_part), o->download_f32(y_dec)), 1e-6);
      }
    }
}


// The Transformer stores FFN weights with ffn_cols() >= d_ffn channels (zero padding, aligned rows). The
// padded layer must compute what the unpadded one does, keep the padding gradients at zero and never select
// a padding channel, even when every real channel's gate is negative (a padding gate is exactly 0).
TEST_F(FfnFixture, ZeroPaddedChannelsChangeNothing) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (const char* variant : {"dense", "moc", "moc_2:8"})
    for (bool negative : {false, true}) {
      SCOPED_TRACE(std::string(variant) + (negative ? " all gates negative" : ""));
      make(variant, 12, 37, 9, false);
      ASSERT_EQ(cfg.ffn_cols(), 40);
      random_weights(rng);
      const std::int64_t d = cfg.hidden, F = cfg.d_ffn, Fp = cfg.ffn_cols();
      const int n = 6;
      Tensor x = random_tensor(o, rng, {n, cfg.hidden});
      if (negative) {  // x > 0 and W_gate < 0: every real gate value is negative
        auto xv = o.download_f32(x), gv = o.download_f32(wg);
        for (auto& v : xv) v = std::fabs(v) + 0.1f;
        for (auto& v : gv) v = -std::fabs(v) - 0.01f;
        o.upload_f32(x, xv);
        o.upload_f32(wg, gv);
      }
      auto dout = randn(rng, static_cast<std::size_t>(n) * cfg.hidden);
      Ffn plain(o, cfg, 0);
      const Result a = run(plain, x, dout);
      // The same weights, padded: [d, Fp] for W_gate and W_up, [Fp, d] for W_down.
      auto pad_cols = [&](const Tensor& w) {
        auto v = o.download_f32(w);
        std::vector<float> p(static_cast<std::size_t>(d * Fp), 0.0f);
        for (std::int64_t r = 0; r < d; ++r) std::copy_n(v.begin() + r * F, F, p.begin() + r * Fp);
        Tensor t = o.empty({d, Fp}, DType::f32, weights_tag());
        o.upload_f32(t, p);
        return t;
      };
      Tensor wd_p = o.empty({Fp, d}, DType::f32, weights_tag());
      {
        auto v = o.download_f32(wd);
        v.resize(static_cast<std::size_t>(Fp * d), 0.0f);
        o.upload_f32(wd_p, v);
      }
      wg = pad_cols(wg);
      wu = pad_cols(wu);
      wd = wd_p;
      Ffn padded(o, cfg, 0);
      const Result b = run(padded, x, dout);
      EXPECT_EQ(a.idx, b.idx);
      for (auto j : b.idx) EXPECT_LT(j, F);
      EXPECT_LT(rel_err(a.out, b.out), 1e-5);
      EXPECT_LT(rel_err(a.dx, b.dx), 1e-5);
      std::vector<float> dwg, dwu;
      for (std::int64_t r = 0; r < d; ++r)
        for (std::int64_t c = 0; c < Fp; ++c) {
          const auto i = static_cast<std::size_t>(r * Fp + c);
          if (c < F) {
            dwg.push_back(b.dwg[i]);
            dwu.push_back(b.dwu[i]);
          } else {
            EXPECT_EQ(b.dwg[i], 0.0f);
            EXPECT_EQ(b.dwu[i], 0.0f);
          }
        }
      EXPECT_LT(rel_err(a.dwg, dwg), 1e-5);
      EXPECT_LT(rel_err(a.dwu, dwu), 1e-5);
      EXPECT_LT(rel_err(a.dwd, std::vector<float>(b.dwd.begin(), b.dwd.begin() + F * d)), 1e-5);
      for (std::size_t i = static_cast<std::size_t>(F * d); i < b.dwd.size(); ++i) EXPECT_EQ(b.dwd[i], 0.0f);
    }
}

}  // namespace
}  // namespace moc
