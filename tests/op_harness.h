// One backend-against-oracle op harness (after ggml's test-backend-ops): the same inputs on the backend under
// test and on the CPU oracle (Twin), outputs poisoned with NaN so that an element never written shows, and
// one comparison with one policy for non-finite values. Used by every GPU-against-CPU test
// (test_cuda_ops.cpp, test_cuda_attention_moc.cpp, test_cuda_decode_fused.cpp, test_cuda_model_families.cpp)
// and tested itself on the CPU in CI (test_op_harness.cpp).
//
// The policy (close_to_oracle): a non-finite value (NaN, +inf, -inf) must stand exactly where the oracle has
// the same one (a poisoned output left unwritten is a NaN where the oracle has a number; a NaN the oracle
// does not produce is a bug either way); finite values agree norm-wise:
//   ||got - want|| <= rtol ||want|| + atol sqrt(n),
// atol covering outputs that are zero in exact arithmetic (rounding noise is all that is left of them).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "test_util.h"

namespace moc::test {

// Default tolerances of an op's output against the oracle: rounding of the storage type.
inline double op_tol(DType dt) { return dt == DType::bf16 ? 1e-2 : 1e-4; }
constexpr double kOpAtol = 1e-6;

// The same tensor on the backend under test (g) and on the oracle (c); same dtype, so that inputs are
// rounded alike.
struct Twin {
  Tensor g, c;
};

inline std::int64_t numel_of(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
}

inline Twin twin(Ops& ops, Ops& oracle, const Shape& s, DType dt, const std::vector<float>& v,
                 MemTag tag = workspace_tag()) {
  Twin t{ops.empty(s, dt, tag), oracle.empty(s, dt, tag)};
  ops.upload_f32(t.g, v);
  oracle.upload_f32(t.c, v);
  return t;
}

inline Twin twin_rand(Ops& ops, Ops& oracle, std::mt19937& rng, const Shape& s, DType dt, float stdev = 1.0f,
                      MemTag tag = workspace_tag()) {
  return twin(ops, oracle, s, dt, randn(rng, static_cast<std::size_t>(numel_of(s)), stdev), tag);
}

// NaN everywhere on both sides.
inline Twin twin_poison(Ops& ops, Ops& oracle, const Shape& s, DType dt) {
  return Twin{poisoned(ops, s, dt), poisoned(oracle, s, dt)};
}

inline Twin twin_i32(Ops& ops, Ops& oracle, const std::vector<std::int32_t>& v) {
  const Shape s{static_cast<std::int64_t>(v.size())};
  Twin t{ops.empty(s, DType::i32, workspace_tag()), oracle.empty(s, DType::i32, workspace_tag())};
  ops.upload_i32(t.g, v);
  oracle.upload_i32(t.c, v);
  return t;
}

// Channel indices (i16 storage) on one backend.
inline Tensor upload_idx16(Ops& ops, const std::vector<std::int32_t>& v, const Shape& shape) {
  Tensor t = ops.empty(shape, DType::i16, workspace_tag());
  std::vector<std::uint16_t> h(v.begin(), v.end());
  ops.upload(t, h.data());
  return t;
}

// The policy above, as a gtest assertion result (so that the harness's own test can check refusals).
inline ::testing::AssertionResult close_to_oracle(const std::vector<float>& got, const std::vector<float>& want,
                                                  double rtol, double atol = kOpAtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", the oracle's " << want.size();
  double d2 = 0, w2 = 0, worst = -1;
  std::size_t mismatched = 0, first_bad = 0, worst_i = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool gf = std::isfinite(got[i]), wf = std::isfinite(want[i]);
    if (!gf || !wf) {
      const bool same = !gf && !wf && (std::isnan(got[i]) ? std::isnan(want[i]) : got[i] == want[i]);
      if (!same && mismatched++ == 0) first_bad = i;
      continue;
    }
    const double d = static_cast<double>(got[i]) - want[i];
    d2 += d * d;
    w2 += static_cast<double>(want[i]) * want[i];
    if (std::fabs(d) > worst) {
      worst = std::fabs(d);
      worst_i = i;
    }
  }
  if (mismatched > 0)
    return ::testing::AssertionFailure() << mismatched << " non-finite value(s) not where the oracle has them, first at "
                                         << first_bad << ": got " << got[first_bad] << ", oracle " << want[first_bad];
  const double bound = rtol * std::sqrt(w2) + atol * std::sqrt(static_cast<double>(got.size()));
  if (std::sqrt(d2) > bound)
    return ::testing::AssertionFailure() << "||got - oracle|| = " << std::sqrt(d2) << " > " << bound
                                         << " (relative " << std::sqrt(d2) / std::max(std::sqrt(w2), 1e-30)
                                         << "); worst at " << worst_i << ": got " << got[worst_i] << ", oracle "
                                         << want[worst_i];
  return ::testing::AssertionSuccess();
}

inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                         double rtol, double atol = kOpAtol) {
  EXPECT_TRUE(close_to_oracle(got, want, rtol, atol)) << what;
}
inline void expect_close(const std::string& what, Ops& ops, const Tensor& g, Ops& oracle, const Tensor& c, double rtol,
                         double atol = kOpAtol) {
  expect_close(what, ops.download_f32(g), oracle.download_f32(c), rtol, atol);
}
inline void expect_twin_close(const std::string& what, Ops& ops, Ops& oracle, const Twin& t, double rtol,
                              double atol = kOpAtol) {
  expect_close(what, ops, t.g, oracle, t.c, rtol, atol);
}

// Bit-for-bit equal values (copies, gathers), reporting the first difference (NaN equals NaN).
inline ::testing::AssertionResult same_values(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", the oracle's " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]) && !(std::isnan(got[i]) && std::isnan(want[i])))
      return ::testing::AssertionFailure() << "first difference at " << i << ": got " << got[i] << ", oracle "
                                           << want[i];
  return ::testing::AssertionSuccess();
}
inline void expect_same_values(const std::string& what, Ops& ops, const Tensor& g, Ops& oracle, const Tensor& c) {
  EXPECT_TRUE(same_values(ops.download_f32(g), oracle.download_f32(c))) << what;
}

}  // namespace moc::test
