// Micro-benchmark of the row top-K kernels (kernels/cuda/moc_select.cu, included whole to reach its internal
// launchers): the presets' training shapes in bf16 (gate rule), each timed with CUDA events (median of reps)
// in three variants (the production launch: registers capped for 6 blocks of 256 threads; no register cap;
// a cap for 5 blocks), every variant's output checked against the first's and the first against a host
// reference on a sample of rows. Exit code 1 when a check fails.
//
// Build (the build dir must hold libmocbench_cuda.so and libmocbench_kernels.a):
//   bench/micro/build_topk_micro.sh build/htopk
//   topk_micro [--reps N] [--only PRESET]   (PRESET: 1b, 60m, 130m or 350m)
#include "kernels/cuda/moc_select.cu"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {


void ck(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s at line %d: %s\n", cudaGetErrorString(e), line, what);
    std::exit(2);
  }
}
#define CK(call) ck((call), #call, __LINE__)

// Standard normal values from a counter hash (Box-Muller), rounded to bf16: the benchmark's random gate values.
__global__ void fill_normal_bf16(__nv_bfloat16* g, long long n, unsigned seed) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned a = static_cast<unsigned>(i) * 2654435761u ^ seed, b = static_cast<unsigned>(i >> 32) + 0x9e3779b9u * seed;
    for (int r = 0; r < 4; ++r) {
      a ^= b * 0x85ebca6bu;
      a = (a << 13) | (a >> 19);
      b ^= a * 0xc2b2ae35u;
      b = (b << 17) | (b >> 15);
    }
    const float u1 = (static_cast<float>(a >> 8) + 1.0f) * (1.0f / 16777217.0f);
    const float u2 = static_cast<float>(b >> 8) * (1.0f / 16777216.0f);
    g[i] = __float2bfloat16_rn(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The CPU rule (gate): K largest, ties to the lower channel, ascending.
std::vector<std::uint16_t> host_topk(const std::uint16_t* row, int F, int K) {
  std::vector<int> order(static_cast<std::size_t>(F));
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int c) {
    const float x = bf16_to_float(row[c]);
    return x != x ? -INFINITY : x;
  };
  std::nth_element(order.begin(), order.begin() + (K - 1), order.end(), [&](int a, int b) {
    return key(a) > key(b) || (key(a) == key(b) && a < b);
  });
  std::sort(order.begin(), order.begin() + K);
  return std::vector<std::uint16_t>(order.begin(), order.begin() + K);
}

struct Shape {
  const char* name;
  long long rows;
  int F, K;
};

int g_failures = 0;

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  const char* only = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  const Shape shapes[] = {{"1b", 16384, 5461, 1024},
                          {"60m", 65536, 1376, 256},
                          {"130m", 65536, 2048, 384},
                          {"350m", 32768, 2736, 512}};
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (const Shape& s : shapes) {
    if (only && std::strcmp(s.name, only)) continue;
    const long long n = s.rows * s.F;
    __nv_bfloat16* g = nullptr;
    std::uint16_t *idx = nullptr, *ref = nullptr;
    CK(cudaMalloc(&g, static_cast<std::size_t>(n) * 2));
    CK(cudaMalloc(&idx, static_cast<std::size_t>(s.rows) * s.K * 2));
    CK(cudaMalloc(&ref, static_cast<std::size_t>(s.rows) * s.K * 2));
    fill_normal_bf16<<<1024, 256, 0, st>>>(g, n, 12345u);
    CK(cudaGetLastError());
    const double bytes = static_cast<double>(n) * 2 + static_cast<double>(s.rows) * s.K * 2;
    std::printf("%s: %lld x %d bf16, K %d: floor %.1f us at 2.99 TB/s\n", s.name, s.rows, s.F, s.K, bytes / 2.99e6);
    // Variants: the production launch (row_topk), and the same kernel without a register cap or with a cap
    // for 5 blocks of 256 threads.
    for (int variant = 0; variant < 3; ++variant) {
      auto run = [&](std::uint16_t* out) {
        if (variant == 1) {
          moc::cuda::launch_row_topk_bf16_gate<3, 1>(st, g, out, s.rows, s.F, s.F, s.K);
        } else if (variant == 2) {
          moc::cuda::launch_row_topk_bf16_gate<3, 5>(st, g, out, s.rows, s.F, s.F, s.K);
        } else if (!moc::cuda::row_topk<__nv_bfloat16>(st, g, out, s.rows, s.F, s.F, s.K, 0)) {
          std::exit(3);
        }
      };
      CK(cudaMemsetAsync(idx, 0xff, static_cast<std::size_t>(s.rows) * s.K * 2, st));
      run(variant == 0 ? ref : idx);
      CK(cudaStreamSynchronize(st));
      if (variant != 0) {  // same output as the default
        std::vector<std::uint16_t> a(static_cast<std::size_t>(s.rows) * s.K), b(a.size());
        CK(cudaMemcpy(a.data(), idx, a.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b.data(), ref, b.size() * 2, cudaMemcpyDeviceToHost));
        if (a != b) {
          std::printf("FAIL %s variant %d: output differs from the default's\n", s.name, variant);
          ++g_failures;
        }
      } else {  // host reference on a sample of rows
        std::vector<std::uint16_t> out(static_cast<std::size_t>(s.rows) * s.K), row(static_cast<std::size_t>(s.F));
        CK(cudaMemcpy(out.data(), ref, out.size() * 2, cudaMemcpyDeviceToHost));
        for (long long r : {0LL, 1LL, 7LL, s.rows / 2, s.rows - 1}) {
          CK(cudaMemcpy(row.data(), g + r * s.F, static_cast<std::size_t>(s.F) * 2, cudaMemcpyDeviceToHost));
          const auto want = host_topk(row.data(), s.F, s.K);
          if (!std::equal(want.begin(), want.end(), out.begin() + r * s.K)) {
            std::printf("FAIL %s row %lld: differs from the host reference\n", s.name, r);
            ++g_failures;
          }
        }
      }
      std::vector<float> t;
      for (int i = 0; i < 3; ++i) run(idx);
      for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(e0, st));
        run(idx);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.0f);
      }
      std::sort(t.begin(), t.end());
      const float med = t[t.size() / 2];
      const char* names[] = {"production", "no register cap", "regs for 5 blocks"};
      std::printf("  %-18s median %.1f us (min %.1f, max %.1f), %.0f GB/s\n", names[variant], med, t.front(), t.back(),
                  bytes / med / 1e3);
    }
    CK(cudaFree(g));
    CK(cudaFree(idx));
    CK(cudaFree(ref));
  }
  std::printf(g_failures ? "FAILED: %d checks\n" : "all checks passed\n", g_failures);
  return g_failures ? 1 : 0;
}
