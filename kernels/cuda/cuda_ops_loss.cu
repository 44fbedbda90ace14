// CudaOps loss, optimizer and sampling: cross-entropy forward/backward, sum of squares, AdamW, and
// greedy / seeded sampling with the same counter-based RNG as CpuOps::sample.
#include "kernels/op_cost.h"
#include <cmath>
#include <limits>

#include "kernels/cuda/cuda_ops_impl.cuh"

namespace moc::cuda {

namespace {

constexpr int kRowThreads = 512;

// ---------------------------------------------------------------- cross-entropy

// One block per row. Targets outside [0, V) other than the ignored negatives give NaN.
__global__ void cross_entropy_forward_kernel(FIn logits, const std::int32_t* targets, float* losses, std::int64_t V) {
  __shared__ float redf[32];
  __shared__ double redd[32];
  const std::int64_t row = blockIdx.x, base = row * V;
  const std::int32_t t = targets[row];
  if (t < 0) {
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, logits[base + j]);
  mx = block_max(mx, redf);
  double sum = 0.0;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) sum += static_cast<double>(expf(logits[base + j] - mx));
  sum = block_sum(sum, redd);
  if (threadIdx.x == 0)
    losses[row] = t < V ? static_cast<float>(log(sum) + static_cast<double>(mx) - static_cast<double>(logits[base + t]))
                        : __int_as_float(0x7fc00000);
}

// In place: logits <- scale * (softmax - onehot(target)); ignored rows become 0.
__global__ void cross_entropy_backward_kernel(FOut logits, const std::int32_t* targets, float scale, std::int64_t V) {
  __shared__ float redf[32];
  __shared__ double redd[32];
  const std::int64_t row = blockIdx.x, base = row * V;
  const std::int32_t t = targets[row];
  if (t < 0) {
    for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) logits.set(base + j, 0.0f);
    return;
  }
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, logits.get(base + j));
  mx = block_max(mx, redf);
  double sum = 0.0;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x)
    sum += static_cast<double>(expf(logits.get(base + j) - mx));
  sum = block_sum(sum, redd);
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float p = scale * static_cast<float>(static_cast<double>(expf(logits.get(base + j) - mx)) / sum);
    if (j == t) p -= scale;
    logits.set(base + j, p);
  }
}

// ---------------------------------------------------------------- sum of squares

__global__ void sum_squares_partial_kernel(FIn t, std::int64_t n, double* partial) {
  __shared__ double red[32];
  double s = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double v = t[i];
    s += v * v;
  }
  s = block_sum(s, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_final_kernel(const double* partial, int parts, float* acc) {
  __shared__ double red[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) s += partial[i];
  s = block_sum(s, red);
  if (threadIdx.x == 0) acc[0] += static_cast<float>(s);
}

// ---------------------------------------------------------------- AdamW

struct AdamConsts {
  float lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale;
};

// target (the master weights when there are any) is updated; copy, when given, gets its rounded value.
__global__ void adamw_kernel(FOut target, FIn grad, FOut m, FOut v, FOut copy, bool has_copy, std::int64_t n,
                             AdamConsts c) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * c.grad_scale;
    const float mi = c.beta1 * m.get(i) + (1.0f - c.beta1) * g;
    const float vi = c.beta2 * v.get(i) + (1.0f - c.beta2) * g * g;
    m.set(i, mi);
    v.set(i, vi);
    const float mhat = mi / c.bc1, vhat = vi / c.bc2;
    float p = target.get(i);
    p -= c.lr * (mhat / (sqrtf(vhat) + c.eps) + c.wd * p);
    target.set(i, p);
    if (has_copy) copy.set(i, p);
  }
}

// ---------------------------------------------------------------- sampling

__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Keeps (best, bi) the first maximum of the two: the larger value, the lower index among equals.
__device__ __forceinline__ void argmax_merge(float& best, std::int64_t& bi, float ov, std::int64_t oi) {
  if (ov > best || (ov == best && oi < bi)) {
    best = ov;
    bi = oi;
  }
}

// Reduces each thread's (best, bi) over the block; thread 0 writes the row's id (0 when no element compared
// greater than -inf or equal to it, as the generic kernel).
__device__ __forceinline__ void argmax_block_finish(float best, std::int64_t bi, std::int64_t V, std::int32_t* out) {
  __shared__ float sv[32];
  __shared__ std::int64_t si[32];
  for (int o = 16; o > 0; o >>= 1)
    argmax_merge(best, bi, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, bi, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; ++w) argmax_merge(best, bi, sv[w], si[w]);
    *out = static_cast<std::int32_t>(bi < V ? bi : 0);
  }
}

// Greedy decoding's argmax over f32 logits with V % 4 == 0 and 16-byte aligned rows: one block of 1024
// threads per row, 16-byte loads, kArgmaxUnroll of them in flight per thread (V = 32000: 8 per thread).
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxUnroll = 8;
__global__ void __launch_bounds__(kArgmaxThreads) argmax_vec_kernel(const float4* __restrict__ logits, std::int64_t V,
                                                                    std::int32_t* next) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t nv = V / 4;
  const float4* row = logits + blockIdx.x * nv;
  float best = -INFINITY;
  std::int64_t bi = V;
  for (std::int64_t base = 0; base < nv; base += static_cast<std::int64_t>(kArgmaxThreads) * kArgmaxUnroll) {
    float4 r[kArgmaxUnroll];
#pragma unroll
    for (int u = 0; u < kArgmaxUnroll; ++u) {
      const std::int64_t j = base + threadIdx.x + static_cast<std::int64_t>(u) * kArgmaxThreads;
      r[u] = j < nv ? __ldcs(row + j) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
    // Ascending indices within a thread: strictly greater keeps the first of equal values; a padded
    // -inf never replaces anything with a lower index, so bi stays V only when nothing compared.
#pragma unroll
    for (int u = 0; u < kArgmaxUnroll; ++u) {
      const std::int64_t j = (base + threadIdx.x + static_cast<std::int64_t>(u) * kArgmaxThreads) * 4;
      if (j >= V) break;
      argmax_merge(best, bi, r[u].x, j);
      argmax_merge(best, bi, r[u].y, j + 1);
      argmax_merge(best, bi, r[u].z, j + 2);
      argmax_merge(best, bi, r[u].w, j + 3);
    }
  }
  argmax_block_finish(best, bi, V, next + blockIdx.x);
}

// First maximum of each row (one block per row), any float dtype.
__global__ void argmax_kernel(FIn logits, std::int64_t V, std::int32_t* next) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t base = blockIdx.x * V;
  float best = -INFINITY;
  std::int64_t bi = V;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) argmax_merge(best, bi, logits[base + j], j);
  argmax_block_finish(best, bi, V, next + blockIdx.x);
}

// exp((l - mx) / temperature) as CpuOps computes it: a float argument, exp rounded to float.
__device__ __forceinline__ double weight(float l, float mx, float temperature) {
  return static_cast<double>(static_cast<float>(exp(static_cast<double>((l - mx) / temperature))));
}

// A draw from softmax(logits / temperature): the first j whose running sum of weights exceeds u * total,
// u from splitmix64 keyed by (seed, row, counter[0]) exactly as on the CPU. Each thread owns a contiguous
// chunk of the row, so the running sum follows the CPU's order up to rounding.
__global__ void sample_kernel(FIn logits, std::int64_t V, float temperature, std::uint64_t seed,
                              const std::int32_t* counter, std::int32_t* next) {
  __shared__ float redf[32];
  __shared__ double chunk_sum[1024];
  __shared__ double total_s;
  __shared__ unsigned long long found;
  const std::int64_t row = blockIdx.x, base = row * V;
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, logits[base + j]);
  mx = block_max(mx, redf);
  const std::int64_t chunk = (V + blockDim.x - 1) / blockDim.x;
  const std::int64_t j0 = min(V, threadIdx.x * chunk), j1 = min(V, j0 + chunk);
  double local = 0.0;
  for (std::int64_t j = j0; j < j1; ++j) local += weight(logits[base + j], mx, temperature);
  chunk_sum[threadIdx.x] = local;
  if (threadIdx.x == 0) found = static_cast<unsigned long long>(V - 1);  // upper_bound at the end: the last id
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive prefix in order, then the total
    double sum = 0.0;
    for (unsigned k = 0; k < blockDim.x; ++k) {
      const double c = chunk_sum[k];
      chunk_sum[k] = sum;
      sum += c;
    }
    total_s = sum;
  }
  __syncthreads();
  const double total = total_s;
  const std::int32_t step = counter[0];
  const std::uint64_t r =
      splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(row) * 0x100000001b3ull +
                                   static_cast<std::uint64_t>(static_cast<std::uint32_t>(step))));
  const double u = static_cast<double>(r >> 11) * 0x1.0p-53 * total;
  const double excl = chunk_sum[threadIdx.x];
  if (j0 < j1 && excl + local > u) {
    double run = excl;
    for (std::int64_t j = j0; j < j1; ++j) {
      run += weight(logits[base + j], mx, temperature);
      if (run > u) {
        atomicMin(&found, static_cast<unsigned long long>(j));
        break;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) next[row] = static_cast<std::int32_t>(found);
}

}  // namespace

// ================================================================ methods

void CudaOps::cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses) {
  MOC_OP_COST(cost::cross_entropy_forward(logits, targets, losses));
  const std::int64_t n = logits.rows(), V = logits.cols();
  require(targets.numel() == n && targets.dtype() == DType::i32 && losses.numel() == n &&
              losses.dtype() == DType::f32,
          "cross_entropy_forward", "shape mismatch");
  const FIn L = fin(logits, "cross_entropy_forward", "logits");
  if (n == 0) return;
  require(n <= std::numeric_limits<int>::max(), "cross_entropy_forward", "too many rows");
  cross_entropy_forward_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, cur()>>>(L, targets.data<std::int32_t>(),
                                                                                  losses.data<float>(), V);
  MOC_CUDA_LAUNCHED("cross_entropy_forward_kernel");
}

void CudaOps::cross_entropy_backward(Tensor& logits, const Tensor& targets, float scale) {
  MOC_OP_COST(cost::cross_entropy_backward(logits, targets));
  const std::int64_t n = logits.rows(), V = logits.cols();
  require(targets.numel() == n && targets.dtype() == DType::i32, "cross_entropy_backward",
          "targets must be i32 [rows]");
  const FOut L = fout(logits, "cross_entropy_backward", "logits");
  if (n == 0) return;
  require(n <= std::numeric_limits<int>::max(), "cross_entropy_backward", "too many rows");
  cross_entropy_backward_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, cur()>>>(
      L, targets.data<std::int32_t>(), scale, V);
  MOC_CUDA_LAUNCHED("cross_entropy_backward_kernel");
}

void CudaOps::sum_squares(const Tensor& t, Tensor& acc) {
  MOC_OP_COST(cost::sum_squares(t));
  require(acc.numel() == 1 && acc.dtype() == DType::f32, "sum_squares", "acc must be one f32 element");
  const FIn T = fin(t, "sum_squares", "t");
  const std::int64_t n = t.numel();
  if (n == 0) return;
  // The number of partial sums depends on n only, so the result does not depend on the device.
  const int parts = static_cast<int>(std::min<std::int64_t>(1024, (n + 2047) / 2048));
  Tensor partial = empty({2 * static_cast<std::int64_t>(parts)}, DType::f32, workspace_tag());
  auto* pp = static_cast<double*>(partial.raw());
  sum_squares_partial_kernel<<<parts, 256, 0, cur()>>>(T, n, pp);
  MOC_CUDA_LAUNCHED("sum_squares_partial_kernel");
  sum_squares_final_kernel<<<1, 256, 0, cur()>>>(pp, parts, acc.data<float>());
  MOC_CUDA_LAUNCHED("sum_squares_final_kernel");
}

void CudaOps::adamw_step(const std::vector<ParamSlot>& slots, const AdamWParams& p) {
  MOC_OP_COST(cost::adamw_step(slots));
  // Bias corrections in float, as CpuOps computes them.
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(p.step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(p.step));
  for (const auto& s : slots) {
    require(s.param && s.grad && s.m && s.v, "adamw_step", "a slot lacks param, grad, m or v");
    Tensor& target = s.master ? *s.master : *s.param;
    const std::int64_t n = target.numel();
    require(s.grad->numel() == n && s.m->numel() == n && s.v->numel() == n && s.param->numel() == n, "adamw_step",
            "param, grad, m, v (and master) must have the same number of elements");
    require(!s.master || s.master->dtype() == DType::f32, "adamw_step", "master weights must be f32");
    const FOut P = fout(target, "adamw_step", "param");
    const FIn G = fin(*s.grad, "adamw_step", "grad");
    const FOut M = fout(*s.m, "adamw_step", "m"), V = fout(*s.v, "adamw_step", "v");
    const FOut C = s.master ? fout(*s.param, "adamw_step", "param") : FOut{nullptr, false};
    if (n == 0) continue;
    const AdamConsts c{p.lr, p.beta1, p.beta2, p.eps, s.decay ? p.weight_decay : 0.0f, bc1, bc2, p.grad_scale};
    adamw_kernel<<<grid_1d(n, 256), 256, 0, cur()>>>(P, G, M, V, C, s.master != nullptr, n, c);
    MOC_CUDA_LAUNCHED("adamw_kernel");
  }
}

void CudaOps::sample(const Tensor& logits, float temperature, std::uint64_t seed, const Tensor& counter,
                     Tensor& next) {
  MOC_OP_COST(cost::sample(logits, next));
  const std::int64_t n = logits.rows(), V = logits.cols();
  require(next.numel() == n && next.dtype() == DType::i32, "sample", "next must be i32 [rows]");
  require(counter.numel() >= 1 && counter.dtype() == DType::i32, "sample", "counter must be an i32 tensor");
  require(V > 0 && V <= std::numeric_limits<std::int32_t>::max(), "sample", "bad vocabulary size");
  const FIn L = fin(logits, "sample", "logits");
  if (n == 0) return;
  require(n <= std::numeric_limits<int>::max(), "sample", "too many rows");
  if (temperature <= 0.0f) {
    if (logits.dtype() == DType::f32 && V % 4 == 0 && reinterpret_cast<std::uintptr_t>(logits.raw()) % 16 == 0) {
      launch_pdl("argmax_vec_kernel", argmax_vec_kernel, dim3(static_cast<unsigned>(n)), dim3(kArgmaxThreads), 0, cur(),
                 static_cast<const float4*>(logits.raw()), V, next.data<std::int32_t>());
      return;
    }
    launch_pdl("argmax_kernel", argmax_kernel, dim3(static_cast<unsigned>(n)), dim3(1024), 0, cur(), L, V,
               next.data<std::int32_t>());
    return;
  }
  sample_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, cur()>>>(L, V, temperature, seed,
                                                                    counter.data<std::int32_t>(),
                                                                    next.data<std::int32_t>());
  MOC_CUDA_LAUNCHED("sample_kernel");
}

}  // namespace moc::cuda
