// Micro-benchmark of the decode FFN kernels (kernels/cuda/ffn_decode.cu) through their raw launch API, with
// cudaMalloc'd buffers (no CudaOps). First it checks the kernels against a double-precision host reference
// (small odd shapes, the paper's 1b layer, the generic path, f32), then it times the 1b FFN layer
// (d 2048, d_ffn 5461, K 1024, 2:8) at batch 1..4: dense, MoC, MoC 2:8 and the MoC breakdown, cold (weights
// rotated over copies that together exceed L2), CUDA events around each call (median) and inside a CUDA
// graph of 20 calls. Exit code 1 when a check fails.
//
//   ffn_decode_micro [--reps N] [--copies N] [--skip-checks] [--skip-bench] [--profile] [--only PREFIX]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ffn_decode.cuh"
#include "kernels/dtype.h"

namespace {

using moc::DType;
using moc::SelectRule;
using moc::cuda::ffn::Options;
using moc::cuda::ffn::Problem;
using moc::cuda::ffn::SelKind;

void ck(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s (%s) at line %d: %s\n", cudaGetErrorName(e), cudaGetErrorString(e), line, what);
    std::exit(2);
  }
}
#define CK(call) ck((call), #call, __LINE__)

int g_failures = 0;
void report(bool ok, const std::string& what, const std::string& detail) {
  std::printf("%s  %s  %s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.c_str());
  if (!ok) ++g_failures;
}

// ---- device buffers
struct DevBuf {
  void* p = nullptr;
  std::size_t n = 0;
  explicit DevBuf(std::size_t bytes = 0) : n(bytes) {
    if (bytes) CK(cudaMalloc(&p, bytes));
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(n, o.n);
    return *this;
  }
  template <class T> T* as() const { return static_cast<T*>(p); }
};

// Normal-ish values from a counter hash (sum of 4 uniforms), scaled.
__global__ void init_bf16(__nv_bfloat16* p, std::size_t n, unsigned long long seed, float scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned long long h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    float s = 0.f;
    for (int k = 0; k < 4; ++k) {
      h ^= h >> 31;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 29;
      s += static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
    }
    p[i] = __float2bfloat16_rn((s - 2.0f) * 1.7320508f * scale);
  }
}

std::vector<float> download_bf16(const void* d, std::size_t n) {
  std::vector<std::uint16_t> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = moc::bf16_to_f32(h[i]);
  return f;
}
std::vector<float> download_any(const void* d, std::size_t n, DType dt) {
  if (dt == DType::bf16) return download_bf16(d, n);
  std::vector<float> f(n);
  CK(cudaMemcpy(f.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return f;
}
void upload_any(void* d, const std::vector<float>& v, DType dt) {
  if (dt == DType::f32) {
    CK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return;
  }
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = moc::f32_to_bf16(v[i]);
  CK(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
}
std::vector<float> rounded(std::vector<float> v, DType dt) {
  if (dt == DType::bf16)
    for (auto& x : v) x = moc::bf16_to_f32(moc::f32_to_bf16(x));
  return v;
}

// ---- host reference (the CPU twin's semantics, dot products in double)
float h_silu(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }
float h_value(float g, SelectRule rule) {
  float v = g;
  if (rule == SelectRule::silu) v = h_silu(g);
  if (rule == SelectRule::abs_silu) v = std::fabs(h_silu(g));
  return std::isnan(v) ? -INFINITY : v;
}

struct HostLayer {
  int R = 0, d = 0, F = 0;
  std::vector<float> x, wg, wu, wd;  // values as stored (bf16-rounded when bf16)
};

float h_dot(const std::vector<float>& a, std::size_t ao, const std::vector<float>& b, std::size_t bo, int d) {
  double s = 0;
  for (int c = 0; c < d; ++c) s += static_cast<double>(a[ao + c]) * b[bo + c];
  return static_cast<float>(s);
}

std::vector<float> h_gate(const HostLayer& L) {
  std::vector<float> g(static_cast<std::size_t>(L.R) * L.F);
  for (int r = 0; r < L.R; ++r)
    for (int j = 0; j < L.F; ++j)
      g[static_cast<std::size_t>(r) * L.F + j] = h_dot(L.x, static_cast<std::size_t>(r) * L.d, L.wg, static_cast<std::size_t>(j) * L.d, L.d);
  return g;
}

// Kept channels per row (ascending) and, per channel, the value of the threshold it was compared with.
struct HostSel {
  std::vector<std::vector<int>> idx;
  std::vector<std::vector<float>> thr;  // [row][channel]
};
HostSel h_select(const std::vector<float>& g, const Problem& p) {
  HostSel hs;
  const int F = p.d_ffn;
  for (int r = 0; r < p.rows; ++r) {
    std::vector<float> v(F);
    for (int j = 0; j < F; ++j) v[j] = h_value(g[static_cast<std::size_t>(r) * F + j], p.rule);
    auto better = [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
    std::vector<int> kept;
    std::vector<float> thr(F);
    auto take = [&](int j0, int len, int n) {
      std::vector<int> o(len);
      for (int i = 0; i < len; ++i) o[i] = j0 + i;
      std::sort(o.begin(), o.end(), better);
      for (int i = 0; i < n; ++i) kept.push_back(o[i]);
      for (int i = 0; i < len; ++i) thr[j0 + i] = v[o[n - 1]];
    };
    if (p.kind == SelKind::topk) {
      take(0, F, p.k);
    } else {
      for (int j0 = 0; j0 < F; j0 += p.group_b) {
        const int len = std::min(p.group_b, F - j0);
        take(j0, len, std::min(p.group_a, len));
      }
    }
    std::sort(kept.begin(), kept.end());
    hs.idx.push_back(kept);
    hs.thr.push_back(thr);
  }
  return hs;
}

// out delta of rows with the given kept channels (null: dense).
std::vector<double> h_updown(const HostLayer& L, const std::vector<float>& g, const std::vector<std::vector<int>>* idx) {
  std::vector<double> out(static_cast<std::size_t>(L.R) * L.d, 0.0);
  for (int r = 0; r < L.R; ++r) {
    std::vector<int> chans;
    if (idx) chans = (*idx)[r];
    else
      for (int j = 0; j < L.F; ++j) chans.push_back(j);
    for (int j : chans) {
      const float u = h_dot(L.x, static_cast<std::size_t>(r) * L.d, L.wu, static_cast<std::size_t>(j) * L.d, L.d);
      const float z = h_silu(g[static_cast<std::size_t>(r) * L.F + j]) * u;
      for (int c = 0; c < L.d; ++c) out[static_cast<std::size_t>(r) * L.d + c] += static_cast<double>(z) * L.wd[static_cast<std::size_t>(j) * L.d + c];
    }
  }
  return out;
}

// ---- one device problem with host copies
struct DevLayer {
  HostLayer h;
  DType dt = DType::bf16;
  DevBuf x, wg, wu, wd, out;
  std::vector<float> out0;
};

void make_layer(DevLayer& L, int R, int d, int F, DType dt, std::mt19937& rng) {
  L.dt = dt;
  L.h.R = R;
  L.h.d = d;
  L.h.F = F;
  std::normal_distribution<float> nd(0.f, 1.f);
  auto randv = [&](std::size_t n, float s) {
    std::vector<float> v(n);
    for (auto& e : v) e = nd(rng) * s;
    return v;
  };
  const float ws = 1.0f / std::sqrt(static_cast<float>(d));
  L.h.x = rounded(randv(static_cast<std::size_t>(R) * d, 1.f), dt);
  L.h.wg = rounded(randv(static_cast<std::size_t>(F) * d, ws), dt);
  L.h.wu = rounded(randv(static_cast<std::size_t>(F) * d, ws), dt);
  L.h.wd = rounded(randv(static_cast<std::size_t>(F) * d, ws), dt);
  L.out0 = rounded(randv(static_cast<std::size_t>(R) * d, 0.5f), dt);
  const std::size_t es = moc::dtype_bytes(dt);
  L.x = DevBuf(L.h.x.size() * es);
  L.wg = DevBuf(L.h.wg.size() * es);
  L.wu = DevBuf(L.h.wu.size() * es);
  L.wd = DevBuf(L.h.wd.size() * es);
  L.out = DevBuf(L.out0.size() * es);
  upload_any(L.x.p, L.h.x, dt);
  upload_any(L.wg.p, L.h.wg, dt);
  upload_any(L.wu.p, L.h.wu, dt);
  upload_any(L.wd.p, L.h.wd, dt);
}

Problem problem_of(const DevLayer& L) {
  Problem p;
  p.rows = L.h.R;
  p.d = L.h.d;
  p.d_ffn = L.h.F;
  p.dtype = L.dt;
  p.x = L.x.p;
  p.w_gate_t = L.wg.p;
  p.w_up_t = L.wu.p;
  p.w_down = L.wd.p;
  p.out = L.out.p;
  return p;
}

const char* rule_name(SelectRule r) { return r == SelectRule::gate ? "gate" : r == SelectRule::silu ? "silu" : "abs_silu"; }
std::string sel_name(const Problem& p) {
  if (p.kind == SelKind::dense) return "dense";
  if (p.kind == SelKind::topk) return "top" + std::to_string(p.k) + "/" + rule_name(p.rule);
  return std::to_string(p.group_a) + ":" + std::to_string(p.group_b) + "/" + rule_name(p.rule);
}

// Runs p (parts, force as set) on L from out0 and returns the downloaded out and idx_out.
void run_once(const DevLayer& L, Problem p, const Options& opt, std::vector<float>& out, std::vector<std::uint16_t>* idx) {
  upload_any(L.out.p, L.out0, L.dt);
  const int kept = p.kept();
  DevBuf didx(idx ? static_cast<std::size_t>(p.rows) * kept * 2 : 0);
  if (idx) {
    CK(cudaMemset(didx.p, 0xff, didx.n));  // poison
    p.idx_out = didx.as<std::uint16_t>();
  }
  DevBuf ws(moc::cuda::ffn::workspace_bytes(p));
  CK(cudaMemset(ws.p, 0x7f, ws.n));  // poison the workspace too
  moc::cuda::ffn::launch(p, ws.p, ws.n, nullptr, opt);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  out = download_any(L.out.p, L.out0.size(), L.dt);
  if (idx) {
    idx->resize(static_cast<std::size_t>(p.rows) * kept);
    CK(cudaMemcpy(idx->data(), didx.p, didx.n, cudaMemcpyDeviceToHost));
  }
}

double rel_err(const std::vector<float>& out, const std::vector<float>& out0, const std::vector<double>& delta,
               DType dt, double* tol) {
  double e2 = 0, r2 = 0, o2 = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double got = static_cast<double>(out[i]) - out0[i];
    e2 += (got - delta[i]) * (got - delta[i]);
    r2 += delta[i] * delta[i];
    o2 += static_cast<double>(out[i]) * out[i];
  }
  const double rn = std::sqrt(r2) + 1e-30;
  *tol = dt == DType::bf16 ? 1e-2 + std::sqrt(o2) * (1.0 / 256) / rn : 1e-4 + std::sqrt(o2) * 1e-6 / rn;
  return std::sqrt(e2) / rn;
}

// Full check of one configuration: selection (near-ties allowed), output with the GPU's selection, and the
// parts (gate only leaves out alone, up/down with force_idx = the full call).
void check_config(const DevLayer& L, Problem p, const Options& opt, const std::string& tag) {
  const std::string name = tag + " " + sel_name(p) + " rows " + std::to_string(p.rows) + " d " + std::to_string(p.d) +
                           " F " + std::to_string(p.d_ffn) + (moc::cuda::ffn::fast_path(p, opt) ? " fast" : " generic");
  std::printf("RUN   %s\n", name.c_str());
  const std::vector<float> g = h_gate(L.h);
  std::vector<float> out;
  std::vector<std::uint16_t> idx;
  const bool moc = p.kind != SelKind::dense;
  run_once(L, p, opt, out, moc ? &idx : nullptr);
  std::vector<std::vector<int>> gidx;
  if (moc) {
    const HostSel hs = h_select(g, p);
    const int kept = p.kept();
    int diff = 0, bad = 0, unsorted = 0;
    double worst = 0;
    for (int r = 0; r < p.rows; ++r) {
      std::vector<int> gi(idx.begin() + static_cast<std::ptrdiff_t>(r) * kept, idx.begin() + static_cast<std::ptrdiff_t>(r + 1) * kept);
      for (int i = 1; i < kept; ++i)
        if (gi[i] <= gi[i - 1]) ++unsorted;
      std::vector<int> a = gi, b = hs.idx[r], sd;
      std::sort(a.begin(), a.end());
      std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(sd));
      for (int j : sd) {
        ++diff;
        if (j < 0 || j >= p.d_ffn) {
          ++bad;
          continue;
        }
        const float v = h_value(g[static_cast<std::size_t>(r) * p.d_ffn + j], p.rule), t = hs.thr[r][j];
        const double dist = std::fabs(static_cast<double>(v) - t) / std::max(1.0, std::fabs(static_cast<double>(t)));
        worst = std::max(worst, dist);
        if (!(dist <= 1e-5)) ++bad;
      }
      gidx.push_back(gi);
    }
    report(bad == 0 && unsorted == 0 && diff <= 2 * p.rows, name + " selection",
           "differing " + std::to_string(diff) + " (near-tie distance " + std::to_string(worst) + "), unsorted " +
               std::to_string(unsorted));
  }
  double tol = 0;
  const std::vector<double> delta = h_updown(L.h, g, moc ? &gidx : nullptr);
  const double err = rel_err(out, L.out0, delta, L.dt, &tol);
  report(err <= tol, name + " output", "rel err " + std::to_string(err) + " tol " + std::to_string(tol));
  if (!moc) return;
  // parts
  Problem pg = p;
  pg.parts = moc::kFfnGate;
  std::vector<float> out_g;
  run_once(L, pg, opt, out_g, nullptr);
  report(out_g == rounded(L.out0, L.dt), name + " gate-only leaves out", "");
  Problem pu = p;
  pu.parts = moc::kFfnUpDown;
  DevBuf force(idx.size() * 2);
  CK(cudaMemcpy(force.p, idx.data(), force.n, cudaMemcpyHostToDevice));
  pu.force_idx = force.as<std::uint16_t>();
  std::vector<float> out_u;
  std::vector<std::uint16_t> idx_u;
  run_once(L, pu, opt, out_u, &idx_u);
  const double err_u = rel_err(out_u, L.out0, delta, L.dt, &tol);
  report(err_u <= tol && idx_u == idx, name + " up/down with force_idx",
         "rel err " + std::to_string(err_u) + ", idx_out copied " + (idx_u == idx ? "yes" : "no"));
}

int run_checks() {
  std::mt19937 rng(12345);
  std::printf("== correctness against the host reference\n");
  const Options fast{};
  Options generic{};
  generic.allow_fast = false;
  for (int R : {1, 2, 3, 4, 5, 9}) {
    DevLayer L;
    make_layer(L, R, 136, 301, DType::bf16, rng);
    Problem p = problem_of(L);
    check_config(L, p, fast, "small");
    for (int k : {1, 17, 301}) {
      p.kind = SelKind::topk;
      p.k = k;
      p.rule = SelectRule::gate;
      check_config(L, p, fast, "small");
    }
    p.k = 17;
    for (SelectRule rule : {SelectRule::silu, SelectRule::abs_silu}) {
      p.rule = rule;
      check_config(L, p, fast, "small");
    }
    p.kind = SelKind::grouped;
    p.rule = SelectRule::gate;
    p.group_a = 2;
    p.group_b = 8;
    check_config(L, p, fast, "small");
    p.group_a = 3;
    p.group_b = 7;  // 7 does not divide 16: selection in the selection kernel
    check_config(L, p, fast, "small");
    for (int C : {1, 2, 8}) {
      Options o{};
      o.updown_cluster = C;
      Problem q = p;
      q.kind = SelKind::topk;
      q.k = 17;
      check_config(L, q, o, "small cluster " + std::to_string(C));
    }
    if (R == 3 || R == 9) {
      p.kind = SelKind::topk;
      p.k = 17;
      check_config(L, p, generic, "small");
      p.kind = SelKind::grouped;
      p.group_a = 2;
      p.group_b = 8;
      check_config(L, p, generic, "small");
      p.kind = SelKind::dense;
      check_config(L, p, generic, "small");
    }
  }
  {
    DevLayer L;
    make_layer(L, 3, 64, 37, DType::f32, rng);
    Problem p = problem_of(L);
    check_config(L, p, fast, "f32");
    p.kind = SelKind::topk;
    p.k = 17;
    check_config(L, p, fast, "f32");
  }
  {
    // Gate values of row 0 concentrated near one value: the threshold bin overflows the pairwise ranking.
    DevLayer L;
    make_layer(L, 2, 64, 5461, DType::bf16, rng);
    std::normal_distribution<float> nd(0.f, 0.01f);
    for (int j = 0; j < L.h.F; ++j)
      for (int c = 0; c < L.h.d; ++c)
        L.h.wg[static_cast<std::size_t>(j) * L.h.d + c] = (L.h.x[c] >= 0 ? 0.2f : -0.2f) + nd(rng);
    L.h.wg = rounded(L.h.wg, DType::bf16);
    upload_any(L.wg.p, L.h.wg, DType::bf16);
    Problem p = problem_of(L);
    p.kind = SelKind::topk;
    for (int k : {17, 1024}) {
      p.k = k;
      check_config(L, p, fast, "concentrated");
      Options wide{};
      wide.select_threads = 1024;
      check_config(L, p, wide, "concentrated select 1024");
    }
  }
  {
    DevLayer L;
    make_layer(L, 2, 64, 37, DType::bf16, rng);
    Problem p = problem_of(L);
    p.kind = SelKind::topk;
    for (int k : {1, 17, 37}) {
      p.k = k;
      check_config(L, p, fast, "tiny");
    }
  }
  for (int R : {1, 2, 3, 4}) {
    DevLayer L;
    make_layer(L, R, 2048, 5461, DType::bf16, rng);
    Problem p = problem_of(L);
    check_config(L, p, fast, "1b");
    p.kind = SelKind::topk;
    p.k = 1024;
    check_config(L, p, fast, "1b");
    p.kind = SelKind::grouped;
    p.group_a = 2;
    p.group_b = 8;
    check_config(L, p, fast, "1b");
    {
      Options wide{};
      wide.select_threads = 1024;
      check_config(L, p, wide, "1b select 1024");
    }
    {
      Options gen{};
      gen.specialized = false;
      for (SelKind k : {SelKind::dense, SelKind::topk, SelKind::grouped}) {
        Problem q = p;
        q.kind = k;
        check_config(L, q, gen, "1b generic");
      }
    }
    {
      Options o{};
      o.dense_ring = false;
      Problem q = p;
      q.kind = SelKind::dense;
      check_config(L, q, o, "1b up/down kernel");
    }
    Options alt{};  // the benchmark's other variants
    alt.pdl = false;
    alt.gate_unroll = 8;
    p.kind = SelKind::topk;
    check_config(L, p, alt, "1b no-PDL unroll8");
    for (int C : {1, 4, 8}) {
      Options o{};
      o.updown_cluster = C;
      o.pdl_entry = C != 4;
      o.prefetch = C == 8 ? 7 : 0;
      check_config(L, p, o, "1b cluster " + std::to_string(C));
      Problem q = p;
      q.kind = SelKind::dense;
      check_config(L, q, o, "1b cluster " + std::to_string(C));
    }
  }
  std::printf("== checks: %d failed\n", g_failures);
  return g_failures;
}

// ---- timing

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double copy_bandwidth() {
  const std::size_t n = std::size_t(1) << 30;
  DevBuf a(n), b(n);
  CK(cudaMemset(a.p, 1, n));
  CK(cudaMemset(b.p, 0, n));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int i = 0; i < 23; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) t.push_back(ms * 1e-3);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return 2.0 * static_cast<double>(n) / median(t);  // bytes read + written per second
}

struct Bench {
  int d = 2048, F = 5461, K = 1024;
  int copies = 8, reps = 400;
  std::vector<DevBuf> wg, wu, wd;
  DevBuf x, out;
  cudaStream_t st = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
};

struct Variant {
  std::string name;
  SelKind kind = SelKind::dense;
  unsigned parts = moc::kFfnAll;
  bool force = false;        // force_idx from a previous full call of the same copy
  bool updown_stage = false; // launch_updown_only on that call's workspace
  Options opt{};
};

struct Result {
  double eager_us = 0, graph_us = 0;
};

Problem bench_problem(const Bench& b, int R, const Variant& v, int copy) {
  Problem p;
  p.rows = R;
  p.d = b.d;
  p.d_ffn = b.F;
  p.dtype = DType::bf16;
  p.x = b.x.p;
  p.w_gate_t = b.wg[copy].p;
  p.w_up_t = b.wu[copy].p;
  p.w_down = b.wd[copy].p;
  p.out = b.out.p;
  p.kind = v.kind;
  p.k = b.K;
  p.group_a = 2;
  p.group_b = 8;
  p.parts = v.parts;
  return p;
}

Result time_variant(Bench& b, int R, const Variant& v, std::vector<DevBuf>& ws, std::vector<DevBuf>& idx) {
  auto issue = [&](int i) {
    const int c = i % b.copies;
    Problem p = bench_problem(b, R, v, c);
    if (v.force) p.force_idx = idx[c].as<std::uint16_t>();
    if (v.updown_stage) moc::cuda::ffn::launch_updown_only(p, ws[c].p, b.st, v.opt);
    else moc::cuda::ffn::launch(p, ws[c].p, ws[c].n, b.st, v.opt);
  };
  for (int i = 0; i < 2 * b.copies; ++i) issue(i);  // warm-up
  CK(cudaStreamSynchronize(b.st));
  std::vector<cudaEvent_t> ev(2 * static_cast<std::size_t>(b.reps));
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < b.reps; ++i) {
    CK(cudaEventRecord(ev[2 * i], b.st));
    issue(i);
    CK(cudaEventRecord(ev[2 * i + 1], b.st));
  }
  CK(cudaStreamSynchronize(b.st));
  std::vector<double> t;
  for (int i = 0; i < b.reps; ++i) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t.push_back(ms * 1e3);
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  Result r;
  r.eager_us = median(t);
  // Graph of 20 calls over rotating copies.
  constexpr int kCalls = 20;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(b.st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCalls; ++i) issue(i);
  CK(cudaStreamEndCapture(b.st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, b.st));
  std::vector<double> tg;
  const int replays = std::max(10, b.reps / kCalls);
  for (int i = 0; i < replays; ++i) {
    CK(cudaEventRecord(b.e0, b.st));
    CK(cudaGraphLaunch(exec, b.st));
    CK(cudaEventRecord(b.e1, b.st));
    CK(cudaEventSynchronize(b.e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, b.e0, b.e1));
    tg.push_back(ms * 1e3 / kCalls);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  r.graph_us = median(tg);
  return r;
}

int run_bench(int reps, int copies, const std::string& only) {
  Bench b;
  b.reps = reps;
  b.copies = copies;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("== device: %s, %d SMs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
  const double bw = copy_bandwidth();
  std::printf("== copy bandwidth (cudaMemcpy D2D of 1 GB, read + write): %.0f GB/s\n", bw / 1e9);
  const std::size_t wbytes = static_cast<std::size_t>(b.F) * b.d * 2;
  std::printf("== layer d %d, d_ffn %d, K %d, 2:8; %d weight copies (%.0f MB > L2), %d calls per point\n", b.d, b.F,
              b.K, b.copies, 3.0 * wbytes * b.copies / 1e6, b.reps);
  for (int c = 0; c < b.copies; ++c) {
    b.wg.emplace_back(wbytes);
    b.wu.emplace_back(wbytes);
    b.wd.emplace_back(wbytes);
    const float s = 1.0f / std::sqrt(static_cast<float>(b.d));
    init_bf16<<<1024, 256>>>(b.wg.back().as<__nv_bfloat16>(), wbytes / 2, 11 + 3 * c, s);
    init_bf16<<<1024, 256>>>(b.wu.back().as<__nv_bfloat16>(), wbytes / 2, 12 + 3 * c, s);
    init_bf16<<<1024, 256>>>(b.wd.back().as<__nv_bfloat16>(), wbytes / 2, 13 + 3 * c, s);
    CK(cudaGetLastError());
  }
  b.x = DevBuf(8 * static_cast<std::size_t>(b.d) * 2);
  b.out = DevBuf(8 * static_cast<std::size_t>(b.d) * 2);
  init_bf16<<<64, 256>>>(b.x.as<__nv_bfloat16>(), 8 * static_cast<std::size_t>(b.d), 7, 1.0f);
  CK(cudaMemset(b.out.p, 0, b.out.n));
  CK(cudaStreamCreateWithFlags(&b.st, cudaStreamNonBlocking));
  CK(cudaEventCreate(&b.e0));
  CK(cudaEventCreate(&b.e1));
  CK(cudaDeviceSynchronize());

  std::vector<Variant> vars;
  auto add = [&](std::string name, SelKind k, unsigned parts) {
    Variant v;
    v.name = std::move(name);
    v.kind = k;
    v.parts = parts;
    vars.push_back(v);
    return &vars.back();
  };
  add("dense", SelKind::dense, moc::kFfnAll);
  add("moc", SelKind::topk, moc::kFfnAll);
  add("moc 2:8", SelKind::grouped, moc::kFfnAll);
  add("gate only", SelKind::topk, moc::kFfnGate);
  add("gate+topK", SelKind::topk, moc::kFfnGate | moc::kFfnSelect);
  add("up/down (force_idx)", SelKind::topk, moc::kFfnUpDown)->force = true;
  add("up/down stage", SelKind::topk, moc::kFfnAll)->updown_stage = true;
  add("2:8 gate+select", SelKind::grouped, moc::kFfnGate | moc::kFfnSelect);
  {
    Variant* v = add("2:8 up/down stage", SelKind::grouped, moc::kFfnAll);  // (the a:b ring has no stages apart)
    v->updown_stage = true;
    v->opt.ab_ring = false;
  }
  add("moc 2:8 kernels", SelKind::grouped, moc::kFfnAll)->opt.ab_ring = false;
  add("moc generic", SelKind::topk, moc::kFfnAll)->opt.specialized = false;
  add("moc 2:8 generic", SelKind::grouped, moc::kFfnAll)->opt.specialized = false;
  add("dense generic", SelKind::dense, moc::kFfnAll)->opt.specialized = false;
  add("dense up/down kernel", SelKind::dense, moc::kFfnAll)->opt.dense_ring = false;
  add("dense up/down kernel no entry-PDL", SelKind::dense, moc::kFfnAll)->opt.dense_ring = false;
  vars.back().opt.pdl_entry = false;
  add("gate+topK generic", SelKind::topk, moc::kFfnGate | moc::kFfnSelect)->opt.specialized = false;
  add("moc list", SelKind::topk, moc::kFfnAll)->opt.topk_list = true;
  add("moc all SMs", SelKind::topk, moc::kFfnAll)->opt.spare_sm = false;
  add("gate+topK all SMs", SelKind::topk, moc::kFfnGate | moc::kFfnSelect)->opt.spare_sm = false;
  {
    Variant* v = add("up/down stage list", SelKind::topk, moc::kFfnAll);
    v->updown_stage = true;
    v->opt.topk_list = true;
  }
  add("moc select 1024", SelKind::topk, moc::kFfnAll)->opt.select_threads = 1024;
  add("gate+topK select 1024", SelKind::topk, moc::kFfnGate | moc::kFfnSelect)->opt.select_threads = 1024;
  add("dense no-PDL", SelKind::dense, moc::kFfnAll)->opt.pdl = false;
  add("moc no-PDL", SelKind::topk, moc::kFfnAll)->opt.pdl = false;
  add("moc 2:8 no-PDL", SelKind::grouped, moc::kFfnAll)->opt.pdl = false;
  add("dense no entry-PDL", SelKind::dense, moc::kFfnAll)->opt.pdl_entry = false;
  add("moc no entry-PDL", SelKind::topk, moc::kFfnAll)->opt.pdl_entry = false;
  add("moc 2:8 no entry-PDL", SelKind::grouped, moc::kFfnAll)->opt.pdl_entry = false;
  add("gate only no-PDL", SelKind::topk, moc::kFfnGate)->opt.pdl = false;
  add("dense prefetch", SelKind::dense, moc::kFfnAll)->opt.prefetch = 7;
  add("moc prefetch", SelKind::topk, moc::kFfnAll)->opt.prefetch = 7;
  add("moc 2:8 prefetch", SelKind::grouped, moc::kFfnAll)->opt.prefetch = 7;
  for (int C : {1, 4}) {
    const std::string c = " cluster " + std::to_string(C);
    add("dense" + c, SelKind::dense, moc::kFfnAll)->opt.updown_cluster = C;
    add("moc" + c, SelKind::topk, moc::kFfnAll)->opt.updown_cluster = C;
    add("moc 2:8" + c, SelKind::grouped, moc::kFfnAll)->opt.updown_cluster = C;
  }
  // Row top-K at one row runs as one ring kernel by default (Options::topk_ring); the variants above tune the gate,
  // selection and up/down kernels, so they run those ("moc" stays the default, "moc kernels" its A/B).
  for (Variant& v : vars)
    if (v.kind == SelKind::topk && v.name != "moc") v.opt.topk_ring = false;
  add("moc kernels", SelKind::topk, moc::kFfnAll)->opt.topk_ring = false;

  std::printf("\n| variant | rows | eager us | graph us | floor MB | GB/s (graph) | %% of copy BW | vs dense (graph) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int R = 1; R <= 4; ++R) {
    // Workspaces and selections of a full MoC (and 2:8) call per weight copy.
    std::vector<DevBuf> ws_topk, ws_28, idx_topk;
    double union_topk = 0, union_28 = 0;
    std::size_t ws_bytes = 0;  // the largest workspace of the variants that share these buffers
    for (SelKind k : {SelKind::dense, SelKind::topk, SelKind::grouped}) {
      Variant v;
      v.kind = k;
      ws_bytes = std::max(ws_bytes, moc::cuda::ffn::workspace_bytes(bench_problem(b, R, v, 0)));
    }
    for (int c = 0; c < b.copies; ++c) {
      for (int which = 0; which < 2; ++which) {
        Variant v;
        v.kind = which == 0 ? SelKind::topk : SelKind::grouped;
        Problem p = bench_problem(b, R, v, c);
        DevBuf ws(ws_bytes);
        DevBuf idx(static_cast<std::size_t>(R) * p.kept() * 2);
        p.idx_out = idx.as<std::uint16_t>();
        moc::cuda::ffn::Options o;
        o.ab_ring = false;  // the gate kernel leaves the 2:8 masks in the workspace for the up/down stage variants
        o.topk_ring = false;  // ... and the selection kernel top-K's
        moc::cuda::ffn::launch(p, ws.p, ws.n, b.st, o);
        CK(cudaStreamSynchronize(b.st));
        if (c == 0) {
          std::vector<std::uint16_t> h(static_cast<std::size_t>(R) * p.kept());
          CK(cudaMemcpy(h.data(), idx.p, idx.n, cudaMemcpyDeviceToHost));
          std::vector<int> u(h.begin(), h.end());
          std::sort(u.begin(), u.end());
          const double nu = static_cast<double>(std::unique(u.begin(), u.end()) - u.begin());
          (which == 0 ? union_topk : union_28) = nu;
        }
        if (which == 0) {
          ws_topk.push_back(std::move(ws));
          idx_topk.push_back(std::move(idx));
        } else {
          ws_28.push_back(std::move(ws));
        }
      }
    }
    double dense_graph = 0;
    for (const Variant& v : vars) {
      if (!only.empty() && v.name.rfind(only, 0) != 0) continue;
      std::vector<DevBuf>& ws = v.kind == SelKind::grouped ? ws_28 : ws_topk;
      const Result r = time_variant(b, R, v, ws, idx_topk);
      const double row = 2.0 * b.d;  // bytes of one weight row
      const double U = v.kind == SelKind::grouped ? union_28 : union_topk;
      double floor = 0;
      if (v.kind == SelKind::dense) floor = 3.0 * row * b.F;
      else if (v.updown_stage) floor = 2.0 * row * U;
      else if (v.force) floor = 3.0 * row * U;
      else if (!(v.parts & moc::kFfnUpDown)) floor = row * b.F;
      else floor = row * b.F + 2.0 * row * U;
      if (v.name == "dense") dense_graph = r.graph_us;
      const double gbs = floor / (r.graph_us * 1e-6) / 1e9;
      std::printf("| %s | %d | %.2f | %.2f | %.2f | %.0f | %.0f%% | %s |\n", v.name.c_str(), R, r.eager_us, r.graph_us,
                  floor / 1e6, gbs, 100.0 * gbs * 1e9 / bw,
                  (v.parts & moc::kFfnUpDown) && !v.force && !v.updown_stage
                      ? (std::to_string(dense_graph / r.graph_us).substr(0, 4) + "x").c_str()
                      : "");
    }
    std::printf("| (union of the rows' channels: top-K %.0f, 2:8 %.0f) | %d | | | | | | |\n", union_topk, union_28, R);
  }
  CK(cudaStreamDestroy(b.st));
  return 0;
}

// A few calls of the 1b layer for a profiler (ncu): dense, MoC and MoC 2:8 at batch 1 and 4.
int run_profile() {
  const int d = 2048, F = 5461;
  const std::size_t wbytes = static_cast<std::size_t>(F) * d * 2;
  DevBuf wg(wbytes), wu(wbytes), wd(wbytes), x(8 * static_cast<std::size_t>(d) * 2), out(8 * static_cast<std::size_t>(d) * 2);
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  init_bf16<<<1024, 256>>>(wg.as<__nv_bfloat16>(), wbytes / 2, 21, s);
  init_bf16<<<1024, 256>>>(wu.as<__nv_bfloat16>(), wbytes / 2, 22, s);
  init_bf16<<<1024, 256>>>(wd.as<__nv_bfloat16>(), wbytes / 2, 23, s);
  init_bf16<<<64, 256>>>(x.as<__nv_bfloat16>(), 8 * static_cast<std::size_t>(d), 24, 1.0f);
  CK(cudaMemset(out.p, 0, out.n));
  CK(cudaDeviceSynchronize());
  for (int R : {1, 4})
    for (SelKind k : {SelKind::dense, SelKind::topk, SelKind::grouped}) {
      Problem p;
      p.rows = R;
      p.d = d;
      p.d_ffn = F;
      p.x = x.p;
      p.w_gate_t = wg.p;
      p.w_up_t = wu.p;
      p.w_down = wd.p;
      p.out = out.p;
      p.kind = k;
      p.k = 1024;
      p.group_a = 2;
      p.group_b = 8;
      DevBuf ws(moc::cuda::ffn::workspace_bytes(p));
      moc::cuda::ffn::launch(p, ws.p, ws.n, nullptr);
      CK(cudaDeviceSynchronize());
      std::printf("profiled rows %d %s\n", R, sel_name(p).c_str());
    }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int reps = 400, copies = 8;
  std::string only;  // variants whose name starts with this (empty: all)
  bool checks = true, bench = true, profile = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--copies" && i + 1 < argc) copies = std::atoi(argv[++i]);
    else if (a == "--skip-checks") checks = false;
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--skip-bench") bench = false;
    else if (a == "--profile") profile = true;
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--copies N] [--skip-checks] [--skip-bench] [--profile] [--only PREFIX]\n", argv[0]);
      return 2;
    }
  }
  int failed = 0;
  try {
    if (profile) return run_profile();
    if (checks) failed = run_checks();
    if (bench) run_bench(reps, copies, only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (failed) std::printf("== %d checks FAILED\n", failed);
  return failed ? 1 : 0;
}
