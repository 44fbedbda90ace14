// CudaOps element-wise and row ops: copy/fill, add, embedding, RMSNorm, RoPE, KV-cache write, SwiGLU,
// increment. fp32 math on f32/bf16 storage; semantics are those of CpuOps (kernels/cpu/cpu_ops.cpp).
#include "kernels/op_cost.h"
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cuda/cuda_ops_impl.cuh"

namespace moc::cuda {

namespace {

#define MOC_GRID_STRIDE(i, n)                                                                           \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

constexpr int kThreads = 256;

// ---------------------------------------------------------------- data movement

__global__ void convert_kernel(FIn src, FOut dst, std::int64_t n) {
  MOC_GRID_STRIDE(i, n) dst.set(i, src[i]);
}

template <class W>
__global__ void fill_kernel(W* p, W value, std::int64_t n) {
  MOC_GRID_STRIDE(i, n) p[i] = value;
}

__global__ void add_kernel(FIn a, FIn b, FOut out, std::int64_t n) {
  MOC_GRID_STRIDE(i, n) out.set(i, a[i] + b[i]);
}

// PDL-launched (a decode step's positions and counters).
__global__ void increment_kernel(std::int32_t* t, std::int64_t n, int by) {
  pdl_trigger();
  pdl_wait();
  MOC_GRID_STRIDE(i, n) t[i] += by;
}

// A small same-dtype copy inside a decode step (the sampled ids fed back as the next tokens): a PDL
// kernel instead of a memcpy node. 16-byte words when both ends allow, bytes otherwise.
constexpr std::size_t kKernelCopyMax = std::size_t(256) << 10;
__global__ void copy_bytes_kernel(const unsigned char* src, unsigned char* dst, std::int64_t n, bool vec) {
  pdl_trigger();
  pdl_wait();
  if (vec) {
    MOC_GRID_STRIDE(i, n / 16) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    MOC_GRID_STRIDE(i, n) dst[i] = src[i];
  }
}

// ---------------------------------------------------------------- embedding

// Out-of-range token ids (the CPU backend throws) give NaN rows.
__global__ void embedding_forward_kernel(const std::int32_t* tok, FIn table, FOut out, std::int64_t n,
                                         std::int64_t d, std::int64_t vocab) {
  MOC_GRID_STRIDE(e, n * d) {
    const std::int64_t i = e / d, j = e - i * d;
    const std::int32_t t = tok[i];
    out.set(e, t >= 0 && t < vocab ? table[t * d + j] : __int_as_float(0x7fc00000));
  }
}

// keys[i] = token (vocab for ids out of range), rows[i] = i: sorted stably, equal tokens keep row order.
__global__ void embedding_keys_kernel(const std::int32_t* tok, std::int64_t n, std::int32_t vocab,
                                      std::int32_t* keys, std::int32_t* rows) {
  MOC_GRID_STRIDE(i, n) {
    const std::int32_t t = tok[i];
    keys[i] = t >= 0 && t < vocab ? t : vocab;
    rows[i] = static_cast<std::int32_t>(i);
  }
}

// One block per run of equal sorted tokens (started at position p): dtable[t, :] += sum of its rows of
// dout, summed in ascending row order (deterministic).
__global__ void embedding_backward_kernel(const std::int32_t* keys, const std::int32_t* rows, std::int64_t n,
                                          std::int32_t vocab, FIn dout, FOut dtable, std::int64_t d) {
  for (std::int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const std::int32_t t = keys[p];
    if (t >= vocab || (p > 0 && keys[p - 1] == t)) continue;
    std::int64_t end = p + 1;
    while (end < n && keys[end] == t) ++end;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      float acc = 0.0f;
      for (std::int64_t q = p; q < end; ++q) acc += dout[static_cast<std::int64_t>(rows[q]) * d + j];
      const std::int64_t o = static_cast<std::int64_t>(t) * d + j;
      dtable.set(o, dtable.get(o) + acc);
    }
  }
}

// ---------------------------------------------------------------- RMSNorm

// Any dtype mix (one block per row). PDL-launched, as the vectorized kernel below.
__global__ void rmsnorm_forward_kernel(FIn x, FIn w, float eps, FOut y, float* rstd, std::int64_t d) {
  __shared__ float red[32];
  pdl_trigger();
  pdl_wait();
  const std::int64_t row = blockIdx.x, base = row * d;
  float ss = 0.0f;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = x[base + j];
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float rs = static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(d) + eps));
  if (threadIdx.x == 0) rstd[row] = rs;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) y.set(base + j, x[base + j] * rs * w[j]);
}

// x, w, y of one dtype T, d a multiple of 16 / sizeof(T), 16-byte aligned rows: one block per row, each
// thread keeps up to V 16-byte vectors of its row in registers between the sum of squares and the
// scaling (decode: d 2048 bf16 is one vector per thread). Same arithmetic as the generic kernel.
template <class T, int V>
__global__ void __launch_bounds__(kThreads) rmsnorm_vec_kernel(const T* x, const T* w, float eps, T* y, float* rstd,
                                                               int d) {
  constexpr int E = 16 / sizeof(T);
  __shared__ float red[32];
  pdl_trigger();
  pdl_wait();
  const int nv = d / E;
  const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<std::size_t>(blockIdx.x) * d);
  uint4 xv[V];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int j = threadIdx.x + i * kThreads;
    xv[i] = j < nv ? xr[j] : make_uint4(0u, 0u, 0u, 0u);
    const T* e = reinterpret_cast<const T*>(&xv[i]);
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float v = to_f32(e[k]);
      ss += v * v;
    }
  }
  ss = block_sum(ss, red);
  const float rs = static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(d) + eps));
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
  const uint4* wr = reinterpret_cast<const uint4*>(w);
  uint4* yr = reinterpret_cast<uint4*>(y + static_cast<std::size_t>(blockIdx.x) * d);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int j = threadIdx.x + i * kThreads;
    if (j >= nv) break;
    const uint4 wv = wr[j];
    const T* xe = reinterpret_cast<const T*>(&xv[i]);
    const T* we = reinterpret_cast<const T*>(&wv);
    uint4 out;
    T* oe = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int k = 0; k < E; ++k) oe[k] = from_f32<T>(to_f32(xe[k]) * rs * to_f32(we[k]));
    yr[j] = out;
  }
}

// dx[i, j] += dy w rs - x c with c = (sum_j dy w x) / d * rs^3 (one block per row).
__global__ void rmsnorm_backward_dx_kernel(FIn dy, FIn x, FIn w, const float* rstd, FOut dx, std::int64_t d) {
  __shared__ float red[32];
  const std::int64_t row = blockIdx.x, base = row * d;
  float dot = 0.0f;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += dy[base + j] * w[j] * x[base + j];
  dot = block_sum(dot, red);
  const float rs = rstd[row];
  const float c = dot / static_cast<float>(d) * rs * rs * rs;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x)
    dx.set(base + j, dx.get(base + j) + (dy[base + j] * w[j] * rs - x[base + j] * c));
}

// Column sums of dy x rs over the rows [chunk * rows_per, ...): into partial[chunk, :], or straight into
// dw when there is one chunk.
__global__ void rmsnorm_backward_dw_kernel(FIn dy, FIn x, const float* rstd, std::int64_t n, std::int64_t d,
                                           std::int64_t rows_per, float* partial, FOut dw, bool direct) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  const std::int64_t r0 = blockIdx.y * rows_per, r1 = min(n, r0 + rows_per);
  float acc = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) acc += dy[r * d + j] * x[r * d + j] * rstd[r];
  if (direct) dw.set(j, dw.get(j) + acc);
  else partial[blockIdx.y * d + j] = acc;
}

__global__ void rmsnorm_backward_dw_reduce_kernel(const float* partial, int chunks, std::int64_t d, FOut dw) {
  MOC_GRID_STRIDE(j, d) {
    float acc = 0.0f;
    for (int c = 0; c < chunks; ++c) acc += partial[c * d + j];
    dw.set(j, dw.get(j) + acc);
  }
}

// ---------------------------------------------------------------- RoPE

// One thread per (row, head, pair): the angle math runs in parallel across heads instead of in a loop,
// which made decode-sized calls latency bound. The frequencies theta^(-2i/hd) come from the host (the
// CPU backend's std::pow, bit for bit) for up to kRopeTable pairs, the angle pos * freq and its sine and
// cosine in double as on the CPU, and the rotation without fused multiply-adds so both backends round
// alike. Wider heads compute the frequency on the device.
constexpr int kRopeTable = 64;
struct RopeFreqs {
  double f[kRopeTable];
};

__global__ void rope_kernel(FOut x, const std::int32_t* pos, std::int64_t n, std::int64_t h, std::int64_t hd,
                            double theta, float sign, const RopeFreqs freqs, bool table) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t half = hd / 2;
  MOC_GRID_STRIDE(e, n * h * half) {
    const std::int64_t i = e % half, rh = e / half, r = rh / h;
    const double inv_freq =
        table ? freqs.f[i] : pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
    const double ang = static_cast<double>(pos[r]) * inv_freq;
    double sd, cd;
    sincos(ang, &sd, &cd);
    const float c = static_cast<float>(cd), s = sign * static_cast<float>(sd);
    const std::int64_t o = rh * hd;
    const float a = x.get(o + i), b = x.get(o + i + half);
    x.set(o + i, __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    x.set(o + i + half, __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
  }
}

// ---------------------------------------------------------------- KV cache

// Rows whose start position would run past the cache (the CPU backend throws) are not written.
__global__ void kv_cache_write_kernel(FIn k, FIn v, const std::int32_t* start, FOut kc, FOut vc, std::int64_t b,
                                      std::int64_t n, std::int64_t kvh, std::int64_t hd, std::int64_t T) {
  pdl_trigger();
  pdl_wait();
  MOC_GRID_STRIDE(e, b * n * kvh * hd) {
    const std::int64_t c = e % hd;
    std::int64_t rest = e / hd;
    const std::int64_t kh = rest % kvh;
    rest /= kvh;
    const std::int64_t t = rest % n, bi = rest / n;
    const std::int64_t st = start[bi];
    if (st < 0 || st + n > T) continue;
    const std::int64_t dst = ((bi * kvh + kh) * T + st + t) * hd + c;
    kc.set(dst, k[e]);
    vc.set(dst, v[e]);
  }
}

// k, v and the caches of one dtype, rows of hd elements in whole 16-byte words, all four 16-byte aligned:
// one thread per word of k and of v.
__global__ void kv_cache_write_vec_kernel(const uint4* __restrict__ k, const uint4* __restrict__ v,
                                          const std::int32_t* start, uint4* kc, uint4* vc, std::int64_t b,
                                          std::int64_t n, std::int64_t kvh, std::int64_t words, std::int64_t T) {
  pdl_trigger();
  pdl_wait();
  MOC_GRID_STRIDE(e, b * n * kvh * words) {
    const std::int64_t c = e % words;
    std::int64_t rest = e / words;
    const std::int64_t kh = rest % kvh;
    rest /= kvh;
    const std::int64_t t = rest % n, bi = rest / n;
    const std::int64_t st = start[bi];
    if (st < 0 || st + n > T) continue;
    const std::int64_t dst = ((bi * kvh + kh) * T + st + t) * words + c;
    kc[dst] = k[e];
    vc[dst] = v[e];
  }
}

// ---------------------------------------------------------------- SwiGLU

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_forward_kernel(FIn g, FIn u, FOut s, bool has_s, FOut z, std::int64_t n) {
  MOC_GRID_STRIDE(i, n) {
    const float gi = g[i];
    const float si = gi * sigmoidf_(gi);
    if (has_s) s.set(i, si);
    z.set(i, si * u[i]);
  }
}

__global__ void swiglu_backward_kernel(FIn dz, FIn g, FIn u, FIn s, bool has_s, FOut dg, FOut du, std::int64_t n) {
  MOC_GRID_STRIDE(i, n) {
    const float gi = g[i], sg = sigmoidf_(gi);
    const float si = has_s ? s[i] : gi * sg;
    const float dzi = dz[i];
    du.set(i, dzi * si);
    dg.set(i, dzi * u[i] * sg * (1.0f + gi * (1.0f - sg)));
  }
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.raw());
  const auto* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

// ================================================================ methods

void CudaOps::copy(Tensor& dst, const Tensor& src) {
  MOC_OP_COST(cost::copy(dst, src));
  require(dst.numel() == src.numel(), "copy", shape_str(src.shape()) + " -> " + shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype()) {
    if (dst.raw() == src.raw()) return;
    if (overlaps(dst, src)) {  // as memmove: through a temporary
      Tensor tmp = empty(src.shape(), src.dtype(), workspace_tag());
      MOC_CUDA_CHECK(cudaMemcpyAsync(tmp.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, cur()));
      MOC_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), tmp.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, cur()));
      return;
    }
    if (src.nbytes() <= kKernelCopyMax) {
      const auto n = static_cast<std::int64_t>(src.nbytes());
      const bool vec = n % 16 == 0 && reinterpret_cast<std::uintptr_t>(src.raw()) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(dst.raw()) % 16 == 0;
      launch_pdl("copy_bytes_kernel", copy_bytes_kernel, dim3(grid_1d(vec ? n / 16 : n, kThreads)), dim3(kThreads), 0,
                 cur(), static_cast<const unsigned char*>(src.raw()), static_cast<unsigned char*>(dst.raw()), n, vec);
      return;
    }
    MOC_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, cur()));
    return;
  }
  const FIn in = fin(src, "copy", "a converting copy's source");
  const FOut out = fout(dst, "copy", "a converting copy's destination");
  convert_kernel<<<grid_1d(src.numel(), kThreads), kThreads, 0, cur()>>>(in, out, src.numel());
  MOC_CUDA_LAUNCHED("convert_kernel");
}

void CudaOps::fill(Tensor& t, float value) {
  MOC_OP_COST(cost::fill(t));
  const std::int64_t n = t.numel();
  if (n == 0) return;
  const int grid = grid_1d(n, kThreads);
  switch (t.dtype()) {
    case DType::f32: {
      std::uint32_t bits;
      std::memcpy(&bits, &value, 4);
      if (bits == 0) break;
      fill_kernel<<<grid, kThreads, 0, cur()>>>(t.data<std::uint32_t>(), bits, n);
      MOC_CUDA_LAUNCHED("fill_kernel");
      return;
    }
    case DType::bf16: {
      const std::uint16_t bits = f32_to_bf16(value);
      if (bits == 0) break;
      fill_kernel<<<grid, kThreads, 0, cur()>>>(t.data<std::uint16_t>(), bits, n);
      MOC_CUDA_LAUNCHED("fill_kernel");
      return;
    }
    case DType::i32: {
      const auto v = static_cast<std::int32_t>(value);
      if (v == 0) break;
      fill_kernel<<<grid, kThreads, 0, cur()>>>(t.data<std::int32_t>(), v, n);
      MOC_CUDA_LAUNCHED("fill_kernel");
      return;
    }
    case DType::i16: {
      const auto v = static_cast<std::uint16_t>(value);
      if (v == 0) break;
      fill_kernel<<<grid, kThreads, 0, cur()>>>(t.data<std::uint16_t>(), v, n);
      MOC_CUDA_LAUNCHED("fill_kernel");
      return;
    }
  }
  MOC_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), cur()));  // all-zero bit pattern
}

void CudaOps::add(const Tensor& a, const Tensor& b, Tensor& out) {
  MOC_OP_COST(cost::add(a, b, out));
  require(a.numel() == b.numel() && a.numel() == out.numel(), "add", "size mismatch");
  const FIn A = fin(a, "add", "a"), B = fin(b, "add", "b");
  const FOut O = fout(out, "add", "out");
  const std::int64_t n = a.numel();
  if (n == 0) return;
  add_kernel<<<grid_1d(n, kThreads), kThreads, 0, cur()>>>(A, B, O, n);
  MOC_CUDA_LAUNCHED("add_kernel");
}

void CudaOps::increment(Tensor& t, int by) {
  MOC_OP_COST(cost::increment(t));
  require(t.dtype() == DType::i32, "increment", "needs an i32 tensor");
  if (t.numel() == 0) return;
  launch_pdl("increment_kernel", increment_kernel, dim3(grid_1d(t.numel(), kThreads)), dim3(kThreads), 0, cur(),
             t.data<std::int32_t>(), t.numel(), by);
}

void CudaOps::embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) {
  MOC_OP_COST(cost::embedding_forward(tokens, table, out));
  const std::int64_t n = tokens.numel(), d = table.cols(), vocab = table.rows();
  require(tokens.dtype() == DType::i32 && out.rows() == n && out.cols() == d, "embedding_forward", "shape mismatch");
  const FIn T = fin(table, "embedding_forward", "table");
  const FOut O = fout(out, "embedding_forward", "out");
  if (n * d == 0) return;
  embedding_forward_kernel<<<grid_1d(n * d, kThreads), kThreads, 0, cur()>>>(tokens.data<std::int32_t>(), T, O, n, d,
                                                                             vocab);
  MOC_CUDA_LAUNCHED("embedding_forward_kernel");
}

void CudaOps::embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) {
  MOC_OP_COST(cost::embedding_backward(tokens, dout, dtable));
  const std::int64_t n = tokens.numel(), d = dtable.cols(), vocab = dtable.rows();
  require(tokens.dtype() == DType::i32 && dout.rows() == n && dout.cols() == d, "embedding_backward",
          "tokens i32 [n], dout [n, d], dtable [vocab, d]");
  require(n <= std::numeric_limits<std::int32_t>::max() && vocab < std::numeric_limits<std::int32_t>::max(),
          "embedding_backward", "too many tokens or too large a vocabulary");
  const FIn D = fin(dout, "embedding_backward", "dout");
  const FOut G = fout(dtable, "embedding_backward", "dtable");
  if (n == 0 || d == 0) return;
  const int ni = static_cast<int>(n);
  const auto v32 = static_cast<std::int32_t>(vocab);
  Tensor keys = empty({2, n}, DType::i32, workspace_tag()), rows = empty({2, n}, DType::i32, workspace_tag());
  std::int32_t* k_in = keys.data<std::int32_t>();
  std::int32_t* k_out = k_in + n;
  std::int32_t* r_in = rows.data<std::int32_t>();
  std::int32_t* r_out = r_in + n;
  embedding_keys_kernel<<<grid_1d(n, kThreads), kThreads, 0, cur()>>>(tokens.data<std::int32_t>(), n, v32, k_in,
                                                                      r_in);
  MOC_CUDA_LAUNCHED("embedding_keys_kernel");
  int end_bit = 1;
  while (end_bit < 31 && (std::int64_t(1) << end_bit) <= vocab) ++end_bit;  // keys lie in [0, vocab]
  std::size_t temp_bytes = 0;
  MOC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, r_in, r_out, ni, 0, end_bit,
                                                 cur()));
  Tensor temp = empty({static_cast<std::int64_t>((temp_bytes + 3) / 4)}, DType::i32, workspace_tag());
  MOC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, k_in, k_out, r_in, r_out, ni, 0, end_bit,
                                                 cur()));
  embedding_backward_kernel<<<grid_1d(n, 1), kThreads, 0, cur()>>>(k_out, r_out, n, v32, D, G, d);
  MOC_CUDA_LAUNCHED("embedding_backward_kernel");
}

void CudaOps::rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  MOC_OP_COST(cost::rmsnorm_forward(x, w, y, rstd));
  const std::int64_t n = x.rows(), d = x.cols();
  require(w.numel() == d && y.numel() == x.numel() && rstd.numel() == n && rstd.dtype() == DType::f32,
          "rmsnorm_forward", "shape mismatch");
  const FIn X = fin(x, "rmsnorm_forward", "x"), W = fin(w, "rmsnorm_forward", "w");
  const FOut Y = fout(y, "rmsnorm_forward", "y");
  if (n == 0) return;
  require(n <= std::numeric_limits<int>::max() && d <= std::numeric_limits<int>::max(), "rmsnorm_forward",
          "too many rows or columns");
  const std::size_t elt = dtype_bytes(x.dtype());
  const std::int64_t nv = d * static_cast<std::int64_t>(elt) / 16;
  const auto al16 = [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0; };
  const bool vec = x.dtype() == w.dtype() && x.dtype() == y.dtype() && (d * static_cast<std::int64_t>(elt)) % 16 == 0 &&
                   al16(x) && al16(w) && al16(y) && nv <= 4 * kThreads;
  const dim3 grid(static_cast<unsigned>(n)), block(kThreads);
  float* r = rstd.data<float>();
  const int di = static_cast<int>(d);
  if (!vec) {
    launch_pdl("rmsnorm_forward_kernel", rmsnorm_forward_kernel, grid, block, 0, cur(), X, W, eps, Y, r, d);
    return;
  }
  dispatch_float(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xp = x.data<T>();
    const T* wp = w.data<T>();
    T* yp = y.data<T>();
    auto kernel = nv <= kThreads ? rmsnorm_vec_kernel<T, 1>
                  : nv <= 2 * kThreads ? rmsnorm_vec_kernel<T, 2> : rmsnorm_vec_kernel<T, 4>;
    launch_pdl("rmsnorm_vec_kernel", kernel, grid, block, 0, cur(), xp, wp, eps, yp, r, di);
  });
}

void CudaOps::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                               Tensor& dw) {
  MOC_OP_COST(cost::rmsnorm_backward(dy, x, w, rstd, dx, dw));
  const std::int64_t n = x.rows(), d = x.cols();
  require(dy.numel() == x.numel() && dx.numel() == x.numel() && w.numel() == d && dw.numel() == d &&
              rstd.numel() == n && rstd.dtype() == DType::f32,
          "rmsnorm_backward", "shape mismatch");
  const FIn DY = fin(dy, "rmsnorm_backward", "dy"), X = fin(x, "rmsnorm_backward", "x"),
            W = fin(w, "rmsnorm_backward", "w");
  const FOut DX = fout(dx, "rmsnorm_backward", "dx"), DW = fout(dw, "rmsnorm_backward", "dw");
  if (n == 0 || d == 0) return;
  require(n <= std::numeric_limits<int>::max(), "rmsnorm_backward", "too many rows");
  const float* r = rstd.data<float>();
  rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(n), kThreads, 0, cur()>>>(DY, X, W, r, DX, d);
  MOC_CUDA_LAUNCHED("rmsnorm_backward_dx_kernel");
  // dw: column sums over row chunks, enough chunks to fill the GPU, then a fixed-order sum of the chunks.
  const int col_blocks = ceil_div(d, kThreads);
  const std::int64_t want_chunks = std::max<std::int64_t>(1, (4LL * sm_count_ + col_blocks - 1) / col_blocks);
  const std::int64_t rows_per = std::max<std::int64_t>(16, (n + want_chunks - 1) / want_chunks);
  const int chunks = ceil_div(n, rows_per);
  Tensor partial;
  float* pp = nullptr;
  if (chunks > 1) {
    partial = empty({chunks, d}, DType::f32, workspace_tag());
    pp = partial.data<float>();
  }
  rmsnorm_backward_dw_kernel<<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)), kThreads, 0,
                               cur()>>>(DY, X, r, n, d, rows_per, pp, DW, chunks == 1);
  MOC_CUDA_LAUNCHED("rmsnorm_backward_dw_kernel");
  if (chunks > 1) {
    rmsnorm_backward_dw_reduce_kernel<<<grid_1d(d, kThreads), kThreads, 0, cur()>>>(pp, chunks, d, DW);
    MOC_CUDA_LAUNCHED("rmsnorm_backward_dw_reduce_kernel");
  }
}

void CudaOps::rope(Tensor& x, const Tensor& positions, float theta, bool inverse) {
  MOC_OP_COST(cost::rope(x, positions));
  require(x.rank() == 3 && positions.numel() == x.dim(0) && x.dim(2) % 2 == 0 && positions.dtype() == DType::i32,
          "rope", "x must be [rows, heads, even head_dim] with one i32 position per row");
  const std::int64_t n = x.dim(0), h = x.dim(1), hd = x.dim(2);
  const FOut X = fout(x, "rope", "x");
  if (n * hd == 0 || h == 0) return;
  // Small calls (decode) in blocks of 64: the double-precision angle math then spreads over more SMs.
  const std::int64_t total = n * h * (hd / 2);
  const int threads = total <= (std::int64_t(1) << 16) ? 64 : kThreads;
  RopeFreqs freqs{};
  const bool table = hd / 2 <= kRopeTable;
  for (std::int64_t i = 0; table && i < hd / 2; ++i)  // exactly as CpuOps::rope
    freqs.f[i] = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  launch_pdl("rope_kernel", rope_kernel, dim3(grid_1d(total, threads)), dim3(threads), 0, cur(), X,
             positions.data<std::int32_t>(), n, h, hd, static_cast<double>(theta), inverse ? -1.0f : 1.0f, freqs,
             table);
}

void CudaOps::kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& start, Tensor& k_cache,
                             Tensor& v_cache) {
  MOC_OP_COST(cost::kv_cache_write(k, v, start));
  require(k.rank() == 4 && k.shape() == v.shape() && k_cache.rank() == 4 && k_cache.shape() == v_cache.shape(),
          "kv_cache_write", "k/v [b, n, kvh, hd] and caches [b, kvh, max_seq, hd]");
  const std::int64_t b = k.dim(0), n = k.dim(1), kvh = k.dim(2), hd = k.dim(3), T = k_cache.dim(2);
  require(k_cache.dim(0) == b && k_cache.dim(1) == kvh && k_cache.dim(3) == hd && start.numel() == b &&
              start.dtype() == DType::i32,
          "kv_cache_write", "cache " + shape_str(k_cache.shape()) + " does not fit k " + shape_str(k.shape()));
  require(k_cache.dtype() == v_cache.dtype(), "kv_cache_write", "k and v caches differ in dtype");
  const FIn K = fin(k, "kv_cache_write", "k"), V = fin(v, "kv_cache_write", "v");
  const FOut KC = fout(k_cache, "kv_cache_write", "k_cache"), VC = fout(v_cache, "kv_cache_write", "v_cache");
  const std::int64_t total = b * n * kvh * hd;
  if (total == 0) return;
  const std::size_t elt = dtype_bytes(k.dtype());
  const auto al16 = [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0; };
  if (k.dtype() == v.dtype() && k.dtype() == k_cache.dtype() && (hd * static_cast<std::int64_t>(elt)) % 16 == 0 &&
      al16(k) && al16(v) && al16(k_cache) && al16(v_cache)) {
    const std::int64_t words = hd * static_cast<std::int64_t>(elt) / 16;
    launch_pdl("kv_cache_write_vec_kernel", kv_cache_write_vec_kernel, dim3(grid_1d(b * n * kvh * words, kThreads)),
               dim3(kThreads), 0, cur(), static_cast<const uint4*>(k.raw()), static_cast<const uint4*>(v.raw()),
               start.data<std::int32_t>(), static_cast<uint4*>(k_cache.raw()), static_cast<uint4*>(v_cache.raw()), b,
               n, kvh, words, T);
    return;
  }
  launch_pdl("kv_cache_write_kernel", kv_cache_write_kernel, dim3(grid_1d(total, kThreads)), dim3(kThreads), 0, cur(),
             K, V, start.data<std::int32_t>(), KC, VC, b, n, kvh, hd, T);
}

void CudaOps::swiglu_forward(const Tensor& g, const Tensor& u, Tensor* s, Tensor& z) {
  MOC_OP_COST(cost::swiglu_forward(g, u, s, z));
  require(g.numel() == u.numel() && z.numel() == g.numel() && (!s || s->numel() == g.numel()), "swiglu_forward",
          "size mismatch");
  const FIn G = fin(g, "swiglu_forward", "g"), U = fin(u, "swiglu_forward", "u");
  const FOut Z = fout(z, "swiglu_forward", "z");
  const FOut S = s ? fout(*s, "swiglu_forward", "s") : FOut{nullptr, false};
  const std::int64_t n = g.numel();
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_1d(n, kThreads), kThreads, 0, cur()>>>(G, U, S, s != nullptr, Z, n);
  MOC_CUDA_LAUNCHED("swiglu_forward_kernel");
}

void CudaOps::swiglu_backward(const Tensor& dz, const Tensor& g, const Tensor& u, const Tensor* s, Tensor& dg,
                              Tensor& du) {
  MOC_OP_COST(cost::swiglu_backward(dz, g, u, s));
  const std::int64_t n = g.numel();
  require(dz.numel() == n && u.numel() == n && dg.numel() == n && du.numel() == n && (!s || s->numel() == n),
          "swiglu_backward", "size mismatch");
  const FIn DZ = fin(dz, "swiglu_backward", "dz"), G = fin(g, "swiglu_backward", "g"),
            U = fin(u, "swiglu_backward", "u");
  const FIn S = s ? fin(*s, "swiglu_backward", "s") : FIn{nullptr, false};
  const FOut DG = fout(dg, "swiglu_backward", "dg"), DU = fout(du, "swiglu_backward", "du");
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_1d(n, kThreads), kThreads, 0, cur()>>>(DZ, G, U, S, s != nullptr, DG, DU, n);
  MOC_CUDA_LAUNCHED("swiglu_backward_kernel");
}

}  // namespace moc::cuda
