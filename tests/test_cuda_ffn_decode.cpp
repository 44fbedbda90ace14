// Decode-time FFN on the GPU (kernels/cuda/ffn_decode.cu) against its CPU twin (kernels/cpu/cpu_decode.cpp):
// dense, row top-K (K 1, 17, 1024, d_ffn; rules gate/silu/abs_silu), a:b (2:8 in the gate epilogue, 3:7 in
// the selection kernel), 1..9 rows (more than 8 rows run in chunks), bf16 and f32, odd sizes, fresh
// random inputs. Selections are compared as sets: a channel may differ only where the CPU's fp32 gate value
// lies within a small tolerance of the threshold it was ranked against (the GPU sums the dot products in
// another order); outputs are compared with the CPU run on the GPU's selection (force_idx). Also: the parts
// of a call, ties and NaN, threshold bins too full to rank pairwise, graph replay (with a copy node before
// the call and two calls back to back), the top-K hand-offs (mask bytes and union list) against each other, bad
// arguments, the FFN's RMSNorm inside the op (in place).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "test_util.h"
#ifdef MOCBENCH_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/ffn_decode.cuh"  // ffn::launch and its Options (the top-K hand-offs)
#include "kernels/cuda/kernels.h"       // zeroed_scratch
#endif

namespace moc {
namespace {
using namespace moc::test;

std::vector<float> round_to(std::vector<float> v, DType dt) {
  if (dt == DType::bf16)
    for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

float silu_h(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }
float rank_value(float g, SelectRule rule) {
  float v = g;
  if (rule == SelectRule::silu) v = silu_h(g);
  if (rule == SelectRule::abs_silu) v = std::fabs(silu_h(g));
  return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
}

// One FFN layer on both backends (same dtype and values), plus host copies of the stored values.
struct Layer {
  int R = 0, d = 0, F = 0;
  DType dt = DType::bf16;
  std::vector<float> x, wg, wu, wd, out0;
  Tensor xg, xc, wgg, wgc, wug, wuc, wdg, wdc;
  DecodeFfnWeights gw() const { return {&wgg, &wug, &wdg}; }
  DecodeFfnWeights cw() const { return {&wgc, &wuc, &wdc}; }
};

void upload_pair(Ops& gpu, Ops& cpu, Tensor& g, Tensor& c, const Shape& s, DType dt, const std::vector<float>& v) {
  g = gpu.empty(s, dt, workspace_tag());
  c = cpu.empty(s, dt, workspace_tag());
  gpu.upload_f32(g, v);
  cpu.upload_f32(c, v);
}

Layer make_layer(std::mt19937& rng, int R, int d, int F, DType dt) {
  Layer L;
  L.R = R;
  L.d = d;
  L.F = F;
  L.dt = dt;
  const float ws = 1.0f / std::sqrt(static_cast<float>(d));
  L.x = round_to(randn(rng, static_cast<std::size_t>(R) * d), dt);
  L.wg = round_to(randn(rng, static_cast<std::size_t>(F) * d, ws), dt);
  L.wu = round_to(randn(rng, static_cast<std::size_t>(F) * d, ws), dt);
  L.wd = round_to(randn(rng, static_cast<std::size_t>(F) * d, ws), dt);
  L.out0 = round_to(randn(rng, static_cast<std::size_t>(R) * d, 0.5f), dt);
  return L;
}

void upload_layer(Ops& gpu, Ops& cpu, Layer& L) {
  upload_pair(gpu, cpu, L.xg, L.xc, {L.R, L.d}, L.dt, L.x);
  upload_pair(gpu, cpu, L.wgg, L.wgc, {L.F, L.d}, L.dt, L.wg);
  upload_pair(gpu, cpu, L.wug, L.wuc, {L.F, L.d}, L.dt, L.wu);
  upload_pair(gpu, cpu, L.wdg, L.wdc, {L.F, L.d}, L.dt, L.wd);
}

// The CPU twin's fp32 gate values (double accumulation in column order, rounded once).
std::vector<float> host_gate(const Layer& L) {
  std::vector<float> g(static_cast<std::size_t>(L.R) * L.F);
  for (int r = 0; r < L.R; ++r)
    for (int j = 0; j < L.F; ++j) {
      double s = 0;
      for (int c = 0; c < L.d; ++c)
        s += static_cast<double>(L.x[static_cast<std::size_t>(r) * L.d + c]) * L.wg[static_cast<std::size_t>(j) * L.d + c];
      g[static_cast<std::size_t>(r) * L.F + j] = static_cast<float>(s);
    }
  return g;
}

// Per row and channel, the value of the threshold the channel was ranked against: the K-th best value of
// the row (top-K) or the a-th best of its group (a:b).
std::vector<float> thresholds(const std::vector<float>& g, int R, int F, const MocSelect& sel) {
  std::vector<float> thr(g.size());
  for (int r = 0; r < R; ++r) {
    std::vector<float> v(static_cast<std::size_t>(F));
    for (int j = 0; j < F; ++j) v[j] = rank_value(g[static_cast<std::size_t>(r) * F + j], sel.rule);
    auto kth = [&](int j0, int len, int n) {
      std::vector<float> s(v.begin() + j0, v.begin() + j0 + len);
      std::nth_element(s.begin(), s.begin() + (n - 1), s.end(), std::greater<float>());
      for (int j = j0; j < j0 + len; ++j) thr[static_cast<std::size_t>(r) * F + j] = s[n - 1];
    };
    if (!sel.grouped()) kth(0, F, sel.k);
    else
      for (int j0 = 0; j0 < F; j0 += sel.group_b) {
        const int len = std::min(sel.group_b, F - j0);
        kth(j0, len, std::min(sel.group_a, len));
      }
  }
  return thr;
}

// (a) The GPU's selection against the CPU's: ascending rows; sets equal except for near-ties.
// slack (optional, [R][F]): how far a channel's gate value may lie from g's because the GPU's input differs from the
// one g was computed from (norm_rounding_slack); a difference within it, plus the most the row's threshold may move
// by it, counts as a near-tie too.
void expect_same_selection(const std::string& what, const std::vector<std::int32_t>& gpu_idx,
                           const std::vector<std::int32_t>& cpu_idx, const std::vector<float>& g, int R, int F,
                           const MocSelect& sel, const std::vector<float>* slack = nullptr) {
  const int kept = sel.kept(F);
  ASSERT_EQ(gpu_idx.size(), static_cast<std::size_t>(R) * kept) << what;
  const std::vector<float> thr = thresholds(g, R, F, sel);
  int differing = 0, far = 0, unsorted = 0;
  double worst = 0;
  for (int r = 0; r < R; ++r) {
    std::vector<int> a(gpu_idx.begin() + static_cast<std::ptrdiff_t>(r) * kept, gpu_idx.begin() + static_cast<std::ptrdiff_t>(r + 1) * kept);
    std::vector<int> b(cpu_idx.begin() + static_cast<std::ptrdiff_t>(r) * kept, cpu_idx.begin() + static_cast<std::ptrdiff_t>(r + 1) * kept);
    for (int i = 1; i < kept; ++i) unsorted += a[i] <= a[i - 1];
    std::sort(a.begin(), a.end());
    std::vector<int> diff;
    std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(diff));
    double row_slack = 0;  // the most the row's threshold may move (the K-th value moves no more than any value)
    if (slack)
      for (int j = 0; j < F; ++j)
        row_slack = std::max(row_slack, static_cast<double>((*slack)[static_cast<std::size_t>(r) * F + j]));
    for (int j : diff) {
      ++differing;
      if (j < 0 || j >= F) {
        ++far;
        continue;
      }
      const double v = rank_value(g[static_cast<std::size_t>(r) * F + j], sel.rule);
      const double t = thr[static_cast<std::size_t>(r) * F + j];
      // (the ranking rules' slope is at most 1.1: SiLU's)
      const double moved = slack ? 1.1 * ((*slack)[static_cast<std::size_t>(r) * F + j] + row_slack) : 0.0;
      const double dist = std::max(0.0, std::fabs(v - t) - moved) / std::max(1.0, std::fabs(t));
      worst = std::max(worst, dist);
      if (!(dist <= 3e-5)) ++far;
    }
  }
  EXPECT_EQ(unsorted, 0) << what << ": idx_out rows must be ascending";
  // A near-tie swaps one channel for another (2 differences); fp32 reordering makes them rare.
  EXPECT_EQ(far, 0) << what << ": " << far << " of " << differing << " differing channels are not near-ties";
  EXPECT_LE(differing, 2 * R) << what << ": too many near-tie swaps (worst distance " << worst << ")";
}

// The norm inside the op, bf16: the GPU rounds x / rms * w to bf16 as the CPU's rmsnorm_forward does, but its 1/rms
// and products are fp32 in another order, so an element whose exact value lies that close to a bf16 rounding midpoint
// may round the other way (one bf16 ulp: 2^-8 relative). Per row and channel, how far the gate value may move by
// such elements: the sum over them of |W_gate| x |the other rounding - the CPU's|. (An element is counted where its
// value moved by 1e-5 relative -- some hundred times fp32 reordering -- rounds differently.) Zero for f32.
std::vector<float> norm_rounding_slack(const Layer& L, const std::vector<float>& h, const std::vector<float>& w,
                                       const std::vector<float>& rstd, const std::vector<float>& xn) {
  std::vector<float> slack(static_cast<std::size_t>(L.R) * L.F, 0.0f);
  if (L.dt != DType::bf16) return slack;
  auto rb = [](double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); };
  for (int r = 0; r < L.R; ++r)
    for (int c = 0; c < L.d; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * L.d + c;
      const double u = static_cast<double>(h[i]) * rstd[static_cast<std::size_t>(r)] * w[static_cast<std::size_t>(c)];
      const float lo = rb(u * (1 - 1e-5)), hi = rb(u * (1 + 1e-5));
      if (lo == hi) continue;
      const double step = std::max(std::fabs(lo - xn[i]), std::fabs(hi - xn[i]));
      for (int j = 0; j < L.F; ++j)
        slack[static_cast<std::size_t>(r) * L.F + j] +=
            static_cast<float>(std::fabs(L.wg[static_cast<std::size_t>(j) * L.d + c]) * step);
    }
  return slack;
}

// (b) Outputs: ||gpu - cpu|| <= tol ||cpu - out0|| + rounding of out itself (out is accumulated).
void expect_same_out(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& cpu,
                     const std::vector<float>& out0, DType dt) {
  ASSERT_EQ(gpu.size(), cpu.size());
  double e2 = 0, d2 = 0, o2 = 0;
  std::size_t nan = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (std::isnan(gpu[i]) != std::isnan(cpu[i])) ++nan;
    const double e = static_cast<double>(gpu[i]) - cpu[i], dl = static_cast<double>(cpu[i]) - out0[i];
    e2 += e * e;
    d2 += dl * dl;
    o2 += static_cast<double>(cpu[i]) * cpu[i];
  }
  const double rtol = dt == DType::bf16 ? 1e-2 : 1e-4, round = dt == DType::bf16 ? 1.0 / 256 : 1e-6;
  EXPECT_EQ(nan, 0u) << what;
  EXPECT_LE(std::sqrt(e2), rtol * std::sqrt(d2) + round * std::sqrt(o2))
      << what << ": ||gpu - cpu|| = " << std::sqrt(e2) << ", ||delta|| = " << std::sqrt(d2);
}

Tensor poisoned_idx(Ops& ops, int R, int kept) {
  Tensor t = ops.empty({R, kept}, DType::i16, workspace_tag());
  std::vector<std::uint16_t> h(static_cast<std::size_t>(R) * kept, 0xffff);
  ops.upload(t, h.data());
  return t;
}

Tensor idx_tensor(Ops& ops, const std::vector<std::int32_t>& v, int R, int kept) {
  Tensor t = ops.empty({R, kept}, DType::i16, workspace_tag());
  std::vector<std::uint16_t> h(v.begin(), v.end());
  ops.upload(t, h.data());
  return t;
}

std::string sel_str(const MocSelect* sel) {
  if (!sel) return "dense";
  const char* rule = sel->rule == SelectRule::gate ? "gate" : sel->rule == SelectRule::silu ? "silu" : "abs_silu";
  if (sel->grouped()) return std::to_string(sel->group_a) + ":" + std::to_string(sel->group_b) + "/" + rule;
  return "top" + std::to_string(sel->k) + "/" + rule;
}

// Full call on both backends; returns the GPU's selection (empty when dense).
std::vector<std::int32_t> check_call(Ops& gpu, Ops& cpu, Layer& L, const MocSelect* sel) {
  const std::string what = sel_str(sel) + " rows " + std::to_string(L.R) + " d " + std::to_string(L.d) + " d_ffn " +
                           std::to_string(L.F) + " " + std::string(dtype_name(L.dt));
  SCOPED_TRACE(what);
  Tensor og = gpu.empty({L.R, L.d}, L.dt, workspace_tag());
  gpu.upload_f32(og, L.out0);
  if (!sel) {
    Tensor oc = cpu.empty({L.R, L.d}, L.dt, workspace_tag());
    cpu.upload_f32(oc, L.out0);
    gpu.ffn_decode(L.xg, L.gw(), nullptr, og);
    cpu.ffn_decode(L.xc, L.cw(), nullptr, oc);
    expect_same_out(what, gpu.download_f32(og), cpu.download_f32(oc), L.out0, L.dt);
    return {};
  }
  const int kept = sel->kept(L.F);
  Tensor ig = poisoned_idx(gpu, L.R, kept);
  gpu.ffn_decode(L.xg, L.gw(), sel, og, nullptr, &ig);
  const std::vector<std::int32_t> gidx = gpu.download_i32(ig);
  // The CPU's own selection.
  Tensor oc = cpu.empty({L.R, L.d}, L.dt, workspace_tag());
  cpu.upload_f32(oc, L.out0);
  Tensor ic = cpu.empty({L.R, kept}, DType::i16, workspace_tag());
  cpu.ffn_decode(L.xc, L.cw(), sel, oc, nullptr, &ic, kFfnGate | kFfnSelect);
  expect_same_selection(what, gidx, cpu.download_i32(ic), host_gate(L), L.R, L.F, *sel);
  for (std::int32_t j : gidx)
    if (j < 0 || j >= L.F) return gidx;  // reported above; the CPU cannot run on it
  // The CPU on the GPU's selection.
  Tensor fc = idx_tensor(cpu, gidx, L.R, kept);
  cpu.ffn_decode(L.xc, L.cw(), sel, oc, &fc);
  expect_same_out(what, gpu.download_f32(og), cpu.download_f32(oc), L.out0, L.dt);
  return gidx;
}

const DType kTypes[] = {DType::bf16, DType::f32};
struct Size {
  int d, F;
};
const Size kSmall[] = {{64, 37}, {136, 301}};
const Size kPaper = {2048, 5461};  // the paper's 1b FFN layer
const int kRows[] = {1, 2, 3, 4, 5, 9};

TEST(GpuFfnDecode, DenseMatchesCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (DType dt : kTypes) {
    for (const Size& s : kSmall)
      for (int R : kRows) {
        Layer L = make_layer(rng, R, s.d, s.F, dt);
        upload_layer(*gpu, *cpu, L);
        check_call(*gpu, *cpu, L, nullptr);
      }
    for (int R : {1, 4, 9}) {
      Layer L = make_layer(rng, R, kPaper.d, kPaper.F, dt);
      upload_layer(*gpu, *cpu, L);
      check_call(*gpu, *cpu, L, nullptr);
    }
  }
}

TEST(GpuFfnDecode, TopKMatchesCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (DType dt : kTypes)
    for (const Size& s : kSmall)
      for (int R : kRows) {
        Layer L = make_layer(rng, R, s.d, s.F, dt);
        upload_layer(*gpu, *cpu, L);
        for (int k : {1, 17, s.F}) {
          MocSelect sel{k, 0, 0, SelectRule::gate};
          check_call(*gpu, *cpu, L, &sel);
        }
        for (SelectRule rule : {SelectRule::silu, SelectRule::abs_silu}) {
          MocSelect sel{17, 0, 0, rule};
          check_call(*gpu, *cpu, L, &sel);
        }
      }
  for (DType dt : kTypes)
    for (int R : {1, 2, 3, 4, 9}) {
      Layer L = make_layer(rng, R, kPaper.d, kPaper.F, dt);
      upload_layer(*gpu, *cpu, L);
      MocSelect sel{1024, 0, 0, SelectRule::gate};
      check_call(*gpu, *cpu, L, &sel);
      if (dt == DType::bf16 && R <= 2) {
        for (int k : {1, kPaper.F}) {
          MocSelect s2{k, 0, 0, SelectRule::gate};
          check_call(*gpu, *cpu, L, &s2);
        }
        MocSelect s3{1024, 0, 0, SelectRule::abs_silu};
        check_call(*gpu, *cpu, L, &s3);
      }
    }
}

TEST(GpuFfnDecode, GroupedMatchesCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // 2:8 and 4:16 are selected in the gate GEMV epilogue; 3:7 (7 does not divide 16) in the selection kernel.
  const MocSelect sels[] = {{0, 2, 8, SelectRule::gate}, {0, 3, 7, SelectRule::gate}, {0, 4, 16, SelectRule::silu},
                            {0, 2, 8, SelectRule::abs_silu}};
  for (DType dt : kTypes)
    for (const Size& s : kSmall)
      for (int R : kRows) {
        Layer L = make_layer(rng, R, s.d, s.F, dt);
        upload_layer(*gpu, *cpu, L);
        for (const MocSelect& sel : sels) check_call(*gpu, *cpu, L, &sel);
      }
  for (int R : {1, 4, 9}) {
    Layer L = make_layer(rng, R, kPaper.d, kPaper.F, DType::bf16);
    upload_layer(*gpu, *cpu, L);
    check_call(*gpu, *cpu, L, &sels[0]);
  }
}

// The FFN's RMSNorm inside the op (DecodeFfnWeights::norm; the decode step's call): x is the residual stream,
// out is x itself (the residual add in place). On the GPU the norm runs inside the dense ring kernel (bf16,
// rows <= 2) and as its own kernel before the FFN's elsewhere (MoC, f32, more rows). Against the CPU's composed ops: rmsnorm_forward, then the FFN on the GPU's
// selection; the selection against the CPU's own on its normalized x; a poisoned idx_out.
TEST(GpuFfnDecode, NormInsideTheOpMatchesTheComposedOps) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const MocSelect sels[] = {{17, 0, 0, SelectRule::gate}, {0, 2, 8, SelectRule::gate}, {0, 3, 7, SelectRule::silu},
                            {1024, 0, 0, SelectRule::gate}};
  const Size sizes[] = {{64, 37}, {136, 301}, kPaper};  // (d 136: clusters of 1 in the ring kernel; 64: of 2)
  for (DType dt : kTypes)
    for (const Size& s : sizes)
      for (int R : {1, 2, 3, 4, 9}) {
        if (dt == DType::f32 && s.F == kPaper.F && R > 1) continue;  // (the f32 paper layer is slow on the CPU)
        Layer L = make_layer(rng, R, s.d, s.F, dt);
        std::vector<float> nw = round_to(randn(rng, static_cast<std::size_t>(s.d), 0.3f), dt);
        for (float& v : nw) v += 1.0f;
        Tensor ng, nc;
        upload_pair(*gpu, *cpu, ng, nc, {s.d}, dt, nw);
        // The CPU's normalized x (for the host gate values the selection is judged by).
        Tensor xc = cpu->empty({R, s.d}, dt, workspace_tag()), xn = cpu->empty({R, s.d}, dt, workspace_tag());
        Tensor rstd = cpu->empty({R}, DType::f32, workspace_tag());
        cpu->upload_f32(xc, L.out0);
        cpu->rmsnorm_forward(xc, nc, 1e-5f, xn, rstd);
        Layer Ln = L;
        Ln.x = cpu->download_f32(xn);
        const std::vector<float> slack = norm_rounding_slack(Ln, L.out0, nw, cpu->download_f32(rstd), Ln.x);
        upload_layer(*gpu, *cpu, L);
        for (int si = -1; si < 4; ++si) {
          const MocSelect* sel = si < 0 ? nullptr : &sels[si];
          if (sel && !sel->grouped() && sel->k > s.F) continue;
          const std::string what = "norm " + sel_str(sel) + " rows " + std::to_string(R) + " d " +
                                   std::to_string(s.d) + " d_ffn " + std::to_string(s.F) + " " + std::string(dtype_name(dt));
          SCOPED_TRACE(what);
          DecodeFfnWeights gw = L.gw(), cw = L.cw();
          gw.norm = &ng;
          cw.norm = &nc;
          gw.norm_eps = cw.norm_eps = 1e-5f;
          // The residual stream h = out0, normalized and fed to the FFN, the result added to h in place.
          Tensor hg = gpu->empty({R, s.d}, dt, workspace_tag()), hc = cpu->empty({R, s.d}, dt, workspace_tag());
          gpu->upload_f32(hg, L.out0);
          cpu->upload_f32(hc, L.out0);
          if (!sel) {
            gpu->ffn_decode(hg, gw, nullptr, hg);
            cpu->ffn_decode(hc, cw, nullptr, hc);
            expect_same_out(what, gpu->download_f32(hg), cpu->download_f32(hc), L.out0, dt);
            continue;
          }
          const int kept = sel->kept(s.F);
          Tensor ig = poisoned_idx(*gpu, R, kept);
          gpu->ffn_decode(hg, gw, sel, hg, nullptr, &ig);
          const std::vector<std::int32_t> gidx = gpu->download_i32(ig);
          Tensor ic = cpu->empty({R, kept}, DType::i16, workspace_tag());
          Tensor scratch = cpu->empty({R, s.d}, dt, workspace_tag());
          cpu->upload_f32(scratch, L.out0);
          cpu->ffn_decode(scratch, cw, sel, scratch, nullptr, &ic, kFfnGate | kFfnSelect);
          expect_same_selection(what, gidx, cpu->download_i32(ic), host_gate(Ln), R, s.F, *sel, &slack);
          bool in_range = true;
          for (std::int32_t j : gidx) in_range = in_range && j >= 0 && j < s.F;
          if (!in_range) continue;  // reported above
          Tensor fc = idx_tensor(*cpu, gidx, R, kept);
          cpu->ffn_decode(hc, cw, sel, hc, &fc);
          expect_same_out(what, gpu->download_f32(hg), cpu->download_f32(hc), L.out0, dt);
        }
      }
}

// (c) The parts of a call: gate only leaves out and idx_out alone; gate + select writes idx_out only;
// up/down with force_idx equals the full call with that selection (and copies it to idx_out).
TEST(GpuFfnDecode, PartsBreakDownTheCall) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const MocSelect sels[] = {{17, 0, 0, SelectRule::gate}, {0, 2, 8, SelectRule::gate}, {1024, 0, 0, SelectRule::gate}};
  for (const MocSelect& sel : sels)
    for (int R : {1, 3, 9}) {
      const Size s = sel.k == 1024 ? kPaper : Size{136, 301};
      Layer L = make_layer(rng, R, s.d, s.F, DType::bf16);
      upload_layer(*gpu, *cpu, L);
      SCOPED_TRACE(sel_str(&sel) + " rows " + std::to_string(R));
      const int kept = sel.kept(L.F);
      Tensor full = gpu->empty({R, L.d}, L.dt, workspace_tag());
      gpu->upload_f32(full, L.out0);
      Tensor idx = poisoned_idx(*gpu, R, kept);
      gpu->ffn_decode(L.xg, L.gw(), &sel, full, nullptr, &idx);
      const auto want_idx = gpu->download_i32(idx);
      const auto want_out = gpu->download_f32(full);

      Tensor o = gpu->empty({R, L.d}, L.dt, workspace_tag());
      gpu->upload_f32(o, L.out0);
      Tensor i2 = poisoned_idx(*gpu, R, kept);
      gpu->ffn_decode(L.xg, L.gw(), &sel, o, nullptr, &i2, kFfnGate);
      EXPECT_EQ(gpu->download_f32(o), L.out0) << "gate only must leave out untouched";
      EXPECT_EQ(gpu->download_i32(i2), std::vector<std::int32_t>(want_idx.size(), 0xffff))
          << "gate only must leave idx_out untouched";

      gpu->ffn_decode(L.xg, L.gw(), &sel, o, nullptr, &i2, kFfnGate | kFfnSelect);
      EXPECT_EQ(gpu->download_f32(o), L.out0) << "gate + select must leave out untouched";
      EXPECT_EQ(gpu->download_i32(i2), want_idx) << "gate + select writes the same selection";

      Tensor force = idx_tensor(*gpu, want_idx, R, kept);
      for (unsigned parts : {static_cast<unsigned>(kFfnUpDown), static_cast<unsigned>(kFfnAll)}) {
        Tensor o3 = gpu->empty({R, L.d}, L.dt, workspace_tag());
        gpu->upload_f32(o3, L.out0);
        Tensor i3 = poisoned_idx(*gpu, R, kept);
        gpu->ffn_decode(L.xg, L.gw(), &sel, o3, &force, &i3, parts);
        expect_same_out("force_idx, parts " + std::to_string(parts), gpu->download_f32(o3), want_out, L.out0, L.dt);
        EXPECT_EQ(gpu->download_i32(i3), want_idx) << "force_idx is copied to idx_out";
      }
    }
}

// Every W_gate row a copy of the first: each row's gate values all equal, so every selection is decided by ties.
void tie_gate_rows(Layer& L) {
  for (int j = 1; j < L.F; ++j) std::copy_n(L.wg.begin(), L.d, L.wg.begin() + static_cast<std::ptrdiff_t>(j) * L.d);
}

// Ties go to the lower channel (every gate value equal), NaN gate values are never selected, and threshold
// bins holding more candidates than are ranked pairwise (the radix passes): all ties, and concentrated rows.
TEST(GpuFfnDecode, TiesNaNAndOverflowingThresholdBin) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Batch 1 (one selection block) and 2 (a cluster of two, merged into one union list).
  for (int F : {301, 5461})
    for (int R : {1, 2}) {
      Layer L = make_layer(rng, R, 64, F, DType::bf16);
      tie_gate_rows(L);
      upload_layer(*gpu, *cpu, L);
      for (const MocSelect& sel : {MocSelect{17, 0, 0, SelectRule::gate}, MocSelect{0, 2, 8, SelectRule::silu}}) {
        const auto idx = check_call(*gpu, *cpu, L, &sel);
        const int kept = sel.kept(F);
        for (int r = 0; r < L.R; ++r)
          for (int i = 0; i < kept; ++i) {
            const int want = sel.grouped() ? (i / 2) * 8 + i % 2 : i;
            ASSERT_EQ(idx[static_cast<std::size_t>(r) * kept + i], want) << "ties go to the lower channel";
          }
      }
    }
  for (int R : {1, 2}) {
    // Row 0 of the gate values concentrated near one value (every channel in one histogram bin, distinct
    // values), row 1 ordinary.
    Layer C = make_layer(rng, R, 64, 5461, DType::bf16);
    std::normal_distribution<float> nd(0.f, 0.01f);
    for (int j = 0; j < C.F; ++j)
      for (int c = 0; c < C.d; ++c)
        C.wg[static_cast<std::size_t>(j) * C.d + c] = bf16_to_f32(f32_to_bf16((C.x[c] >= 0 ? 0.2f : -0.2f) + nd(rng)));
    upload_layer(*gpu, *cpu, C);
    for (int k : {17, 1024}) {
      MocSelect sel{k, 0, 0, SelectRule::gate};
      check_call(*gpu, *cpu, C, &sel);
    }
  }
  for (int R : {1, 3}) {
    Layer L = make_layer(rng, R, 136, 301, DType::bf16);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int j : {0, 5, 100, 300}) std::fill_n(L.wg.begin() + static_cast<std::ptrdiff_t>(j) * L.d, L.d, nan);
    upload_layer(*gpu, *cpu, L);
    for (const MocSelect& sel : {MocSelect{17, 0, 0, SelectRule::gate}, MocSelect{0, 2, 8, SelectRule::gate},
                                 MocSelect{40, 0, 0, SelectRule::abs_silu}}) {
      const auto idx = check_call(*gpu, *cpu, L, &sel);
      for (std::int32_t j : idx) EXPECT_TRUE(j != 0 && j != 5 && j != 100 && j != 300) << sel_str(&sel) << ": NaN kept";
    }
  }
}

// One ranking key for every path (kernels/cuda/select_key.cuh): the decode FFN's selection (ffn_decode, gate
// computed with W_gate = I so that g = x exactly), the training step's row top-K (Ops::moc_select on the same
// values, f32 and bf16, own kernels) and the CPU twin must keep exactly the same channels -- not "the same up
// to near-ties": the keys are equal bit for bit. Values: ties, +-0 and a dense range where the rounding of SiLU
// decides the order (silu, abs_silu); no NaN (with W_gate = I one NaN in x would make every g NaN; NaN ranking
// is TiesNaNAndOverflowingThresholdBin's). RAFT's select_k is left out: its order among equal keys is its own.
TEST(GpuMocSelect, EveryPathRanksByTheSameKey) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int F : {296, 1024})
    for (int R : {1, 3}) {
      // x: the gate values themselves (bf16), with ties and zeros of both signs.
      std::vector<float> x = round_to(randn(rng, static_cast<std::size_t>(R) * F, 3.0f), DType::bf16);
      for (int r = 0; r < R; ++r) {
        float* row = x.data() + static_cast<std::size_t>(r) * F;
        for (int j = 0; j < 24; ++j) row[j] = row[24];  // a run of equal values
        row[30] = 0.0f;
        row[31] = -0.0f;
        for (int j = 50; j < 120; ++j) row[j] = bf16_to_f32(f32_to_bf16(-1.2784f + 1e-3f * static_cast<float>(j % 7)));
      }
      std::vector<float> eye(static_cast<std::size_t>(F) * F, 0.0f), zero(static_cast<std::size_t>(F) * F, 0.0f);
      for (int j = 0; j < F; ++j) eye[static_cast<std::size_t>(j) * F + j] = 1.0f;
      Tensor xg, xc, wgg, wgc, wug, wuc, wdg, wdc;
      upload_pair(*gpu, *cpu, xg, xc, {R, F}, DType::bf16, x);
      upload_pair(*gpu, *cpu, wgg, wgc, {F, F}, DType::bf16, eye);
      upload_pair(*gpu, *cpu, wug, wuc, {F, F}, DType::bf16, zero);
      upload_pair(*gpu, *cpu, wdg, wdc, {F, F}, DType::bf16, zero);
      for (SelectRule rule : {SelectRule::gate, SelectRule::silu, SelectRule::abs_silu}) {
        const MocSelect sel{F / 5, 0, 0, rule};
        SCOPED_TRACE("F " + std::to_string(F) + " R " + std::to_string(R) + " " + sel_str(&sel));
        const int kept = sel.kept(F);
        // The decode FFN's gate and selection.
        Tensor out = gpu->empty({R, F}, DType::bf16, workspace_tag());
        gpu->fill(out, 0.0f);
        Tensor dec = gpu->empty({R, kept}, DType::i16, workspace_tag());
        gpu->ffn_decode(xg, {&wgg, &wug, &wdg}, &sel, out, nullptr, &dec, kFfnGate | kFfnSelect);
        const auto decode_idx = gpu->download_i32(dec);
        // The training step's selection on the same values, f32 and bf16; and the CPU twin's.
        auto select_on = [&](Ops& ops, DType dt, TopkBackend backend) {
          Tensor g = ops.empty({R, F}, dt, workspace_tag());
          ops.upload_f32(g, x);
          Tensor idx = ops.empty({R, kept}, DType::i16, workspace_tag());
          MocSelect s = sel;
          s.backend = backend;
          ops.moc_select(g, s, idx);
          return ops.download_i32(idx);
        };
        EXPECT_EQ(decode_idx, select_on(*cpu, DType::f32, TopkBackend::own)) << "decode FFN vs the CPU twin";
        EXPECT_EQ(decode_idx, select_on(*gpu, DType::f32, TopkBackend::own)) << "decode FFN vs training, f32";
        EXPECT_EQ(decode_idx, select_on(*gpu, DType::bf16, TopkBackend::own)) << "decode FFN vs training, bf16";
      }
    }
}

TEST(GpuFfnDecode, GraphReplayMatchesEager) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const MocSelect sels[] = {{1024, 0, 0, SelectRule::gate}, {0, 2, 8, SelectRule::gate}};
  for (const MocSelect* sel : {static_cast<const MocSelect*>(nullptr), &sels[0], &sels[1]})
    for (int R : {1, 3}) {
      Layer L = make_layer(rng, R, kPaper.d, kPaper.F, DType::bf16);
      upload_layer(*gpu, *cpu, L);
      SCOPED_TRACE(sel_str(sel) + " rows " + std::to_string(R));
      Tensor eager = gpu->empty({L.R, L.d}, L.dt, workspace_tag());
      gpu->upload_f32(eager, L.out0);
      gpu->ffn_decode(L.xg, L.gw(), sel, eager);
      const auto want = gpu->download_f32(eager);
      Tensor o = gpu->empty({L.R, L.d}, L.dt, workspace_tag());
      auto graph = gpu->capture([&] { gpu->ffn_decode(L.xg, L.gw(), sel, o); });
      // Equal up to the order of the fp32 atomics that reduce the down projection across blocks.
      for (int rep = 0; rep < 2; ++rep) {
        gpu->upload_f32(o, L.out0);
        graph->replay();
        expect_same_out("replay " + std::to_string(rep), gpu->download_f32(o), want, L.out0, L.dt);
      }
      // A copy node before the call and two calls back to back (the second call's kernels overlap the first's
      // and reuse its workspace) equal two eager calls.
      gpu->ffn_decode(L.xg, L.gw(), sel, eager);
      const auto want2 = gpu->download_f32(eager);
      Tensor init = gpu->empty({L.R, L.d}, L.dt, workspace_tag());
      gpu->upload_f32(init, L.out0);
      auto graph2 = gpu->capture([&] {
        gpu->copy(o, init);
        gpu->ffn_decode(L.xg, L.gw(), sel, o);
        gpu->ffn_decode(L.xg, L.gw(), sel, o);
      });
      for (int rep = 0; rep < 2; ++rep) {
        gpu->upload_f32(o, std::vector<float>(L.out0.size(), 7.0f));  // overwritten by the copy node
        graph2->replay();
        expect_same_out("two calls, replay " + std::to_string(rep), gpu->download_f32(o), want2, L.out0, L.dt);
      }
    }
}

// The dense path keeps its up/down accumulator and counters in the ops' zeroed scratch (no prep kernel per call):
// the first request allocates and zeroes it and is answered null (that call zeroes its own workspace), later
// requests get it; a larger request inside a stream capture gets null and allocates nothing. Dense calls of other
// widths and row counts (one chunk, two chunks) in a row each match the CPU, so each left the region zero.
TEST(GpuFfnDecode, DenseKeepsItsCountersInTheZeroedScratch) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  void* first = cuda::zeroed_scratch(*gpu, 1 << 20);
  void* second = cuda::zeroed_scratch(*gpu, 1 << 20);
  EXPECT_EQ(first, nullptr) << "the first request allocates and zeroes, and is answered null";
  EXPECT_NE(second, nullptr);
  EXPECT_EQ(cuda::zeroed_scratch(*gpu, 4096), second) << "a smaller request gets the same region";
  void* in_capture = second;
  auto graph = gpu->capture([&] { in_capture = cuda::zeroed_scratch(*gpu, 8 << 20); });
  EXPECT_EQ(in_capture, nullptr) << "no allocation inside a capture";
  EXPECT_EQ(cuda::zeroed_scratch(*gpu, 1 << 20), second) << "the capture left the region alone";
  for (const Size& s : {kPaper, Size{64, 37}, kPaper, Size{136, 301}, kPaper})
    for (int R : {9, 1, 3}) {
      Layer L = make_layer(rng, R, s.d, s.F, DType::bf16);
      upload_layer(*gpu, *cpu, L);
      check_call(*gpu, *cpu, L, nullptr);
    }
#endif
}

#ifdef MOCBENCH_HAVE_CUDA
// The layer's GPU tensors as a dense problem of cuda::ffn::launch (out set per launch).
cuda::ffn::Problem launch_problem(const Layer& L) {
  cuda::ffn::Problem p;
  p.rows = L.R;
  p.d = L.d;
  p.d_ffn = L.F;
  p.x = L.xg.raw();
  p.w_gate_t = L.wgg.raw();
  p.w_up_t = L.wug.raw();
  p.w_down = L.wdg.raw();
  return p;
}

// A workspace for cuda::ffn::launch of p: the tensor and the bytes launch is told it has.
struct LaunchWorkspace {
  Tensor ws;
  std::size_t bytes;
};
LaunchWorkspace launch_workspace(Ops& gpu, const cuda::ffn::Problem& p) {
  const std::size_t bytes = cuda::ffn::workspace_bytes(p);
  return {gpu.empty({static_cast<std::int64_t>((bytes + 3) / 4)}, DType::i32, workspace_tag()), bytes};
}

// One cuda::ffn::launch of p with opt on workspace ws (bytes), into a fresh out holding L.out0: the output.
std::vector<float> launch_out(Ops& gpu, const Layer& L, cuda::ffn::Problem p, void* ws, std::size_t bytes,
                              cudaStream_t st, const cuda::ffn::Options& opt) {
  Tensor o = gpu.empty({L.R, L.d}, L.dt, workspace_tag());
  gpu.upload_f32(o, L.out0);
  p.out = o.raw();
  cuda::ffn::launch(p, ws, bytes, st, opt);
  return gpu.download_f32(o);
}
#endif

// Row top-K hands its selection to the up/down kernel as per-row mask bytes (default) or as the union list
// (Options::topk_list, the earlier design), on grids of every SM or one fewer (Options::spare_sm): the four
// launches, with idx_out asked for or not (the decode engine asks for none: then, at one row, the up/down kernel
// speculates on the selection's threshold bin, Options::topk_speculate), keep the same channels (idx_out equal bit
// for bit) and give the same output up to the order of the fp32 atomics of the down projection. Rows 1-8 (one chunk:
// 8 is the widest mask byte), the 1b layer and an odd small one, K from 1 to d_ffn.
TEST(GpuFfnDecode, TopKHandOffsAgree) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto st = static_cast<cudaStream_t>(gpu->stream());
  struct Case {
    Size s;
    int R, k;
    bool tied = false;  // every gate row the same: all keys of a row equal, ties to the lower channels
  };
  // The tied cases reach the masks-only selection kernel's ranking of one bin's candidates (d_ffn 301) and its
  // radix path (5461 candidates, more than the block's threads); the idx_out runs check the same ties on the
  // general kernel, and every run's output must match the first's.
  const Case cases[] = {{kPaper, 1, 1024},   {kPaper, 2, 1024},       {kPaper, 3, 1024},      {kPaper, 5, 1024},
                        {kPaper, 8, 1024},   {kPaper, 1, 1},          {kPaper, 4, kPaper.F},  {{64, 37}, 1, 17},
                        {{64, 37}, 7, 17},   {{136, 301}, 3, 300},    {{136, 301}, 1, 17, true},
                        {{136, 301}, 2, 17, true}, {kPaper, 1, 1024, true}};
  for (const Case& c : cases) {
    Layer L = make_layer(rng, c.R, c.s.d, c.s.F, DType::bf16);
    if (c.tied) tie_gate_rows(L);
    upload_layer(*gpu, *cpu, L);
    SCOPED_TRACE("rows " + std::to_string(c.R) + " d_ffn " + std::to_string(c.s.F) + " k " + std::to_string(c.k) +
                 (c.tied ? " tied" : ""));
    cuda::ffn::Problem p = launch_problem(L);
    p.kind = cuda::ffn::SelKind::topk;
    p.k = c.k;
    auto [ws, bytes] = launch_workspace(*gpu, p);
    std::vector<float> first_out;
    std::vector<std::int32_t> first_idx;
    for (bool list : {false, true})
      for (bool spare : {true, false})
        for (bool want_idx : {true, false}) {
          SCOPED_TRACE(std::string(list ? "list" : "masks") + (spare ? ", spare SM" : ", all SMs") +
                       (want_idx ? ", idx_out" : ""));
          cuda::ffn::Options opt;
          opt.topk_ring = false;  // the kernels' hand-offs (the ring: TopKRingAgreesWithTheKernels)
          opt.topk_list = list;
          opt.spare_sm = spare;
          ASSERT_TRUE(cuda::ffn::fast_path(p, opt));
          Tensor o = gpu->empty({L.R, L.d}, L.dt, workspace_tag());
          gpu->upload_f32(o, L.out0);
          Tensor idx = poisoned_idx(*gpu, L.R, c.k);
          p.out = o.raw();
          p.idx_out = want_idx ? idx.data<std::uint16_t>() : nullptr;
          cuda::ffn::launch(p, ws.raw(), bytes, st, opt);
          const auto out = gpu->download_f32(o);
          if (first_out.empty()) {
            first_out = out;
            first_idx = gpu->download_i32(idx);
            for (std::int32_t j : first_idx) ASSERT_TRUE(j >= 0 && j < c.s.F) << "idx_out written: " << j;
            if (c.tied) {
              for (std::size_t i = 0; i < first_idx.size(); ++i) {
                ASSERT_EQ(first_idx[i], static_cast<std::int32_t>(i % static_cast<std::size_t>(c.k)))
                    << "ties go to the lower channels";
              }
            }
            continue;
          }
          expect_same_out("against masks, spare SM, idx_out", out, first_out, L.out0, L.dt);
          if (want_idx) {
            EXPECT_EQ(gpu->download_i32(idx), first_idx);
          }
        }
  }
#endif
}

// MoC at one row with the masks-only selection (the decode engine's call: no idx_out) has the up/down kernel speculate
// on the selection's threshold bin (Options::topk_speculate): right (1), a wrong bin published on purpose (2: the
// blocks holding a kept channel of the true bin find it missing and redo their work after the wait), none published
// (3: every block stops polling after its time limit and does the work after the wait) -- each the same output as
// without speculation (0), up to the order of the fp32 atomics. The 1b layer, an odd small one, ties.
TEST(GpuFfnDecode, SpeculationOnTheThresholdBinSettlesEveryWay) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto st = static_cast<cudaStream_t>(gpu->stream());
  struct Case {
    Size s;
    int k;
    bool tied;
  };
  for (const Case& c : {Case{kPaper, 1024, false}, Case{kPaper, 1, false}, Case{{64, 37}, 17, false},
                        Case{{136, 301}, 17, true}}) {
    Layer L = make_layer(rng, 1, c.s.d, c.s.F, DType::bf16);
    if (c.tied) tie_gate_rows(L);
    upload_layer(*gpu, *cpu, L);
    SCOPED_TRACE("d_ffn " + std::to_string(c.s.F) + " k " + std::to_string(c.k) + (c.tied ? " tied" : ""));
    cuda::ffn::Problem p = launch_problem(L);
    p.kind = cuda::ffn::SelKind::topk;
    p.k = c.k;
    auto [ws, bytes] = launch_workspace(*gpu, p);
    std::vector<float> want;
    for (int spec : {0, 1, 2, 3, 1}) {
      SCOPED_TRACE("speculate " + std::to_string(spec));
      cuda::ffn::Options opt;
      opt.topk_ring = false;  // the up/down kernel's speculation (the one-row default is the ring kernel)
      opt.topk_speculate = spec;
      const auto out = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
      if (want.empty()) want = out;
      else expect_same_out("against no speculation", out, want, L.out0, L.dt);
    }
  }
#endif
}

// The dense FFN through the ring kernel (Options::dense_ring, default: rows <= 2, d <= 2048; a producer warp's bulk
// copies through shared memory, clusters of 2 where d % 16 == 0, else 1) against the up/down kernel with the gate
// fused (the earlier design), on the same inputs: the same output up to the order of the fp32 sums. Rows 1-2 at the
// 1b layer (d_ffn 5461: 41-42 channels a block), d 64 / d_ffn 37 (one channel a block, clusters of 2), d 136 /
// d_ffn 301 (clusters of 1); norm_inside says which problems take the ring (not 3 rows, not d 2560).
TEST(GpuFfnDecode, DenseRingAgreesWithTheUpDownKernel) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto st = static_cast<cudaStream_t>(gpu->stream());
  struct Case {
    Size s;
    int R;
    bool ring;  // norm_inside (the ring path) expected
  };
  const Case cases[] = {{kPaper, 1, true},   {kPaper, 2, true},     {{64, 37}, 1, true}, {{64, 37}, 2, true},
                        {{136, 301}, 1, true}, {{136, 301}, 2, true}, {kPaper, 3, false},  {{2560, 301}, 1, false}};
  for (const Case& c : cases) {
    Layer L = make_layer(rng, c.R, c.s.d, c.s.F, DType::bf16);
    upload_layer(*gpu, *cpu, L);
    SCOPED_TRACE("rows " + std::to_string(c.R) + " d " + std::to_string(c.s.d) + " d_ffn " + std::to_string(c.s.F));
    cuda::ffn::Problem p = launch_problem(L);
    EXPECT_EQ(cuda::ffn::norm_inside(p), c.ring);
    auto [ws, bytes] = launch_workspace(*gpu, p);
    std::vector<float> outs[2];
    for (int ring = 0; ring < 2; ++ring) {
      cuda::ffn::Options opt;
      opt.dense_ring = ring == 1;
      ASSERT_TRUE(cuda::ffn::fast_path(p, opt));
      outs[ring] = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
    }
    expect_same_out("ring against the up/down kernel", outs[1], outs[0], L.out0, L.dt);
  }
#endif
}

// MoC a:b at 1-2 rows runs as one ring kernel (Options::ab_ring: gate, the group selection, up and down) where one
// group's W_gate rows fit a 32 KB slot and a block's kept rows fit shared memory beside two slots, else as the gate
// kernel (selecting in its epilogue where b | 16) and the up/down kernel. Both ways keep the same channels (idx_out,
// poisoned first; near-ties aside: the ring sums the gate's dot products in another order) and then give the same
// output, up to the order of the fp32 atomics; so do rings of 1 and 3 slots. 2:8 (rules gate and abs_silu), 3:7 and
// 4:16; the 1b layer (a partial last group) and odd small ones, clusters of 2 (d 64, 2048) and of 1 (d 136); at d
// 2048 two rows (up to 4 kept channels a group: 192 KB of kept rows a block), three rows and 4:16 (16 rows of 4 KB:
// more than a slot) stay on the kernels.
TEST(GpuFfnDecode, AbRingAgreesWithTheGateAndUpDownKernels) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto st = static_cast<cudaStream_t>(gpu->stream());
  struct Case {
    Size s;
    int R;
    MocSelect sel;
    bool ring;  // norm_inside (the ring path) expected
  };
  const MocSelect s28{0, 2, 8, SelectRule::gate}, s28a{0, 2, 8, SelectRule::abs_silu}, s37{0, 3, 7, SelectRule::gate},
      s416{0, 4, 16, SelectRule::silu};
  const Case cases[] = {{kPaper, 1, s28, true},     {kPaper, 1, s28a, true},     {{64, 37}, 1, s28, true},
                        {{64, 37}, 2, s37, true},   {{64, 37}, 2, s416, true},   {{136, 301}, 1, s28, true},
                        {{136, 301}, 2, s28a, true}, {{136, 301}, 1, s37, true}, {kPaper, 2, s28, false},
                        {kPaper, 3, s28, false},    {kPaper, 1, s416, false}};
  for (const Case& c : cases) {
    Layer L = make_layer(rng, c.R, c.s.d, c.s.F, DType::bf16);
    upload_layer(*gpu, *cpu, L);
    const std::string what = sel_str(&c.sel) + " rows " + std::to_string(c.R) + " d " + std::to_string(c.s.d) +
                             " d_ffn " + std::to_string(c.s.F);
    SCOPED_TRACE(what);
    cuda::ffn::Problem p = launch_problem(L);
    p.kind = cuda::ffn::SelKind::grouped;
    p.group_a = c.sel.group_a;
    p.group_b = c.sel.group_b;
    p.rule = c.sel.rule;
    EXPECT_EQ(cuda::ffn::norm_inside(p), c.ring);
    EXPECT_EQ(cuda::ffn::uses_zeroed(p), c.ring);
    const int kept = c.sel.kept(L.F);
    auto [ws, bytes] = launch_workspace(*gpu, p);
    std::vector<float> outs[2];
    std::vector<std::int32_t> idx[2];
    for (int ring = 0; ring < 2; ++ring) {
      cuda::ffn::Options opt;
      opt.ab_ring = ring == 1;
      ASSERT_TRUE(cuda::ffn::fast_path(p, opt));
      Tensor ig = poisoned_idx(*gpu, L.R, kept);
      p.idx_out = ig.data<std::uint16_t>();
      outs[ring] = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
      idx[ring] = gpu->download_i32(ig);
    }
    expect_same_selection("ring against the kernels", idx[1], idx[0], host_gate(L), L.R, L.F, c.sel);
    if (idx[1] == idx[0]) expect_same_out("ring against the kernels", outs[1], outs[0], L.out0, L.dt);
    if (c.ring)
      for (int slots : {1, 3}) {
        SCOPED_TRACE("slots " + std::to_string(slots));
        cuda::ffn::Options opt;
        opt.ab_ring_slots = slots;
        Tensor ig = poisoned_idx(*gpu, L.R, kept);
        p.idx_out = ig.data<std::uint16_t>();
        const std::vector<float> o = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
        EXPECT_EQ(gpu->download_i32(ig), idx[1]);
        expect_same_out("against the default ring", o, outs[1], L.out0, L.dt);
      }
  }
#endif
}

// MoC row top-K at one row runs as one kernel (Options::topk_ring: gate, the grid's histogram and candidate list, up
// and down; d <= 2048) against the gate, selection and up/down kernels on the same inputs: the same channels (idx_out,
// poisoned first; near-ties aside: the ring sums the gate's dot products in another order), then the same output up to
// the order of the fp32 atomics; without idx_out (the decode engine's call: no third grid meeting), and with rings of
// 1, 2 and 4 slots, the same output again. Rules gate, silu and abs_silu; K 1, 1024, d_ffn; the 1b layer (clusters of
// 2, 41-42 channels a block), d 64 / d_ffn 37 (one channel a block or none), d 136 / d_ffn 301 (clusters of 1); every
// gate row equal (one bin of d_ffn candidates: ties to the lower channels), NaN rows, and the largest keys
// concentrated in the first channels (blocks keeping more channels than their kept area holds: rows in the ring past
// the key array, then rows read from global memory). Two rows and d 2560 stay on the kernels.
TEST(GpuFfnDecode, TopKRingAgreesWithTheKernels) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto st = static_cast<cudaStream_t>(gpu->stream());
  enum Shape { kPlain, kTied, kNaN, kFront };
  struct Case {
    Size s;
    int R;
    MocSelect sel;
    Shape shape;
    bool ring;  // norm_inside (the ring path) expected
  };
  const MocSelect t1024{1024, 0, 0, SelectRule::gate}, t1{1, 0, 0, SelectRule::gate},
      tall{kPaper.F, 0, 0, SelectRule::gate}, t1024s{1024, 0, 0, SelectRule::silu}, t17{17, 0, 0, SelectRule::gate},
      t17a{17, 0, 0, SelectRule::abs_silu}, t300{300, 0, 0, SelectRule::silu}, t40{40, 0, 0, SelectRule::gate};
  const Case cases[] = {{kPaper, 1, t1024, kPlain, true},   {kPaper, 1, t1, kPlain, true},
                        {kPaper, 1, tall, kPlain, true},    {kPaper, 1, t1024s, kPlain, true},
                        {kPaper, 1, t1024, kTied, true},    {kPaper, 1, t1024, kFront, true},
                        {{64, 37}, 1, t17, kPlain, true},   {{64, 37}, 1, t17a, kTied, true},
                        {{136, 301}, 1, t300, kPlain, true}, {{136, 301}, 1, t40, kNaN, true},
                        {{136, 301}, 1, t17, kTied, true},  {kPaper, 2, t1024, kPlain, false},
                        {{2560, 301}, 1, t17, kPlain, false}};
  for (const Case& c : cases) {
    Layer L = make_layer(rng, c.R, c.s.d, c.s.F, DType::bf16);
    if (c.shape == kTied) tie_gate_rows(L);
    if (c.shape == kNaN)
      for (int j : {0, 5, 100, 300})
        std::fill_n(L.wg.begin() + static_cast<std::ptrdiff_t>(j) * L.d, L.d, std::numeric_limits<float>::quiet_NaN());
    if (c.shape == kFront)  // channels [0, 600) with gate rows 8x larger: the first blocks keep all of theirs
      for (std::size_t i = 0; i < static_cast<std::size_t>(600) * L.d; ++i) L.wg[i] = bf16_to_f32(f32_to_bf16(8.f * L.wg[i]));
    upload_layer(*gpu, *cpu, L);
    const char* shapes[] = {"", " tied", " NaN rows", " front-loaded"};
    const std::string what = sel_str(&c.sel) + " rows " + std::to_string(c.R) + " d " + std::to_string(c.s.d) +
                             " d_ffn " + std::to_string(c.s.F) + shapes[c.shape];
    SCOPED_TRACE(what);
    cuda::ffn::Problem p = launch_problem(L);
    p.kind = cuda::ffn::SelKind::topk;
    p.k = c.sel.k;
    p.rule = c.sel.rule;
    EXPECT_EQ(cuda::ffn::norm_inside(p), c.ring);
    EXPECT_EQ(cuda::ffn::uses_zeroed(p), c.ring);
    const int kept = c.sel.kept(L.F);
    auto [ws, bytes] = launch_workspace(*gpu, p);
    std::vector<float> outs[2];
    std::vector<std::int32_t> idx[2];
    for (int ring = 0; ring < 2; ++ring) {
      cuda::ffn::Options opt;
      opt.topk_ring = ring == 1;
      ASSERT_TRUE(cuda::ffn::fast_path(p, opt));
      Tensor ig = poisoned_idx(*gpu, L.R, kept);
      p.idx_out = ig.data<std::uint16_t>();
      outs[ring] = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
      idx[ring] = gpu->download_i32(ig);
    }
    expect_same_selection("ring against the kernels", idx[1], idx[0], host_gate(L), L.R, L.F, c.sel);
    if (c.shape == kTied) {
      for (int i = 0; i < kept; ++i) {
        ASSERT_EQ(idx[1][static_cast<std::size_t>(i)], i) << "ties go to the lower channels";
      }
    }
    if (c.shape == kNaN) {
      for (std::int32_t j : idx[1]) {
        EXPECT_TRUE(j != 0 && j != 5 && j != 100 && j != 300) << "NaN kept";
      }
    }
    if (idx[1] == idx[0]) expect_same_out("ring against the kernels", outs[1], outs[0], L.out0, L.dt);
    if (!c.ring) continue;
    // 0: the default slots, without idx_out; 8 + s: s slots with Options::topk_ring_spec on (the kept list in key
    // order, its first rows copied before the threshold is known: the same channels, the down projection summed in
    // another order)
    for (int v : {0, 1, 2, 4, 8, 9}) {
      const int slots = v & 7;
      SCOPED_TRACE("slots " + std::to_string(slots) + (slots ? ", idx_out" : ", no idx_out") +
                   (v & 8 ? ", kept list in key order" : ""));
      cuda::ffn::Options opt;
      opt.topk_ring_slots = slots;
      opt.topk_ring_spec = (v & 8) != 0;
      Tensor ig = poisoned_idx(*gpu, L.R, kept);
      p.idx_out = slots ? ig.data<std::uint16_t>() : nullptr;
      const std::vector<float> o = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
      if (slots) {
        EXPECT_EQ(gpu->download_i32(ig), idx[1]);
      }
      expect_same_out("against the first ring call", o, outs[1], L.out0, L.dt);
    }
  }
#endif
}

// The L2 prefetch hints (Options::prefetch: 2:8's kept rows from the gate kernel, top-K's from the selection
// kernel, the dense up/down's first rows; Options::topk_ring_prefetch: the top-K ring's likely kept rows) only warm
// L2: every setting gives the output of none, up to the order of the fp32 atomics. 2:8 and top-K at one row (the
// rings) and several, the 1b layer and an odd one.
TEST(GpuFfnDecode, PrefetchHintsChangeNoResult) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto st = static_cast<cudaStream_t>(gpu->stream());
  struct Case {
    Size s;
    int R;
    bool grouped;
  };
  const Case cases[] = {{kPaper, 1, true},      {kPaper, 4, true},      {{136, 301}, 1, true}, {{136, 301}, 3, true},
                        {kPaper, 1, false},     {kPaper, 4, false},     {{136, 301}, 1, false}};
  for (const Case& c : cases) {
    Layer L = make_layer(rng, c.R, c.s.d, c.s.F, DType::bf16);
    upload_layer(*gpu, *cpu, L);
    SCOPED_TRACE(std::string(c.grouped ? "2:8" : "top-K") + " rows " + std::to_string(c.R) + " d_ffn " +
                 std::to_string(c.s.F));
    cuda::ffn::Problem p = launch_problem(L);
    if (c.grouped) {
      p.kind = cuda::ffn::SelKind::grouped;
      p.group_a = 2;
      p.group_b = 8;
    } else {
      p.kind = cuda::ffn::SelKind::topk;
      p.k = c.s.F > 1024 ? 1024 : 17;
    }
    auto [ws, bytes] = launch_workspace(*gpu, p);
    std::vector<float> none;
    for (int pf : {0, 4, 7, 8}) {  // 8: Options::topk_ring_prefetch on (off in the others)
      SCOPED_TRACE("prefetch " + std::to_string(pf));
      cuda::ffn::Options opt;
      opt.prefetch = pf & 7;
      opt.topk_ring_prefetch = pf == 8;
      ASSERT_TRUE(cuda::ffn::fast_path(p, opt));
      const std::vector<float> out = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
      if (none.empty()) none = out;
      else expect_same_out("against no prefetch", out, none, L.out0, L.dt);
    }
  }
#endif
}

// Options::dense_ring_l2_ahead (the dense ring's items past its slots warmed into L2 before its first slot wait; -1:
// by the device's DRAM bandwidth) is a hint: every count -- none, some, more than the block has -- gives the output of
// none, up to the order of the fp32 atomics. Rows 1-2 at the 1b layer (18 items a block: 14 past its 4 slots), and
// d 136 / d_ffn 301 (2-3 channels a block: fewer items than slots).
TEST(GpuFfnDecode, DenseRingL2WarmAheadChangesNoResult) {
  MOC_GPU_OR_SKIP(gpu);
#ifdef MOCBENCH_HAVE_CUDA
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto st = static_cast<cudaStream_t>(gpu->stream());
  struct Case {
    Size s;
    int R;
  };
  const Case cases[] = {{kPaper, 1}, {kPaper, 2}, {{136, 301}, 1}};
  for (const Case& c : cases) {
    Layer L = make_layer(rng, c.R, c.s.d, c.s.F, DType::bf16);
    upload_layer(*gpu, *cpu, L);
    SCOPED_TRACE("rows " + std::to_string(c.R) + " d_ffn " + std::to_string(c.s.F));
    cuda::ffn::Problem p = launch_problem(L);
    ASSERT_TRUE(cuda::ffn::norm_inside(p));  // the ring's path
    auto [ws, bytes] = launch_workspace(*gpu, p);
    std::vector<float> none;
    for (int ahead : {0, 1, 4, 64, -1}) {
      SCOPED_TRACE("l2 ahead " + std::to_string(ahead));
      cuda::ffn::Options opt;
      opt.dense_ring_l2_ahead = ahead;
      const std::vector<float> out = launch_out(*gpu, L, p, ws.raw(), bytes, st, opt);
      if (none.empty()) none = out;
      else expect_same_out("against no warm-ahead", out, none, L.out0, L.dt);
    }
  }
#endif
}

TEST(GpuFfnDecode, RejectsBadArguments) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  Layer L = make_layer(rng, 2, 64, 37, DType::bf16);
  upload_layer(*gpu, *cpu, L);
  Tensor out = gpu->empty({2, 64}, DType::bf16, workspace_tag());
  Tensor bad_out = gpu->empty({2, 63}, DType::bf16, workspace_tag());
  Tensor f32_out = gpu->empty({2, 64}, DType::f32, workspace_tag());
  MocSelect sel{17, 0, 0, SelectRule::gate};
  MocSelect too_many{38, 0, 0, SelectRule::gate};
  MocSelect bad_group{0, 9, 8, SelectRule::gate};
  Tensor idx_wrong = gpu->empty({2, 16}, DType::i16, workspace_tag());
  EXPECT_THROW(gpu->ffn_decode(L.xg, L.gw(), nullptr, bad_out), std::invalid_argument);
  EXPECT_THROW(gpu->ffn_decode(L.xg, L.gw(), nullptr, f32_out), std::invalid_argument);
  EXPECT_THROW(gpu->ffn_decode(L.xg, {&L.wgg, &L.wug, nullptr}, nullptr, out), std::invalid_argument);
  EXPECT_THROW(gpu->ffn_decode(L.xg, L.gw(), &too_many, out), std::invalid_argument);
  EXPECT_THROW(gpu->ffn_decode(L.xg, L.gw(), &bad_group, out), std::invalid_argument);
  EXPECT_THROW(gpu->ffn_decode(L.xg, L.gw(), &sel, out, nullptr, &idx_wrong), std::invalid_argument);
  EXPECT_THROW(gpu->ffn_decode(L.xg, L.gw(), &sel, out, nullptr, nullptr, kFfnUpDown), std::invalid_argument);
  EXPECT_THROW(gpu->ffn_decode(L.xg, L.gw(), nullptr, out, nullptr, &idx_wrong), std::invalid_argument);
}

}  // namespace
}  // namespace moc
