// CPU backend: the row gathers and scatters of a mixture-of-experts layer (tokens grouped per expert).
#include <string>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace moc::cpu {

namespace {
// Row ids of an expert's tokens, checked against the table they index.
const std::int32_t* row_ids(const Tensor& rows, std::int64_t n, std::int64_t limit, const char* op) {
  require(rows.dtype() == DType::i32 && rows.numel() == n, op, "rows must be i32 [" + std::to_string(n) + "]");
  const auto* r = rows.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i)
    require(r[i] >= 0 && r[i] < limit, op, "row id " + std::to_string(r[i]) + " outside [0, " + std::to_string(limit) + ")");
  return r;
}

const float* scales(const Tensor* scale, std::int64_t n, const char* op) {
  if (!scale) return nullptr;
  require(scale->dtype() == DType::f32 && scale->numel() == n, op, "scale must be f32 [" + std::to_string(n) + "]");
  return scale->data<float>();
}
}  // namespace

void CpuOps::gather_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) {
  const std::int64_t n = out.rows(), d = out.cols();
  require(src.cols() == d, "gather_rows", "src and out must have the same columns");
  const std::int32_t* r = row_ids(rows, n, src.rows(), "gather_rows");
  const float* s = scales(scale, n, "gather_rows");
  F32In S(src);
  F32Out O(out, false);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float f = s ? s[i] : 1.0f;
    for (std::int64_t j = 0; j < d; ++j) O[i * d + j] = f * S[r[i] * d + j];
  }
}

void CpuOps::scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) {
  const std::int64_t n = src.rows(), d = src.cols();
  require(out.cols() == d, "scatter_add_rows", "src and out must have the same columns");
  const std::int32_t* r = row_ids(rows, n, out.rows(), "scatter_add_rows");
  const float* s = scales(scale, n, "scatter_add_rows");
  F32In S(src);
  F32Out O(out, true);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float f = s ? s[i] : 1.0f;
    for (std::int64_t j = 0; j < d; ++j) O[r[i] * d + j] += f * S[i * d + j];
  }
}

void CpuOps::rows_dot(const Tensor& a, const Tensor& rows, const Tensor& b, Tensor& out) {
  const std::int64_t n = b.rows(), d = b.cols();
  require(a.cols() == d, "rows_dot", "a and b must have the same columns");
  require(out.dtype() == DType::f32 && out.numel() == n, "rows_dot", "out must be f32 [" + std::to_string(n) + "]");
  const std::int32_t* r = row_ids(rows, n, a.rows(), "rows_dot");
  F32In A(a), B(b);
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j < d; ++j) acc += A[r[i] * d + j] * B[i * d + j];
    o[i] = acc;
  }
}

}  // namespace moc::cpu
