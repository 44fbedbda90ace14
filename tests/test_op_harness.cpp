// The backend-against-oracle op harness (op_harness.h) checked on the CPU in CI: its one policy for
// non-finite values and its norm-wise bound, and the harness driving real ops with the CPU backend on both
// sides (a second CpuOps as the "backend under test"), where a skipped write must be caught by the poison.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "op_harness.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(OpHarness, NonFiniteValuesMustStandExactlyWhereTheOraclesDo) {
  EXPECT_TRUE(close_to_oracle({1.f, kNaN, kInf, -kInf}, {1.f, kNaN, kInf, -kInf}, 1e-4));
  // An output left poisoned where the oracle wrote a number.
  EXPECT_FALSE(close_to_oracle({1.f, kNaN}, {1.f, 2.f}, 1e-4));
  // A number where the oracle has NaN (the attention tests used to skip these).
  EXPECT_FALSE(close_to_oracle({1.f, 2.f}, {1.f, kNaN}, 1e-4));
  // Infinities of the other sign, or NaN for an infinity.
  EXPECT_FALSE(close_to_oracle({kInf}, {-kInf}, 1e-4));
  EXPECT_FALSE(close_to_oracle({kNaN}, {kInf}, 1e-4));
  EXPECT_FALSE(close_to_oracle({1.f}, {1.f, 2.f}, 1e-4)) << "sizes differ";
}

TEST(OpHarness, FiniteValuesAgreeNormWiseWithinRtolPlusAtolPerRootElement) {
  // ||want|| = 5 (3, 4): rtol 1e-2 allows 0.05 (+ atol sqrt(2)).
  EXPECT_TRUE(close_to_oracle({3.04f, 4.f}, {3.f, 4.f}, 1e-2, 0.0));
  EXPECT_FALSE(close_to_oracle({3.06f, 4.f}, {3.f, 4.f}, 1e-2, 0.0));
  // Outputs that are zero in exact arithmetic: only atol sqrt(n) can cover their rounding noise.
  const std::vector<float> noise(100, 1e-7f), zero(100, 0.f);
  EXPECT_FALSE(close_to_oracle(noise, zero, 1e-2, 0.0));
  EXPECT_TRUE(close_to_oracle(noise, zero, 1e-2, kOpAtol));
  // Non-finite entries (matching) do not enter the norms.
  EXPECT_TRUE(close_to_oracle({kNaN, 1.f}, {kNaN, 1.f}, 0.0, 0.0));
}

TEST(OpHarness, SameValuesIsBitForBitWithNaNEqualToNaN) {
  EXPECT_TRUE(same_values({1.f, kNaN}, {1.f, kNaN}));
  EXPECT_FALSE(same_values({1.f, 2.f}, {1.f, std::nextafter(2.f, 3.f)}));
}

// The harness end to end on the CPU backend against itself: every float dtype, odd sizes, inputs twinned,
// outputs poisoned; the ops agree exactly, and an output the backend under test never wrote is caught.
TEST(OpHarness, DrivesOpsOnTwoBackendsAndCatchesAnUnwrittenOutput) {
  auto ops = make_cpu_ops();
  auto oracle = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int m = 3, k = 37, n = 5461;
    auto a = twin_rand(*ops, *oracle, rng, {m, k}, dt);
    auto b = twin_rand(*ops, *oracle, rng, {n, k}, dt, 0.2f);
    auto c = twin_poison(*ops, *oracle, {m, n}, dt);
    ops->gemm(a.g, false, b.g, true, c.g);
    oracle->gemm(a.c, false, b.c, true, c.c);
    expect_twin_close("gemm", *ops, *oracle, c, op_tol(dt));
    EXPECT_TRUE(close_to_oracle(ops->download_f32(c.g), oracle->download_f32(c.c), 0.0, 0.0)) << "same backend";

    auto x = twin_rand(*ops, *oracle, rng, {m, k}, dt);
    auto w = twin_rand(*ops, *oracle, rng, {k}, dt);
    auto y = twin_poison(*ops, *oracle, {m, k}, dt);
    auto rstd = twin_poison(*ops, *oracle, {m}, DType::f32);
    oracle->rmsnorm_forward(x.c, w.c, 1e-5f, y.c, rstd.c);  // the backend "forgets" to run the op
    EXPECT_FALSE(close_to_oracle(ops->download_f32(y.g), oracle->download_f32(y.c), op_tol(dt)))
        << "a poisoned output left unwritten must fail the comparison";
    ops->rmsnorm_forward(x.g, w.g, 1e-5f, y.g, rstd.g);
    expect_twin_close("rmsnorm y", *ops, *oracle, y, op_tol(dt));
    expect_twin_close("rmsnorm rstd", *ops, *oracle, rstd, 1e-5);
  }
}

}  // namespace
}  // namespace moc
