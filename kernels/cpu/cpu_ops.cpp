// CPU backend: data movement, GEMM, element-wise ops, norms, RoPE, loss, optimizer, sampling.
#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "kernels/cpu/cpu_common.h"

namespace moc::cpu {

F32In::F32In(const Tensor& t) {
  if (t.dtype() == DType::f32) {
    p_ = t.data<float>();
  } else if (t.dtype() == DType::bf16) {
    auto n = static_cast<std::size_t>(t.numel());
    buf_.resize(n);
    const auto* h = t.data<std::uint16_t>();
    for (std::size_t i = 0; i < n; ++i) buf_[i] = bf16_to_f32(h[i]);
    p_ = buf_.data();
  } else {
    throw std::invalid_argument("expected a float tensor, got " + std::string(dtype_name(t.dtype())));
  }
}

F32Out::F32Out(Tensor& t, bool load_existing) : t_(&t) {
  if (t.dtype() == DType::f32) {
    p_ = t.data<float>();
  } else if (t.dtype() == DType::bf16) {
    auto n = static_cast<std::size_t>(t.numel());
    buf_.assign(n, 0.0f);
    if (load_existing) {
      const auto* h = t.data<std::uint16_t>();
      for (std::size_t i = 0; i < n; ++i) buf_[i] = bf16_to_f32(h[i]);
    }
    p_ = buf_.data();
  } else {
    throw std::invalid_argument("expected a float tensor, got " + std::string(dtype_name(t.dtype())));
  }
}

F32Out::~F32Out() {
  if (t_->dtype() != DType::bf16) return;
  auto* h = t_->data<std::uint16_t>();
  for (std::size_t i = 0; i < buf_.size(); ++i) h[i] = f32_to_bf16(buf_[i]);
}

namespace {
class ReplayGraph final : public OpGraph {
 public:
  explicit ReplayGraph(std::function<void()> fn) : fn_(std::move(fn)) {}
  void replay() override { fn_(); }

 private:
  std::function<void()> fn_;
};

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

// Deliberately nothing: a server CPU's last-level cache is hundreds of MB (320 MB reported on the CI machine),
// and writing twice that before every repetition would cost far more than the small ops a CPU point times
// (the CPU backend is the reference, not what the study measures). The call is still counted (Ops).
void CpuOps::flush_caches_impl() {}

std::unique_ptr<OpGraph> CpuOps::capture(std::function<void()> fn) {
  return std::make_unique<ReplayGraph>(std::move(fn));
}

void CpuOps::upload(Tensor& dst, const void* host) { std::memcpy(dst.raw(), host, dst.nbytes()); }
void CpuOps::download(const Tensor& src, void* host) { std::memcpy(host, src.raw(), src.nbytes()); }

void CpuOps::copy(Tensor& dst, const Tensor& src) {
  require(dst.numel() == src.numel(), "copy", shape_str(src.shape()) + " -> " + shape_str(dst.shape()));
  if (dst.dtype() == src.dtype()) {
    if (dst.raw() != src.raw()) std::memmove(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  F32In in(src);
  F32Out out(dst, false);
  std::copy_n(in.get(), src.numel(), out.get());
}

void CpuOps::fill(Tensor& t, float value) {
  if (t.dtype() == DType::i32) {
    std::fill_n(t.data<std::int32_t>(), t.numel(), static_cast<std::int32_t>(value));
  } else if (t.dtype() == DType::i16) {
    std::fill_n(t.data<std::uint16_t>(), t.numel(), static_cast<std::uint16_t>(value));
  } else {
    F32Out out(t, false);
    std::fill_n(out.get(), t.numel(), value);
  }
}

void CpuOps::gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta) {
  const auto [m, n, k] = gemm_dims(a, ta, b, tb, c);
  F32In A(a), B(b);
  F32Out C(c, beta != 0.0f);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m * n; ++i) C[i] *= beta;
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, A.get(), static_cast<int>(a.cols()), B.get(),
              static_cast<int>(b.cols()), beta, C.get(), static_cast<int>(n));
}

void CpuOps::add(const Tensor& a, const Tensor& b, Tensor& out) {
  require(a.numel() == b.numel() && a.numel() == out.numel(), "add", "size mismatch");
  F32In A(a), B(b);
  F32Out O(out, false);
  const std::int64_t n = a.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) O[i] = A[i] + B[i];
}

void CpuOps::embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) {
  const std::int64_t n = tokens.numel(), d = table.cols(), vocab = table.rows();
  require(tokens.dtype() == DType::i32 && out.rows() == n && out.cols() == d, "embedding_forward", "shape mismatch");
  F32In T(table);
  F32Out O(out, false);
  const auto* tok = tokens.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    require(tok[i] >= 0 && tok[i] < vocab, "embedding_forward", "token id " + std::to_string(tok[i]) + " out of range");
    std::copy_n(T.get() + tok[i] * d, d, O.get() + i * d);
  }
}

void CpuOps::embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) {
  const std::int64_t n = tokens.numel(), d = dtable.cols();
  F32In D(dout);
  F32Out G(dtable, true);
  const auto* tok = tokens.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < d; ++j) G[tok[i] * d + j] += D[i * d + j];
}

void CpuOps::rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const std::int64_t n = x.rows(), d = x.cols();
  require(w.numel() == d && y.numel() == x.numel() && rstd.numel() == n && rstd.dtype() == DType::f32,
          "rmsnorm_forward", "shape mismatch");
  F32In X(x), W(w);
  F32Out Y(y, false);
  float* r = rstd.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* xi = X.get() + i * d;
    double ss = 0;
    for (std::int64_t j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    r[i] = rs;
    for (std::int64_t j = 0; j < d; ++j) Y[i * d + j] = xi[j] * rs * W[j];
  }
}

void CpuOps::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                              Tensor& dw) {
  const std::int64_t n = x.rows(), d = x.cols();
  F32In DY(dy), X(x), W(w);
  F32Out DX(dx, true), DW(dw, true);
  const float* r = rstd.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* xi = X.get() + i * d;
    const float* gi = DY.get() + i * d;
    double dot = 0;  // sum_j dy_j w_j x_j
    for (std::int64_t j = 0; j < d; ++j) dot += static_cast<double>(gi[j]) * W[j] * xi[j];
    const float rs = r[i];
    const float c = static_cast<float>(dot / static_cast<double>(d)) * rs * rs * rs;
    for (std::int64_t j = 0; j < d; ++j) DX[i * d + j] += gi[j] * W[j] * rs - xi[j] * c;
  }
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < d; ++j) DW[j] += DY[i * d + j] * X[i * d + j] * r[i];
}

void CpuOps::rope(Tensor& x, const Tensor& positions, float theta, bool inverse) {
  require(x.rank() == 3 && positions.numel() == x.dim(0) && x.dim(2) % 2 == 0, "rope",
          "x must be [rows, heads, even head_dim] with one position per row");
  const std::int64_t n = x.dim(0), h = x.dim(1), hd = x.dim(2), half = hd / 2;
  F32Out X(x, true);
  const auto* pos = positions.data<std::int32_t>();
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<std::size_t>(i)] = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < half; ++i) {
      double ang = pos[r] * inv_freq[static_cast<std::size_t>(i)];
      float c = static_cast<float>(std::cos(ang)), s = sign * static_cast<float>(std::sin(ang));
      for (std::int64_t hh = 0; hh < h; ++hh) {
        float* p = X.get() + (r * h + hh) * hd;
        float a = p[i], b = p[i + half];
        p[i] = a * c - b * s;
        p[i + half] = b * c + a * s;
      }
    }
  }
}

void CpuOps::swiglu_forward(const Tensor& g, const Tensor& u, Tensor* s, Tensor& z) {
  require(g.numel() == u.numel() && z.numel() == g.numel() && (!s || s->numel() == g.numel()), "swiglu_forward",
          "size mismatch");
  F32In G(g), U(u);
  F32Out Z(z, false);
  std::optional<F32Out> S;
  if (s) S.emplace(*s, false);
  const std::int64_t n = g.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    float si = silu(G[i]);
    if (S) (*S)[i] = si;
    Z[i] = si * U[i];
  }
}

void CpuOps::swiglu_backward(const Tensor& dz, const Tensor& g, const Tensor& u, const Tensor* s, Tensor& dg,
                             Tensor& du) {
  F32In DZ(dz), G(g), U(u);
  std::optional<F32In> S;
  if (s) S.emplace(*s);
  F32Out DG(dg, false), DU(du, false);
  const std::int64_t n = g.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    float sg = sigmoid(G[i]);
    float si = S ? (*S)[i] : G[i] * sg;
    DU[i] = DZ[i] * si;
    DG[i] = DZ[i] * U[i] * sg * (1.0f + G[i] * (1.0f - sg));  // SiLU'(g) = σ(g)(1 + g(1 − σ(g)))
  }
}

void CpuOps::cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses) {
  const std::int64_t n = logits.rows(), V = logits.cols();
  require(targets.numel() == n && losses.numel() == n && losses.dtype() == DType::f32, "cross_entropy_forward",
          "shape mismatch");
  F32In L(logits);
  const auto* t = targets.data<std::int32_t>();
  float* out = losses.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] < 0) { out[i] = 0.0f; continue; }
    const float* li = L.get() + i * V;
    float mx = *std::max_element(li, li + V);
    double sum = 0;
    for (std::int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(li[j] - mx));
    out[i] = static_cast<float>(std::log(sum) + mx - li[t[i]]);
  }
}

void CpuOps::cross_entropy_backward(Tensor& logits, const Tensor& targets, float scale) {
  const std::int64_t n = logits.rows(), V = logits.cols();
  F32Out L(logits, true);
  const auto* t = targets.data<std::int32_t>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    float* li = L.get() + i * V;
    if (t[i] < 0) { std::fill_n(li, V, 0.0f); continue; }
    float mx = *std::max_element(li, li + V);
    double sum = 0;
    for (std::int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(li[j] - mx));
    for (std::int64_t j = 0; j < V; ++j)
      li[j] = scale * static_cast<float>(std::exp(static_cast<double>(li[j] - mx)) / sum);
    li[t[i]] -= scale;
  }
}

void CpuOps::sum_squares(const Tensor& t, Tensor& acc) {
  F32In T(t);
  double s = 0;
  const std::int64_t n = t.numel();
#pragma omp parallel for reduction(+ : s) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(T[i]) * T[i];
  acc.data<float>()[0] += static_cast<float>(s);
}

void CpuOps::adamw_step(const std::vector<ParamSlot>& slots, const AdamWParams& p) {
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(p.step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(p.step));
  for (const auto& s : slots) {
    Tensor& target = s.master ? *s.master : *s.param;
    F32In G(*s.grad);
    F32Out P(target, true), M(*s.m, true), V(*s.v, true);
    const float wd = s.decay ? p.weight_decay : 0.0f;
    const std::int64_t n = target.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      float g = G[i] * p.grad_scale;
      M[i] = p.beta1 * M[i] + (1.0f - p.beta1) * g;
      V[i] = p.beta2 * V[i] + (1.0f - p.beta2) * g * g;
      float mhat = M[i] / bc1, vhat = V[i] / bc2;
      P[i] -= p.lr * (mhat / (std::sqrt(vhat) + p.eps) + wd * P[i]);  // decoupled weight decay
    }
  }
  // The f32 views above have written back; give bf16 params the rounded master values.
  for (const auto& s : slots)
    if (s.master) copy(*s.param, *s.master);
}

void CpuOps::sample(const Tensor& logits, float temperature, std::uint64_t seed, const Tensor& counter,
                    Tensor& next) {
  const std::int64_t n = logits.rows(), V = logits.cols();
  require(next.numel() == n && next.dtype() == DType::i32, "sample", "next must be i32 [rows]");
  F32In L(logits);
  const std::int32_t step = counter.data<std::int32_t>()[0];
  auto* out = next.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* li = L.get() + i * V;
    if (temperature <= 0.0f) {
      out[i] = static_cast<std::int32_t>(std::max_element(li, li + V) - li);  // first maximum
      continue;
    }
    float mx = *std::max_element(li, li + V);
    std::vector<double> cdf(static_cast<std::size_t>(V));
    double sum = 0;
    for (std::int64_t j = 0; j < V; ++j) cdf[static_cast<std::size_t>(j)] = sum += std::exp((li[j] - mx) / temperature);
    std::uint64_t r = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(i) * 0x100000001b3ull +
                                                   static_cast<std::uint64_t>(static_cast<std::uint32_t>(step))));
    double u = static_cast<double>(r >> 11) * 0x1.0p-53 * sum;
    auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
    out[i] = static_cast<std::int32_t>(std::min<std::int64_t>(it - cdf.begin(), V - 1));
  }
}

void CpuOps::increment(Tensor& t, int by) {
  require(t.dtype() == DType::i32, "increment", "needs an i32 tensor");
  auto* p = t.data<std::int32_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] += by;
}

}  // namespace moc::cpu

namespace moc {

CpuBlasInfo cpu_blas() {
  CpuBlasInfo b;
  const char* config = openblas_get_config();
  b.config = config != nullptr ? config : "OpenBLAS";
  while (!b.config.empty() && b.config.back() == ' ') b.config.pop_back();
  const int parallel = openblas_get_parallel();
  b.threading = parallel == 2 ? "OpenMP" : parallel == 1 ? "pthreads" : "sequential";
  b.threads = openblas_get_num_threads();
  return b;
}

}  // namespace moc
