#include "kernels/ops.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "kernels/cpu/cpu_ops.h"

namespace moc {

int MocSelect::kept(int d_ffn) const {
  if (!grouped()) return k;
  return group_a * (d_ffn / group_b) + std::min(group_a, d_ffn % group_b);
}

GemmDims gemm_dims(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c) {
  const std::int64_t m = ta ? a.cols() : a.rows(), k = ta ? a.rows() : a.cols();
  const std::int64_t kb = tb ? b.cols() : b.rows(), n = tb ? b.rows() : b.cols();
  if (k != kb || c.rows() != m || c.cols() != n)
    throw std::invalid_argument("gemm: shapes " + shape_str(a.shape()) + (ta ? "^T" : "") + " x " +
                                shape_str(b.shape()) + (tb ? "^T" : "") + " -> " + shape_str(c.shape()));
  return {m, n, k};
}

double Ops::timed(const std::function<void()>& fn) {
  synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int Ops::mark() {
  host_marks_.push_back(std::chrono::steady_clock::now());
  return static_cast<int>(host_marks_.size()) - 1;
}

double Ops::mark_ms(int id) {
  if (id < 0 || static_cast<std::size_t>(id) >= host_marks_.size()) throw std::out_of_range("mark_ms: no such mark");
  return std::chrono::duration<double, std::milli>(host_marks_[static_cast<std::size_t>(id)] - host_marks_[0]).count();
}

void Ops::clear_marks() { host_marks_.clear(); }

void Ops::upload_f32(Tensor& dst, const std::vector<float>& host) {
  if (static_cast<std::int64_t>(host.size()) != dst.numel())
    throw std::invalid_argument("upload_f32: " + std::to_string(host.size()) + " values for " + shape_str(dst.shape()));
  if (dst.dtype() == DType::f32) return upload(dst, host.data());
  if (dst.dtype() != DType::bf16) throw std::invalid_argument("upload_f32 into a non-float tensor");
  std::vector<std::uint16_t> h(host.size());
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(host[i]);
  upload(dst, h.data());
}

std::vector<float> Ops::download_f32(const Tensor& src) {
  std::vector<float> out(static_cast<std::size_t>(src.numel()));
  if (src.dtype() == DType::f32) {
    download(src, out.data());
  } else if (src.dtype() == DType::bf16) {
    std::vector<std::uint16_t> h(out.size());
    download(src, h.data());
    for (std::size_t i = 0; i < h.size(); ++i) out[i] = bf16_to_f32(h[i]);
  } else {
    throw std::invalid_argument("download_f32 of a non-float tensor");
  }
  return out;
}

void Ops::upload_i32(Tensor& dst, const std::vector<std::int32_t>& host) {
  if (static_cast<std::int64_t>(host.size()) != dst.numel() || dst.dtype() != DType::i32)
    throw std::invalid_argument("upload_i32: size or dtype mismatch for " + shape_str(dst.shape()));
  upload(dst, host.data());
}

std::vector<std::int32_t> Ops::download_i32(const Tensor& src) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(src.numel()));
  if (src.dtype() == DType::i32) {
    download(src, out.data());
  } else if (src.dtype() == DType::i16) {
    std::vector<std::uint16_t> h(out.size());
    download(src, h.data());
    for (std::size_t i = 0; i < h.size(); ++i) out[i] = h[i];
  } else {
    throw std::invalid_argument("download_i32 of a non-index tensor");
  }
  return out;
}

void Ops::decode_qkv(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& wq_t, const Tensor& wk_t,
                     const Tensor& wv_t, const Tensor& pos, float theta, Tensor& q, Tensor& k_cache, Tensor& v_cache) {
  if (x.rank() != 2 || q.rank() != 3 || k_cache.rank() != 4 || q.dim(0) != x.dim(0))
    throw std::invalid_argument("decode_qkv: x [b, d], q [b, h, hd] and caches [b, kvh, max_seq, hd] expected");
  const std::int64_t b = x.dim(0), d = x.dim(1), h = q.dim(1), hd = q.dim(2), kvh = k_cache.dim(1);
  auto ws = [&](const Shape& s, DType t) { return empty(s, t, workspace_tag()); };
  Tensor xn = ws({b, d}, x.dtype()), rstd = ws({b}, DType::f32);
  rmsnorm_forward(x, norm_w, eps, xn, rstd);
  Tensor q2 = q.reshape({b, h * hd});
  Tensor k = ws({b, 1, kvh, hd}, q.dtype()), v = ws({b, 1, kvh, hd}, q.dtype());
  Tensor k2 = k.reshape({b, kvh * hd}), v2 = v.reshape({b, kvh * hd}), k3 = k.reshape({b, kvh, hd});
  gemm(xn, false, wq_t, true, q2);
  gemm(xn, false, wk_t, true, k2);
  gemm(xn, false, wv_t, true, v2);
  rope(q, pos, theta, false);
  rope(k3, pos, theta, false);
  kv_cache_write(k, v, pos, k_cache, v_cache);
}

void Ops::lm_head_argmax(const Tensor& x, const Tensor& w, Tensor& logits, Tensor& next) {
  gemm(x, false, w, true, logits);
  Tensor counter = empty({1}, DType::i32, workspace_tag());  // (sample's draw counter: unused at temperature 0)
  fill(counter, 0.0f);
  sample(logits, 0.0f, 0, counter, next);
}

std::unique_ptr<Ops> make_cpu_ops(std::size_t memory_limit_bytes) {
  return std::make_unique<cpu::CpuOps>(memory_limit_bytes);
}

}  // namespace moc
