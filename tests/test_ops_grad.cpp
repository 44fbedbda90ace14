// Every op's backward against central finite differences (fp32, tolerances), odd sizes included.
#include "test_util.h"

#include "kernels/ops.h"

namespace moc {
namespace {
using namespace moc::test;

class OpGrad : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = fresh_seed();
    rng_.seed(seed_);
  }
  std::unique_ptr<Ops> ops_ = make_cpu_ops();
  std::uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_F(OpGrad, GemmAllTransposesMatchFiniteDifferences) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int m = 5, k = 7, n = 3;
      Tensor a = random_tensor(o, rng_, ta ? Shape{k, m} : Shape{m, k});
      Tensor b = random_tensor(o, rng_, tb ? Shape{n, k} : Shape{k, n});
      auto w = randn(rng_, m * n);
      Tensor c = poisoned(o, {m, n});
      auto loss = [&] {
        o.gemm(a, ta, b, tb, c);
        return weighted_sum(o, c, w);
      };
      // dL/dA = W op(B)^T (then transposed back if A was stored transposed)
      Tensor wt = o.empty({m, n}, DType::f32, workspace_tag());
      o.upload_f32(wt, w);
      Tensor da = poisoned(o, a.shape()), db = poisoned(o, b.shape());
      if (!ta) o.gemm(wt, false, b, !tb, da);
      else o.gemm(b, tb, wt, true, da);
      if (!tb) o.gemm(a, !ta, wt, false, db);
      else o.gemm(wt, true, a, ta, db);
      expect_grad_matches_fd("gemm A", a, o.download_f32(da), loss, rng_);
      expect_grad_matches_fd("gemm B", b, o.download_f32(db), loss, rng_);
    }
}

TEST_F(OpGrad, RmsNormMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int n = 6, d = 37;
  Tensor x = random_tensor(o, rng_, {n, d});
  Tensor w = random_tensor(o, rng_, {d});
  auto gy = randn(rng_, n * d);
  Tensor y = poisoned(o, {n, d}), rstd = poisoned(o, {n});
  auto loss = [&] {
    o.rmsnorm_forward(x, w, 1e-6f, y, rstd);
    return weighted_sum(o, y, gy);
  };
  loss();
  Tensor dy = o.empty({n, d}, DType::f32, workspace_tag());
  o.upload_f32(dy, gy);
  Tensor dx = o.empty({n, d}, DType::f32, workspace_tag()), dw = o.empty({d}, DType::f32, workspace_tag());
  o.fill(dx, 0.0f);
  o.fill(dw, 0.0f);
  o.rmsnorm_backward(dy, x, w, rstd, dx, dw);
  expect_grad_matches_fd("rmsnorm x", x, o.download_f32(dx), loss, rng_);
  expect_grad_matches_fd("rmsnorm w", w, o.download_f32(dw), loss, rng_);
}

TEST_F(OpGrad, RopeBackwardIsInverseRotation) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int n = 5, h = 3, hd = 10;
  Tensor x = random_tensor(o, rng_, {n, h, hd});
  Tensor pos = o.empty({n}, DType::i32, workspace_tag());
  o.upload_i32(pos, {0, 3, 1, 17, 250});
  auto gy = randn(rng_, n * h * hd);
  Tensor y = o.empty({n, h, hd}, DType::f32, workspace_tag());
  auto loss = [&] {
    o.copy(y, x);
    o.rope(y, pos, 10000.0f, false);
    return weighted_sum(o, y, gy);
  };
  Tensor g = o.empty({n, h, hd}, DType::f32, workspace_tag());
  o.upload_f32(g, gy);
  o.rope(g, pos, 10000.0f, true);
  expect_grad_matches_fd("rope", x, o.download_f32(g), loss, rng_);
  // And it is a rotation: forward then inverse gives the input back; position 0 is the identity.
  loss();
  o.rope(y, pos, 10000.0f, true);
  auto back = o.download_f32(y), orig = o.download_f32(x);
  for (std::size_t i = 0; i < orig.size(); ++i) EXPECT_NEAR(back[i], orig[i], 1e-5f);
}

struct AttnCase {
  int b, s, h, kvh, hd;
};

class AttentionGrad : public OpGrad, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(AttentionGrad, MatchesFiniteDifferences) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const auto c = GetParam();
  Tensor q = random_tensor(o, rng_, {c.b, c.s, c.h, c.hd});
  Tensor k = random_tensor(o, rng_, {c.b, c.s, c.kvh, c.hd});
  Tensor v = random_tensor(o, rng_, {c.b, c.s, c.kvh, c.hd});
  auto gy = randn(rng_, static_cast<std::size_t>(q.numel()));
  Tensor out = poisoned(o, q.shape()), lse = poisoned(o, {c.b, c.h, c.s});
  auto loss = [&] {
    o.attention_forward(q, k, v, out, lse);
    return weighted_sum(o, out, gy);
  };
  loss();
  Tensor dout = o.empty(q.shape(), DType::f32, workspace_tag());
  o.upload_f32(dout, gy);
  Tensor dq = poisoned(o, q.shape()), dk = poisoned(o, k.shape()), dv = poisoned(o, v.shape());
  o.attention_backward(q, k, v, out, lse, dout, dq, dk, dv);
  expect_grad_matches_fd("attention q", q, o.download_f32(dq), loss, rng_);
  expect_grad_matches_fd("attention k", k, o.download_f32(dk), loss, rng_);
  expect_grad_matches_fd("attention v", v, o.download_f32(dv), loss, rng_);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGrad,
                         ::testing::Values(AttnCase{2, 7, 2, 2, 6}, AttnCase{1, 9, 4, 2, 4},  // MHA, GQA
                                           AttnCase{2, 5, 3, 1, 8}));                         // MQA

TEST_F(OpGrad, AttentionIsCausal) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int b = 1, s = 6, h = 2, hd = 4;
  Tensor q = random_tensor(o, rng_, {b, s, h, hd}), k = random_tensor(o, rng_, {b, s, h, hd});
  Tensor v = random_tensor(o, rng_, {b, s, h, hd});
  Tensor out1 = poisoned(o, q.shape()), out2 = poisoned(o, q.shape()), lse = poisoned(o, {b, h, s});
  o.attention_forward(q, k, v, out1, lse);
  v.data<float>()[(s - 1) * h * hd] += 5.0f;  // change only the last position's value
  o.attention_forward(q, k, v, out2, lse);
  auto a = o.download_f32(out1), bb = o.download_f32(out2);
  for (int i = 0; i < (s - 1) * h * hd; ++i) EXPECT_EQ(a[i], bb[i]) << "earlier positions must not see the future";
}

TEST_F(OpGrad, SwigluMatchesFiniteDifferencesWithAndWithoutStoredS) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int n = 3, F = 37;
  Tensor g = random_tensor(o, rng_, {n, F}, 2.0f), u = random_tensor(o, rng_, {n, F});
  auto gz = randn(rng_, n * F);
  Tensor z = poisoned(o, {n, F}), s = poisoned(o, {n, F});
  auto loss = [&] {
    o.swiglu_forward(g, u, &s, z);
    return weighted_sum(o, z, gz);
  };
  loss();
  Tensor dz = o.empty({n, F}, DType::f32, workspace_tag());
  o.upload_f32(dz, gz);
  for (bool use_s : {false, true}) {
    Tensor dg = poisoned(o, {n, F}), du = poisoned(o, {n, F});
    o.swiglu_backward(dz, g, u, use_s ? &s : nullptr, dg, du);
    expect_grad_matches_fd("swiglu g", g, o.download_f32(dg), loss, rng_, FdOptions::with_eps(1e-3f));
    expect_grad_matches_fd("swiglu u", u, o.download_f32(du), loss, rng_, FdOptions::with_eps(1e-3f));
  }
}

TEST_F(OpGrad, CrossEntropyMatchesFiniteDifferencesAndIgnoresNegativeTargets) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int n = 5, V = 11;
  Tensor logits = random_tensor(o, rng_, {n, V}, 3.0f);
  Tensor targets = o.empty({n}, DType::i32, workspace_tag());
  o.upload_i32(targets, {3, -1, 0, 10, 7});
  Tensor losses = poisoned(o, {n});
  auto loss = [&] {
    o.cross_entropy_forward(logits, targets, losses);
    auto l = o.download_f32(losses);
    double s = 0;
    for (float x : l) s += x;
    return s / 4.0;
  };
  loss();
  EXPECT_EQ(o.download_f32(losses)[1], 0.0f);
  Tensor grad = o.empty({n, V}, DType::f32, workspace_tag());
  o.copy(grad, logits);
  o.cross_entropy_backward(grad, targets, 0.25f);
  auto gv = o.download_f32(grad);
  for (int j = 0; j < V; ++j) EXPECT_EQ(gv[V + j], 0.0f);
  expect_grad_matches_fd("cross-entropy", logits, gv, loss, rng_, FdOptions::with_eps(1e-3f));
}

TEST_F(OpGrad, EmbeddingBackwardAccumulatesRepeatedTokens) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int V = 7, d = 5, n = 6;
  Tensor table = random_tensor(o, rng_, {V, d});
  Tensor tok = o.empty({n}, DType::i32, workspace_tag());
  o.upload_i32(tok, {2, 5, 2, 0, 6, 2});
  auto gy = randn(rng_, n * d);
  Tensor out = poisoned(o, {n, d});
  auto loss = [&] {
    o.embedding_forward(tok, table, out);
    return weighted_sum(o, out, gy);
  };
  Tensor dout = o.empty({n, d}, DType::f32, workspace_tag());
  o.upload_f32(dout, gy);
  Tensor dt = o.empty({V, d}, DType::f32, workspace_tag());
  o.fill(dt, 0.0f);
  o.embedding_backward(tok, dout, dt);
  expect_grad_matches_fd("embedding", table, o.download_f32(dt), loss, rng_, FdOptions::with_samples(V * d));
}

TEST_F(OpGrad, SparseRowsMatmulMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int n = 4, K = 5, F = 37, d = 9;
  Tensor z = random_tensor(o, rng_, {n, K}), w = random_tensor(o, rng_, {F, d});
  Tensor idx = o.empty({n, K}, DType::i16, workspace_tag());
  std::vector<std::int32_t> ids;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < K; ++j) ids.push_back((i * 3 + j * 7) % F);  // rows 0 and others share channels
  std::vector<std::uint16_t> ids16(ids.begin(), ids.end());
  o.upload(idx, ids16.data());
  auto gy = randn(rng_, n * d);
  Tensor out = poisoned(o, {n, d});
  auto loss = [&] {
    o.sparse_rows_matmul(z, idx, w, out, 0.0f);
    return weighted_sum(o, out, gy);
  };
  Tensor dout = o.empty({n, d}, DType::f32, workspace_tag());
  o.upload_f32(dout, gy);
  Tensor dz = poisoned(o, {n, K}), dw = o.empty({F, d}, DType::f32, workspace_tag());
  o.fill(dw, 0.0f);
  o.sparse_rows_matmul_backward(dout, z, idx, w, dz, dw);
  expect_grad_matches_fd("sparse z", z, o.download_f32(dz), loss, rng_);
  expect_grad_matches_fd("sparse w", w, o.download_f32(dw), loss, rng_, FdOptions::with_samples(60));
}

TEST_F(OpGrad, Bf16TensorsAreConvertedAtTheBoundary) {
  SCOPED_TRACE(seed_);
  Ops& o = *ops_;
  const int m = 4, k = 33, n = 5;
  Tensor a = random_tensor(o, rng_, {m, k}, 1.0f, DType::bf16), b = random_tensor(o, rng_, {k, n}, 1.0f, DType::bf16);
  Tensor af = o.empty({m, k}, DType::f32, workspace_tag()), bf = o.empty({k, n}, DType::f32, workspace_tag());
  o.copy(af, a);
  o.copy(bf, b);
  Tensor c16 = poisoned(o, {m, n}, DType::bf16), c32 = poisoned(o, {m, n});
  o.gemm(a, false, b, false, c16);
  o.gemm(af, false, bf, false, c32);
  auto x = o.download_f32(c16), y = o.download_f32(c32);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-2 * (1 + std::fabs(y[i])));  // bf16 output rounding
}

}  // namespace
}  // namespace moc
