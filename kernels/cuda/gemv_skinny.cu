// Skinny GEMM for decode: C[m, n] = alpha A[m, k] W[k, n] + beta C with m <= 8 rows of bf16 A and a
// row-major bf16 W [k, n] (the model's q/k/v/o projections at decode time). Such a call is bound by
// reading W once (8 MB for a 2048 x 2048 projection: 2.8 us at 3 TB/s).
//
// Layout of the work: a block owns TC columns of C (TC / 8 threads across a row of W, 8 columns = 16 bytes
// each) and a range of W's rows; its 256 threads cover 256 / (TC / 8) rows per step and keep U steps of
// 16-byte loads in flight per buffer, two buffers deep. When there are few column tiles the rows are
// split over a thread-block cluster of cs <= 8 blocks (split-K): each block pushes its partial sums into
// the shared memory of the rank that owns those columns (distributed shared memory), one cluster barrier,
// and the owner adds them in rank order, so results do not depend on timing. A is staged in shared memory
// as fp32 per step; accumulation is fp32.
//
// PDL: the kernel lets the next kernel launch at once, and, when W is a weights tensor (never written by
// a decode step), starts streaming W before waiting for the previous kernel, whose output A is.
//
// Status (H100, bench/tools/decode_step_notes.md): on the 2048 x 2048 projections every variant (tile 16 ..
// 256 columns, clusters of 1 .. 8) took 7.0 - 8.3 us per call inside a graph against cuBLASLt's 5.9 us,
// and on the 2048 x 32000 LM head 46.5 us against 45.9 us: the kernel does not beat cuBLASLt, so it is
// off by default and CudaOps::gemm keeps cuBLASLt. It stays selectable for profiling and further work:
// MOCBENCH_SKINNY=TC[:cs] (n < 16384) and MOCBENCH_SKINNY_BIG=TC[:cs] (wider W), read on every call;
// "off" or unset: cuBLASLt.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_ops_impl.cuh"

namespace moc::cuda {
namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCluster = 8;
constexpr std::int64_t kBigN = 16384;  // LM-head-sized W: its own switch (cuBLASLt streams it at ~96%)

// W is read once: no L1 allocation, 256-byte L2 prefetch. volatile: never speculated past its guard.
__device__ __forceinline__ uint4 ld_weights(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

struct SkinnyArgs {
  const bf16* a;  // [m, k]
  const bf16* w;  // [k, n]
  void* c;        // [m, n], bf16 or f32
  int m, n, k;
  int kb;         // rows of W per cluster rank
  float alpha, beta;
  int early;      // stream W before pdl_wait()
};

// Steps of loads per buffer: 2 x 8 x 16 B in flight per thread for one row, fewer where the accumulators
// need the registers (128 at two blocks per SM, no spills).
template <int M>
constexpr int unroll_of() {
  return M == 1 ? 8 : M == 2 ? 6 : M == 4 ? 4 : 2;
}

template <int TC, int M, class TO>
__global__ void __launch_bounds__(kThreads, 2) skinny_gemm_kernel(SkinnyArgs p) {
  constexpr int U = unroll_of<M>();
  constexpr int CG = TC / 8;            // threads across one row of the tile
  constexpr int RS = kThreads / CG;     // rows of W per step of the block
  constexpr int RPB = RS * U;           // rows per batch (one buffer)
  static_assert(CG >= 1 && CG <= 32 && kThreads % CG == 0, "tile width");
  __shared__ __align__(16) float as[2 * RPB * M];          // A's rows of two batches, [row][m]
  __shared__ __align__(16) float red[kWarps * M * TC];     // per-warp sums, [warp][m][col]
  __shared__ __align__(16) float recv[M * TC];             // partials pushed to this rank, [src][m][TC / cs]

  pdl_trigger();
  const bool clustered = gridDim.y > 1;  // the cluster spans gridDim.y (= cs) blocks
  if (clustered) cluster_arrive_relaxed();  // "started": waited for before the first remote store
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cgi = tid % CG, rs = tid / CG;
  const int col = blockIdx.x * TC + cgi * 8;
  const bool colok = col < p.n;  // n % 8 == 0: all 8 columns or none
  const int k0 = blockIdx.y * p.kb;
  const int nrows = max(0, min(p.k, k0 + p.kb) - k0);
  const int nbatch = (nrows + RPB - 1) / RPB;  // uniform over the block
  const bf16* wp = p.w + (static_cast<std::size_t>(k0) + rs) * p.n + col;
  const std::size_t wstep = static_cast<std::size_t>(RS) * p.n;

  auto load = [&](uint4(&buf)[U], int bt) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = bt * U + u;
      if (colok && rs + i * RS < nrows) buf[u] = ld_weights(wp + static_cast<std::size_t>(i) * wstep);
      else buf[u] = make_uint4(0u, 0u, 0u, 0u);
    }
  };

  float acc[M][8];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[m][c] = 0.0f;

  // A's rows of batches bt and bt + 1 (one per buffer), staged together: one L2 round trip per pair.
  auto stage = [&](int bt) {
    __syncthreads();  // the previous pair's A is consumed
    const int r0 = bt * RPB;
    for (int e = tid; e < 2 * RPB * M; e += kThreads) {
      const int mm = e / (2 * RPB), r = e % (2 * RPB);
      float v = 0.0f;
      if (mm < p.m && r0 + r < nrows) v = __bfloat162float(p.a[static_cast<std::size_t>(mm) * p.k + k0 + r0 + r]);
      as[r * M + mm] = v;
    }
    __syncthreads();
  };
  auto compute = [&](const uint4(&buf)[U], int half) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float* ap = as + (half * RPB + u * RS + rs) * M;
      float a[M];
      if constexpr (M % 4 == 0) {
#pragma unroll
        for (int m = 0; m < M; m += 4) {
          const float4 t = *reinterpret_cast<const float4*>(ap + m);
          a[m] = t.x;
          a[m + 1] = t.y;
          a[m + 2] = t.z;
          a[m + 3] = t.w;
        }
      } else if constexpr (M == 2) {
        const float2 t = *reinterpret_cast<const float2*>(ap);
        a[0] = t.x;
        a[1] = t.y;
      } else {
        a[0] = ap[0];
      }
      const uint4 q = buf[u];
      const float w[8] = {bf_lo(q.x), bf_hi(q.x), bf_lo(q.y), bf_hi(q.y),
                          bf_lo(q.z), bf_hi(q.z), bf_lo(q.w), bf_hi(q.w)};
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[m][c] = fmaf(a[m], w[c], acc[m][c]);
    }
  };

  uint4 b0[U], b1[U];
  if (p.early) {
    load(b0, 0);
    load(b1, 1);
    pdl_wait();
  } else {
    pdl_wait();
    load(b0, 0);
    load(b1, 1);
  }
  for (int bt = 0; bt < nbatch; bt += 2) {  // uniform over the block
    stage(bt);
    compute(b0, 0);
    load(b0, bt + 2);
    if (bt + 1 < nbatch) {
      compute(b1, 1);
      load(b1, bt + 3);
    }
  }

  // Reduce over the block's row slots: first the lanes of a warp that share a column group, then warps.
  if constexpr (CG < 32) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[m][c] = dev::lane_group_sum<CG, 32>(acc[m][c]);
  }
  if (lane < CG) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float4* dst = reinterpret_cast<float4*>(red + (warp * M + m) * TC + cgi * 8);
      dst[0] = make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
      dst[1] = make_float4(acc[m][4], acc[m][5], acc[m][6], acc[m][7]);
    }
  }
  __syncthreads();
  // Split-K over the cluster: rank r owns columns [r * per, (r + 1) * per) of the tile; every rank pushes
  // its sums for them into the owner's recv[rank], then one barrier, then the owner adds in rank order.
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int per = TC / cs;
  if (clustered) cluster_wait();  // every rank of the cluster is running: its shared memory may be written
  for (int o = tid; o < M * TC; o += kThreads) {
    const int mm = o / TC, c = o % TC;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += red[(w * M + mm) * TC + c];
    const int owner = c / per;
    float* dst = clustered ? cluster.map_shared_rank(recv, owner) : recv;
    dst[(rank * M + mm) * per + c % per] = s;
  }
  if (!clustered) __syncthreads();
  else cluster.sync();  // release / acquire: the pushed sums are visible; no remote access after this
  for (int o = tid; o < M * per; o += kThreads) {
    const int mm = o / per, cc = o % per;
    const int colg = blockIdx.x * TC + rank * per + cc;
    if (mm < p.m && colg < p.n) {
      float s = 0.0f;
      for (int q = 0; q < cs; ++q) s += recv[(q * M + mm) * per + cc];
      TO* c = static_cast<TO*>(p.c) + static_cast<std::size_t>(mm) * p.n + colg;
      float v = p.alpha * s;
      if (p.beta != 0.0f) v += p.beta * to_f32(*c);
      *c = from_f32<TO>(v);
    }
  }
}

template <int TC, int M, class TO>
void launch(cudaStream_t st, const SkinnyArgs& a, int tiles, int cs) {
  launch_pdl_cluster("skinny_gemm_kernel", skinny_gemm_kernel<TC, M, TO>,
                     dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(cs)), dim3(kThreads), 0, st,
                     dim3(1, static_cast<unsigned>(cs), 1), a);
}

template <int TC, class TO>
void launch_rows(cudaStream_t st, const SkinnyArgs& a, int tiles, int cs) {
  if (a.m == 1) launch<TC, 1, TO>(st, a, tiles, cs);
  else if (a.m == 2) launch<TC, 2, TO>(st, a, tiles, cs);
  else if (a.m <= 4) launch<TC, 4, TO>(st, a, tiles, cs);
  else if constexpr (TC <= 128) launch<TC, 8, TO>(st, a, tiles, cs);  // 256 x 8 rows: too much shared memory
}

template <class TO>
void launch_tile(cudaStream_t st, const SkinnyArgs& a, int tc, int tiles, int cs) {
  switch (tc) {
    case 16: launch_rows<16, TO>(st, a, tiles, cs); break;
    case 32: launch_rows<32, TO>(st, a, tiles, cs); break;
    case 64: launch_rows<64, TO>(st, a, tiles, cs); break;
    case 128: launch_rows<128, TO>(st, a, tiles, cs); break;
    default: launch_rows<256, TO>(st, a, tiles, cs); break;
  }
}

struct SkinnyConfig {
  int tc = 0;  // 0: cuBLASLt
  int cs = 0;  // 0: chosen from the shape
};

// "TC[:cs]" (TC in 16, 32, 64, 128, 256; cs in 1, 2, 4, 8) or "off".
SkinnyConfig parse_config(const char* s, SkinnyConfig dflt) {
  if (!s || !*s) return dflt;
  if (std::strcmp(s, "off") == 0) return {0, 0};
  char* end = nullptr;
  const long tc = std::strtol(s, &end, 10);
  long cs = 0;
  if (end && *end == ':') cs = std::strtol(end + 1, nullptr, 10);
  const bool tc_ok = tc == 16 || tc == 32 || tc == 64 || tc == 128 || tc == 256;
  const bool cs_ok = cs == 0 || cs == 1 || cs == 2 || cs == 4 || cs == 8;
  return tc_ok && cs_ok ? SkinnyConfig{static_cast<int>(tc), static_cast<int>(cs)} : dflt;
}

// Off (cuBLASLt) unless selected: see the status note at the top. Read per call so a benchmark can switch.
SkinnyConfig skinny_config(std::int64_t n) {
  return parse_config(std::getenv(n >= kBigN ? "MOCBENCH_SKINNY_BIG" : "MOCBENCH_SKINNY"), {0, 0});
}

}  // namespace

bool skinny_gemm_fits(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c) {
  if (ta || tb) return false;
  if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16) return false;
  if (c.dtype() != DType::bf16 && c.dtype() != DType::f32) return false;
  const std::int64_t m = a.rows(), k = a.cols(), n = b.cols();
  if (m < 1 || m > kSkinnyMaxRows || k < 1 || n < 8 || n % 8 != 0) return false;
  if (k > INT_MAX / 2 || n > INT_MAX / 2) return false;
  if (skinny_config(n).tc == 0) return false;
  return reinterpret_cast<std::uintptr_t>(b.raw()) % 16 == 0;  // every row of W then is (n % 8 == 0)
}

void skinny_gemm(cudaStream_t stream, int sm_count, const Tensor& a, const Tensor& b, Tensor& c, float alpha,
                 float beta) {
  const int m = static_cast<int>(a.rows()), k = static_cast<int>(a.cols()), n = static_cast<int>(b.cols());
  SkinnyConfig cfg = skinny_config(n);
  if (cfg.tc == 256 && m > 4) cfg.tc = 128;
  const int tiles = ceil_div(n, cfg.tc);
  // Split K over a cluster until the blocks cover the GPU, keeping >= 64 rows of W per block.
  int cs = cfg.cs;
  if (cs == 0) {
    cs = 1;
    while (cs < kMaxCluster && static_cast<long long>(tiles) * cs < sm_count && k >= cs * 2 * 64) cs *= 2;
  }
  SkinnyArgs args{a.data<bf16>(), b.data<bf16>(), c.raw(), m, n, k, ceil_div(k, cs), alpha, beta,
                  b.tag().category == MemCategory::weights ? 1 : 0};
  if (c.dtype() == DType::f32) launch_tile<float>(stream, args, cfg.tc, tiles, cs);
  else launch_tile<bf16>(stream, args, cfg.tc, tiles, cs);
}

}  // namespace moc::cuda
