// Shared test helpers: fresh random tensors, poisoning, central finite differences.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ops.h"

namespace moc::test {

// A fresh seed per call (tests use fresh random inputs); callers SCOPED_TRACE it so a failure prints it,
// and MOCBENCH_TEST_SEED=<seed> replays it.
inline std::uint32_t fresh_seed() {
  if (const char* s = std::getenv("MOCBENCH_TEST_SEED")) return static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10));
  static std::random_device rd;
  return rd();
}

inline std::vector<float> randn(std::mt19937& rng, std::size_t n, float std = 1.0f) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// n token ids drawn uniformly from [0, vocab).
inline std::vector<std::int32_t> random_ids(std::mt19937& rng, std::size_t n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ||a - b|| / max(||b||, tiny): norm-wise relative error.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double e = static_cast<double>(a[i]) - b[i];
    num += e * e;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (a.size() != b.size()) return 1e30;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline Tensor random_tensor(Ops& ops, std::mt19937& rng, const Shape& shape, float std = 1.0f,
                            DType dt = DType::f32) {
  Tensor t = ops.empty(shape, dt, workspace_tag());
  ops.upload_f32(t, randn(rng, static_cast<std::size_t>(t.numel()), std));
  return t;
}

// NaN everywhere: an op that forgets to write an output (or reads it when it should not) shows up.
inline Tensor poisoned(Ops& ops, const Shape& shape, DType dt = DType::f32) {
  Tensor t = ops.empty(shape, dt, workspace_tag());
  ops.fill(t, std::numeric_limits<float>::quiet_NaN());
  return t;
}

inline double weighted_sum(Ops& ops, const Tensor& t, const std::vector<float>& w) {
  auto v = ops.download_f32(t);
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * w[i];
  return s;
}

struct FdOptions {
  int samples = 24;     // coordinates checked per tensor
  float eps = 1e-2f;
  double atol = 1e-4;
  double rtol = 3e-2;
  // Optional: returns false when the perturbation changed a discrete choice (a top-K selection), so
  // the coordinate is skipped; at most max_skipped_fraction of coordinates may be skipped.
  std::function<bool()> unchanged;
  double max_skipped_fraction = 0.25;

  static FdOptions with_eps(float e) {
    FdOptions o;
    o.eps = e;
    return o;
  }
  static FdOptions with_samples(int n) {
    FdOptions o;
    o.samples = n;
    return o;
  }
};

// Checks analytic gradients against central differences (loss(x+eps) - loss(x-eps)) / 2eps on sampled
// coordinates of an f32 CPU tensor. The comparison is norm-wise over the sample,
//   ||analytic - fd|| <= rtol * ||fd|| + atol * sqrt(n),
// which fp32 rounding noise (small eps) and curvature (large eps) cannot fail, while a wrong sign,
// factor or index (an O(1) relative error on most coordinates) always does.
inline void expect_grad_matches_fd(const char* what, Tensor& x, const std::vector<float>& analytic,
                                   const std::function<double()>& loss, std::mt19937& rng, FdOptions opt = {}) {
  ASSERT_EQ(x.dtype(), DType::f32);
  ASSERT_EQ(static_cast<std::int64_t>(analytic.size()), x.numel());
  float* p = x.data<float>();
  std::uniform_int_distribution<std::int64_t> pick(0, x.numel() - 1);
  const int n = static_cast<int>(std::min<std::int64_t>(opt.samples, x.numel()));
  int skipped = 0, checked = 0;
  double diff2 = 0, fd2 = 0, worst = 0, worst_an = 0, worst_fd = 0;
  std::int64_t worst_i = -1;
  for (int s = 0; s < n; ++s) {
    const std::int64_t i = x.numel() <= opt.samples ? s : pick(rng);
    const float orig = p[i];
    p[i] = orig + opt.eps;
    const double lp = loss();
    const bool stable_p = !opt.unchanged || opt.unchanged();
    p[i] = orig - opt.eps;
    const double lm = loss();
    const bool stable_m = !opt.unchanged || opt.unchanged();
    p[i] = orig;
    if (!stable_p || !stable_m) {
      ++skipped;
      continue;
    }
    const double fd = (lp - lm) / (2.0 * opt.eps);
    const double an = analytic[static_cast<std::size_t>(i)];
    diff2 += (an - fd) * (an - fd);
    fd2 += fd * fd;
    ++checked;
    if (std::fabs(an - fd) > worst) {
      worst = std::fabs(an - fd);
      worst_i = i;
      worst_an = an;
      worst_fd = fd;
    }
  }
  EXPECT_LE(skipped, static_cast<int>(opt.max_skipped_fraction * n) + 1) << what << ": too many unstable coordinates";
  EXPECT_LE(std::sqrt(diff2), opt.rtol * std::sqrt(fd2) + opt.atol * std::sqrt(static_cast<double>(checked)))
      << what << ": ||analytic - fd|| = " << std::sqrt(diff2) << " vs ||fd|| = " << std::sqrt(fd2) << " over "
      << checked << " coordinates; worst at " << worst_i << ": analytic " << worst_an << ", fd " << worst_fd;
}

}  // namespace moc::test
