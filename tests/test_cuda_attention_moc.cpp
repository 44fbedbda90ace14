// CUDA attention (forward, backward, decode) and MoC ops (selection, gather/scatter, sparse down projection)
// against the CPU backend on fresh random odd-size inputs with poisoned outputs, f32 and bf16.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "op_harness.h"
#include "test_util.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cudnn_sdpa.h"  // GpuAttention: which path ran
#endif
// GCC 12 at -O3 can warn -Wrestrict inside std::string's operator+ (a known false positive, GCC PR 105651):
// whether it fires depends on the size of this file, not on the line it names.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/raft_topk.h"
#endif

namespace moc {
namespace {
using namespace moc::test;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct HeadCfg {
  int h, kvh;
  const char* name;
};
constexpr HeadCfg kHeadCfgs[] = {{4, 4, "MHA"}, {6, 2, "GQA"}, {4, 1, "MQA"}};
constexpr int kSeqLens[] = {1, 7, 33, 130};
constexpr int kHeadDims[] = {8, 64, 128};
constexpr DType kDtypes[] = {DType::f32, DType::bf16};

std::string case_name(DType dt, const HeadCfg& hc, int s, int hd) {
  std::ostringstream os;
  os << dtype_name(dt) << " " << hc.name << " h" << hc.h << "/kv" << hc.kvh << " s" << s << " hd" << hd;
  return os.str();
}

// Forward of one case on both backends: out and lse against the CPU's.
void check_forward(Ops& gpu, Ops& cpu, std::mt19937& rng, DType dt, int b, int s, int h, int kvh, int hd,
                   const std::string& name) {
  SCOPED_TRACE(name);
  auto q = twin_rand(gpu, cpu, rng, {b, s, h, hd}, dt);
  auto k = twin_rand(gpu, cpu, rng, {b, s, kvh, hd}, dt);
  auto v = twin_rand(gpu, cpu, rng, {b, s, kvh, hd}, dt);
  auto out = twin_poison(gpu, cpu, {b, s, h, hd}, dt);
  auto lse = twin_poison(gpu, cpu, {b, h, s}, DType::f32);
  gpu.attention_forward(q.g, k.g, v.g, out.g, lse.g);
  cpu.attention_forward(q.c, k.c, v.c, out.c, lse.c);
  expect_close(name + " out", gpu, out.g, cpu, out.c, op_tol(dt));
  expect_close(name + " lse", gpu, lse.g, cpu, lse.c, 1e-5);
}

// Backward of one case: both backends get the CPU's forward results, so the backward is checked on its own.
void check_backward(Ops& gpu, Ops& cpu, std::mt19937& rng, DType dt, int b, int s, int h, int kvh, int hd,
                    const std::string& name) {
  SCOPED_TRACE(name);
  auto q = twin_rand(gpu, cpu, rng, {b, s, h, hd}, dt);
  auto k = twin_rand(gpu, cpu, rng, {b, s, kvh, hd}, dt);
  auto v = twin_rand(gpu, cpu, rng, {b, s, kvh, hd}, dt);
  auto dout = twin_rand(gpu, cpu, rng, {b, s, h, hd}, dt);
  Tensor out_c = cpu.empty({b, s, h, hd}, dt, workspace_tag());
  Tensor lse_c = cpu.empty({b, h, s}, DType::f32, workspace_tag());
  cpu.attention_forward(q.c, k.c, v.c, out_c, lse_c);
  auto out = twin(gpu, cpu, {b, s, h, hd}, dt, cpu.download_f32(out_c));
  auto lse = twin(gpu, cpu, {b, h, s}, DType::f32, cpu.download_f32(lse_c));
  auto dq = twin_poison(gpu, cpu, {b, s, h, hd}, dt);
  auto dk = twin_poison(gpu, cpu, {b, s, kvh, hd}, dt);
  auto dv = twin_poison(gpu, cpu, {b, s, kvh, hd}, dt);
  gpu.attention_backward(q.g, k.g, v.g, out.g, lse.g, dout.g, dq.g, dk.g, dv.g);
  cpu.attention_backward(q.c, k.c, v.c, out.c, lse.c, dout.c, dq.c, dk.c, dv.c);
  // s = 1: dq and dk are exactly zero (one key: dp == D), the GPU leaves ~1e-7 of rounding noise.
  expect_close(name + " dq", gpu, dq.g, cpu, dq.c, op_tol(dt), 1e-5);
  expect_close(name + " dk", gpu, dk.g, cpu, dk.c, op_tol(dt), 1e-5);
  expect_close(name + " dv", gpu, dv.g, cpu, dv.c, op_tol(dt), 1e-5);
}

// bf16 runs on cuDNN's fused SDPA when the build has it (and cuDNN takes the shape), f32 on our kernels.
TEST(GpuAttention, ForwardMatchesCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (DType dt : kDtypes)
    for (const auto& hc : kHeadCfgs)
      for (int s : kSeqLens)
        for (int hd : kHeadDims) check_forward(*gpu, *cpu, rng, dt, 2, s, hc.h, hc.kvh, hd, case_name(dt, hc, s, hd));
}

TEST(GpuAttention, BackwardMatchesCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (DType dt : kDtypes)
    for (const auto& hc : kHeadCfgs)
      for (int s : kSeqLens)
        for (int hd : kHeadDims) check_backward(*gpu, *cpu, rng, dt, 2, s, hc.h, hc.kvh, hd, case_name(dt, hc, s, hd));
}

// ---- GpuAttention: the cuDNN SDPA path (kernels/cuda/cudnn_sdpa.cpp) and MOCBENCH_ATTN=own

// Sets MOCBENCH_ATTN while alive (nullptr: unset) and restores what was there.
class AttnPathEnv {
 public:
  explicit AttnPathEnv(const char* value) {
    if (const char* old = std::getenv("MOCBENCH_ATTN")) saved_ = old, had_ = true;
    if (value) setenv("MOCBENCH_ATTN", value, 1);
    else unsetenv("MOCBENCH_ATTN");
  }
  ~AttnPathEnv() {
    if (had_) setenv("MOCBENCH_ATTN", saved_.c_str(), 1);
    else unsetenv("MOCBENCH_ATTN");
  }
  AttnPathEnv(const AttnPathEnv&) = delete;
  AttnPathEnv& operator=(const AttnPathEnv&) = delete;

 private:
  std::string saved_;
  bool had_ = false;
};

[[maybe_unused]] bool cudnn_sdpa_in_build() {
#ifdef MOCBENCH_HAVE_CUDA
  return cuda::cudnn_sdpa_built();
#else
  return false;
#endif
}

// Forward then backward on the GPU's own forward results (as in training), against the CPU doing the same.
void check_training_chain(Ops& gpu, Ops& cpu, std::mt19937& rng, DType dt, int b, int s, int h, int kvh, int hd,
                          const std::string& name) {
  SCOPED_TRACE(name);
  auto q = twin_rand(gpu, cpu, rng, {b, s, h, hd}, dt);
  auto k = twin_rand(gpu, cpu, rng, {b, s, kvh, hd}, dt);
  auto v = twin_rand(gpu, cpu, rng, {b, s, kvh, hd}, dt);
  auto dout = twin_rand(gpu, cpu, rng, {b, s, h, hd}, dt);
  auto out = twin_poison(gpu, cpu, {b, s, h, hd}, dt);
  auto lse = twin_poison(gpu, cpu, {b, h, s}, DType::f32);
  auto dq = twin_poison(gpu, cpu, {b, s, h, hd}, dt);
  auto dk = twin_poison(gpu, cpu, {b, s, kvh, hd}, dt);
  auto dv = twin_poison(gpu, cpu, {b, s, kvh, hd}, dt);
  gpu.attention_forward(q.g, k.g, v.g, out.g, lse.g);
  gpu.attention_backward(q.g, k.g, v.g, out.g, lse.g, dout.g, dq.g, dk.g, dv.g);
  cpu.attention_forward(q.c, k.c, v.c, out.c, lse.c);
  cpu.attention_backward(q.c, k.c, v.c, out.c, lse.c, dout.c, dq.c, dk.c, dv.c);
  expect_close(name + " out", gpu, out.g, cpu, out.c, op_tol(dt));
  expect_close(name + " lse", gpu, lse.g, cpu, lse.c, 1e-5);
  expect_close(name + " dq", gpu, dq.g, cpu, dq.c, op_tol(dt), 1e-5);
  expect_close(name + " dk", gpu, dk.g, cpu, dk.c, op_tol(dt), 1e-5);
  expect_close(name + " dv", gpu, dv.g, cpu, dv.c, op_tol(dt), 1e-5);
}

// The models' attention shapes in bf16 at batch 2: 1b (32 heads of 64, seq 256), 350m (16 heads), a GQA group
// of 4 (1b-gqa) and an odd sequence (37). With cuDNN in the build these run on it: the dispatch is checked,
// so a benchmark of this build times cuDNN and not a silent fallback.
TEST(GpuAttention, Bf16TrainingShapesMatchCpuAndRunOnCudnn) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  AttnPathEnv path(nullptr);
  struct Case {
    int s, h, kvh;
  };
  for (const Case& c : {Case{256, 32, 32}, Case{256, 16, 16}, Case{256, 32, 8}, Case{37, 32, 32}, Case{37, 32, 8}}) {
    std::ostringstream os;
    os << "bf16 b2 s" << c.s << " h" << c.h << "/kv" << c.kvh << " hd64";
#ifdef MOCBENCH_HAVE_CUDA
    const auto before = cuda::cudnn_sdpa_runs();
#endif
    check_training_chain(*gpu, *cpu, rng, DType::bf16, 2, c.s, c.h, c.kvh, 64, os.str());
#ifdef MOCBENCH_HAVE_CUDA
    if (cudnn_sdpa_in_build()) {
      const auto after = cuda::cudnn_sdpa_runs();
      EXPECT_EQ(after.forward, before.forward + 1) << os.str() << ": the forward did not run on cuDNN";
      EXPECT_EQ(after.backward, before.backward + 1) << os.str() << ": the backward did not run on cuDNN";
    }
#endif
  }
}

// MOCBENCH_ATTN=own: bf16 runs on our kernels again (for comparison), and they still match the CPU.
TEST(GpuAttention, OwnKernelsWhenForcedMatchCpuInBf16) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  AttnPathEnv path("own");
#ifdef MOCBENCH_HAVE_CUDA
  const auto before = cuda::cudnn_sdpa_runs();
#endif
  const DType dt = DType::bf16;
  for (const auto& hc : kHeadCfgs)
    for (int s : {7, 130})
      for (int hd : kHeadDims) {
        const std::string name = case_name(dt, hc, s, hd) + " (own)";
        check_forward(*gpu, *cpu, rng, dt, 2, s, hc.h, hc.kvh, hd, name);
        check_backward(*gpu, *cpu, rng, dt, 2, s, hc.h, hc.kvh, hd, name);
      }
  check_training_chain(*gpu, *cpu, rng, dt, 2, 256, 32, 8, 64, "bf16 b2 s256 h32/kv8 hd64 (own)");
#ifdef MOCBENCH_HAVE_CUDA
  const auto after = cuda::cudnn_sdpa_runs();
  EXPECT_EQ(after.forward, before.forward);
  EXPECT_EQ(after.backward, before.backward);
#endif
}

// ---- GpuAttention: decode

// Caches [b, kvh, T, hd] random at positions <= pos[i] and NaN beyond (must never be read).
std::vector<float> cache_values(std::mt19937& rng, int b, int kvh, int T, int hd, const std::vector<std::int32_t>& pos) {
  std::vector<float> v = randn(rng, static_cast<std::size_t>(b) * kvh * T * hd);
  for (int bi = 0; bi < b; ++bi)
    for (int kh = 0; kh < kvh; ++kh)
      for (int t = pos[static_cast<std::size_t>(bi)] + 1; t < T; ++t)
        std::fill_n(v.begin() + ((static_cast<std::ptrdiff_t>(bi) * kvh + kh) * T + t) * hd, hd, kNaN);
  return v;
}

TEST(GpuAttention, DecodeMatchesCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // head_dim 8 / 64 / 128: the one-kernel cluster path (1 .. 8 splits; T 1000: several tiles per warp);
  // 24: the split + combine kernels (rows that are no power-of-two number of 16-byte words).
  for (DType dt : kDtypes)
    for (const auto& hc : kHeadCfgs)
      for (int hd : {8, 24, 64, 128})
        for (int b : {1, 3})
          for (int T : {1, 37, 301, 1000}) {
            std::vector<std::int32_t> pos(static_cast<std::size_t>(b));
            std::uniform_int_distribution<int> pick(0, T - 1);
            for (auto& p : pos) p = pick(rng);
            pos[0] = T - 1;  // the full cache
            if (b > 1) pos[1] = 0;  // a single key
            std::ostringstream os;
            os << case_name(dt, hc, T, hd) << " b" << b << " pos";
            for (auto p : pos) os << " " << p;
            const std::string name = os.str();
            SCOPED_TRACE(name);
            auto q = twin_rand(*gpu, *cpu, rng, {b, hc.h, hd}, dt);
            auto kc = twin(*gpu, *cpu, {b, hc.kvh, T, hd}, dt, cache_values(rng, b, hc.kvh, T, hd, pos));
            auto vc = twin(*gpu, *cpu, {b, hc.kvh, T, hd}, dt, cache_values(rng, b, hc.kvh, T, hd, pos));
            Tensor pg = gpu->empty({b}, DType::i32, workspace_tag()), pc = cpu->empty({b}, DType::i32, workspace_tag());
            gpu->upload_i32(pg, pos);
            cpu->upload_i32(pc, pos);
            auto out = twin_poison(*gpu, *cpu, {b, hc.h, hd}, dt);
            gpu->attention_decode(q.g, kc.g, vc.g, pg, out.g);
            cpu->attention_decode(q.c, kc.c, vc.c, pc, out.c);
            expect_close(name + " out", *gpu, out.g, *cpu, out.c, op_tol(dt));
          }
}

// The 1b model's decode shape (32 heads of 64, no GQA, cache of 256, bf16) at batch 1..4, positions of the
// generated half, and a GQA group of 4.
TEST(GpuAttention, DecodeMatchesCpuAtTheModelShape) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int hd = 64, T = 256;
  const DType dt = DType::bf16;
  for (int kvh : {32, 8})
    for (int b : {1, 2, 4}) {
      const int h = 32;
      std::vector<std::int32_t> pos(static_cast<std::size_t>(b));
      std::uniform_int_distribution<int> pick(128, T - 1);
      for (auto& p : pos) p = pick(rng);
      SCOPED_TRACE("kvh " + std::to_string(kvh) + " b " + std::to_string(b));
      auto q = twin_rand(*gpu, *cpu, rng, {b, h, hd}, dt);
      auto kc = twin(*gpu, *cpu, {b, kvh, T, hd}, dt, cache_values(rng, b, kvh, T, hd, pos));
      auto vc = twin(*gpu, *cpu, {b, kvh, T, hd}, dt, cache_values(rng, b, kvh, T, hd, pos));
      Tensor pg = gpu->empty({b}, DType::i32, workspace_tag()), pc = cpu->empty({b}, DType::i32, workspace_tag());
      gpu->upload_i32(pg, pos);
      cpu->upload_i32(pc, pos);
      auto out = twin_poison(*gpu, *cpu, {b, h, hd}, dt);
      gpu->attention_decode(q.g, kc.g, vc.g, pg, out.g);
      cpu->attention_decode(q.c, kc.c, vc.c, pc, out.c);
      expect_close("out", *gpu, out.g, *cpu, out.c, op_tol(dt));
    }
}

// A captured decode step reads the positions on the device: replays follow pos as the graph advances it.
TEST(GpuAttention, DecodeGraphReplayFollowsDevicePositions) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int b = 3, h = 8, kvh = 2, hd = 64, T = 515;
  const DType dt = DType::bf16;
  std::vector<std::int32_t> pos = {126, 127, 300};
  std::vector<std::int32_t> last = {T - 1, T - 1, T - 1};
  auto q = twin_rand(*gpu, *cpu, rng, {b, h, hd}, dt);
  auto kc = twin(*gpu, *cpu, {b, kvh, T, hd}, dt, cache_values(rng, b, kvh, T, hd, last));
  auto vc = twin(*gpu, *cpu, {b, kvh, T, hd}, dt, cache_values(rng, b, kvh, T, hd, last));
  Tensor pg = gpu->empty({b}, DType::i32, workspace_tag());
  gpu->upload_i32(pg, pos);
  Tensor out_g = poisoned(*gpu, {b, h, hd}, dt);
  auto graph = gpu->capture([&] {
    gpu->attention_decode(q.g, kc.g, vc.g, pg, out_g);
    gpu->increment(pg, 1);
  });
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("replay " + std::to_string(step));
    gpu->fill(out_g, kNaN);
    graph->replay();
    Tensor pc = cpu->empty({b}, DType::i32, workspace_tag());
    std::vector<std::int32_t> now = pos;
    for (auto& p : now) p += step;
    cpu->upload_i32(pc, now);
    Tensor out_c = cpu->empty({b, h, hd}, dt, workspace_tag());
    cpu->attention_decode(q.c, kc.c, vc.c, pc, out_c);
    expect_close("decode replay", *gpu, out_g, *cpu, out_c, op_tol(dt));
  }
  EXPECT_EQ(gpu->download_i32(pg), (std::vector<std::int32_t>{pos[0] + 3, pos[1] + 3, pos[2] + 3}));
}

TEST(GpuAttention, RejectsBadArguments) {
  MOC_GPU_OR_SKIP(gpu);
  Tensor q = gpu->empty({1, 3, 4, 160}, DType::f32, workspace_tag());
  Tensor k = gpu->empty({1, 3, 2, 160}, DType::f32, workspace_tag());
  Tensor out = gpu->empty({1, 3, 4, 160}, DType::f32, workspace_tag());
  Tensor lse = gpu->empty({1, 4, 3}, DType::f32, workspace_tag());
  EXPECT_THROW(gpu->attention_forward(q, k, k, out, lse), std::invalid_argument);  // head_dim above 128
  Tensor q2 = gpu->empty({1, 3, 3, 64}, DType::f32, workspace_tag());
  Tensor k2 = gpu->empty({1, 3, 2, 64}, DType::f32, workspace_tag());
  Tensor out2 = gpu->empty({1, 3, 3, 64}, DType::f32, workspace_tag());
  Tensor lse2 = gpu->empty({1, 3, 3}, DType::f32, workspace_tag());
  EXPECT_THROW(gpu->attention_forward(q2, k2, k2, out2, lse2), std::invalid_argument);  // 2 kv heads, 3 heads
}

// ---------------------------------------------------------------- MoC selection

enum class Fill { distinct, ties, nans };

std::vector<float> select_input(std::mt19937& rng, Fill fill, int rows, int F) {
  std::vector<float> g = randn(rng, static_cast<std::size_t>(rows) * F, 2.0f);
  if (fill == Fill::ties) {
    // A small set with repeated values, both zeros and both infinities.
    const float set[] = {-2.0f, -1.0f, -0.5f, -0.0f, 0.0f, 0.5f, 1.0f, 2.0f, -kInf, kInf, 3.0f};
    std::uniform_int_distribution<int> pick(0, 10);
    for (auto& x : g) x = set[pick(rng)];
  } else if (fill == Fill::nans) {
    std::bernoulli_distribution nan(0.2);
    for (auto& x : g)
      if (nan(rng)) x = kNaN;
    std::fill_n(g.begin(), F, kNaN);  // a row of NaN only
    if (rows > 1) std::fill_n(g.begin() + F, F / 2, kNaN);
  }
  return g;
}

const char* fill_name(Fill f) { return f == Fill::distinct ? "distinct" : f == Fill::ties ? "ties" : "nans"; }
const char* rule_name(SelectRule r) {
  return r == SelectRule::gate ? "gate" : r == SelectRule::silu ? "silu" : "abs_silu";
}

// g is [rows, F] (F columns; sel.width, when set, limits the channels that compete).
void expect_same_selection(Ops& gpu, Ops& cpu, const std::vector<float>& g, int rows, int F, DType dt,
                           const MocSelect& sel, const std::string& name) {
  SCOPED_TRACE(name);
  const int kept = sel.kept(static_cast<int>(sel.channels(F)));
  auto gt = twin(gpu, cpu, {rows, F}, dt, g);
  Tensor ig = gpu.empty({rows, kept}, DType::i16, workspace_tag());
  Tensor ic = cpu.empty({rows, kept}, DType::i16, workspace_tag());
  std::vector<std::uint16_t> poison(static_cast<std::size_t>(rows) * kept, 0xFFFFu);
  gpu.upload(ig, poison.data());
  gpu.moc_select(gt.g, sel, ig);
  MocSelect cpu_sel = sel;
  cpu_sel.backend = TopkBackend::own;  // the CPU has only its own (the reference)
  cpu.moc_select(gt.c, cpu_sel, ic);
  const auto got = gpu.download_i32(ig), want = cpu.download_i32(ic);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      const std::size_t r = i / static_cast<std::size_t>(kept), j = i % static_cast<std::size_t>(kept);
      ADD_FAILURE() << name << ": row " << r << " slot " << j << ": gpu " << got[i] << ", cpu " << want[i]
                    << " (g[cpu pick] = " << g[r * static_cast<std::size_t>(F) + static_cast<std::size_t>(want[i])]
                    << ")";
      return;
    }
}

TEST(GpuMoc, SelectMatchesCpuExactly) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Case {
    int F, rows;
  };
  for (const Case c : {Case{5461, 19}, Case{37, 23}})
    for (Fill fill : {Fill::distinct, Fill::ties, Fill::nans}) {
      const auto g = select_input(rng, fill, c.rows, c.F);
      for (SelectRule rule : {SelectRule::gate, SelectRule::silu, SelectRule::abs_silu}) {
        std::vector<MocSelect> sels = {{1, 0, 0, rule}, {17, 0, 0, rule}, {c.F, 0, 0, rule}, {0, 2, 8, rule}};
        if (c.F > 1024) {
          sels.push_back({1024, 0, 0, rule});
          sels.push_back({0, 100, 300, rule});  // large groups: one block per group, partial last group of 61
        } else {
          sels.push_back({0, 5, 13, rule});
          sels.push_back({0, 3, 64, rule});  // a single partial group
        }
        for (const auto& sel : sels) {
          std::ostringstream os;
          os << "F" << c.F << " " << fill_name(fill) << " " << rule_name(rule) << " ";
          if (sel.grouped()) os << sel.group_a << ":" << sel.group_b;
          else os << "K" << sel.k;
          expect_same_selection(*gpu, *cpu, g, c.rows, c.F, DType::f32, sel, os.str());
        }
      }
    }
}

TEST(GpuMoc, SelectMatchesCpuOnBf16AndWideRows) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (Fill fill : {Fill::distinct, Fill::ties, Fill::nans}) {
    // bf16 g: many exact ties among the rounded values.
    const auto g = select_input(rng, fill, 9, 5461);
    for (SelectRule rule : {SelectRule::gate, SelectRule::silu})
      for (const MocSelect& sel : {MocSelect{1024, 0, 0, rule}, MocSelect{0, 2, 8, rule}})
        expect_same_selection(*gpu, *cpu, g, 9, 5461, DType::bf16, sel,
                              std::string("bf16 ") + fill_name(fill) + " " + rule_name(rule));
    // Rows wider than the shared-memory key buffer.
    const int F = 30011;
    const auto w = select_input(rng, fill, 3, F);
    for (const MocSelect& sel : {MocSelect{17, 0, 0, SelectRule::gate}, MocSelect{6000, 0, 0, SelectRule::abs_silu},
                                 MocSelect{0, 7000, 20000, SelectRule::gate}})
      expect_same_selection(*gpu, *cpu, w, 3, F, DType::f32, sel,
                            std::string("wide ") + fill_name(fill) + " " + rule_name(sel.rule));
  }
}

TEST(GpuMoc, SelectRejectsBadArguments) {
  MOC_GPU_OR_SKIP(gpu);
  Tensor g = gpu->empty({3, 37}, DType::f32, workspace_tag());
  Tensor idx32 = gpu->empty({3, 5}, DType::i32, workspace_tag());
  EXPECT_THROW(gpu->moc_select(g, {5, 0, 0, SelectRule::gate}, idx32), std::invalid_argument);
  Tensor idx = gpu->empty({3, 5}, DType::i16, workspace_tag());
  EXPECT_THROW(gpu->moc_select(g, {6, 0, 0, SelectRule::gate}, idx), std::invalid_argument);
  EXPECT_THROW(gpu->moc_select(g, {38, 0, 0, SelectRule::gate}, idx), std::invalid_argument);
}

bool raft_built() {
#ifdef MOCBENCH_HAVE_CUDA
  return cuda::raft_available();
#else
  return false;
#endif
}

// Rows of distinct values, exact in bf16 (F consecutive positive bf16 bit patterns from a random start,
// shuffled, random signs): every correct top-K of such a row (ours, the CPU's, RAFT's) is the same set.
std::vector<float> tie_free_rows(std::mt19937& rng, int rows, int F) {
  std::vector<float> g(static_cast<std::size_t>(rows) * F);
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(F));
  std::uniform_int_distribution<int> start(0x3a00, 0x3e00);
  std::bernoulli_distribution negative(0.5);
  for (int r = 0; r < rows; ++r) {
    const int s = start(rng);
    for (int i = 0; i < F; ++i) bits[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(s + i);
    std::shuffle(bits.begin(), bits.end(), rng);
    for (int i = 0; i < F; ++i) {
      const std::uint32_t u = (static_cast<std::uint32_t>(bits[static_cast<std::size_t>(i)]) << 16) |
                              (negative(rng) ? 0x80000000u : 0u);
      float x;
      std::memcpy(&x, &u, sizeof x);
      g[static_cast<std::size_t>(r) * F + static_cast<std::size_t>(i)] = x;
    }
  }
  return g;
}

// The training shapes at reduced row counts, odd widths (misaligned rows), K from 1 to F, every width class of
// the row kernels (1 to 8 vectors of 16 bytes per thread) and the first width past them (the radix kernel).
struct TopkCase {
  int rows, F, K;
};
constexpr TopkCase kTopkCases[] = {{300, 5461, 1024}, {300, 1376, 256}, {300, 1377, 256},  {200, 2048, 384},
                                   {200, 2736, 512},  {37, 5461, 5460}, {37, 5461, 1},     {37, 1377, 1377},
                                   {23, 3, 2},        {23, 8000, 1500}, {9, 16000, 3000},  {5, 16377, 17},
                                   {5, 16378, 17}};

std::string topk_case_name(const TopkCase& c, DType dt, const char* fill, SelectRule rule) {
  return std::string(dtype_name(dt)) + " " + std::to_string(c.rows) + "x" + std::to_string(c.F) + " K" +
         std::to_string(c.K) + " " + fill + " " + rule_name(rule);
}

TEST(GpuMoc, RowTopKMatchesCpuAtTheTrainingShapes) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const TopkCase& c : kTopkCases)
    for (DType dt : kDtypes) {
      if (dt == DType::f32 && c.F > 8200) continue;  // f32 rows that wide are the radix kernel's (covered above)
      const auto distinct = tie_free_rows(rng, c.rows, c.F);
      const auto ties = select_input(rng, Fill::ties, c.rows, c.F);
      for (SelectRule rule : {SelectRule::gate, SelectRule::silu}) {
        const MocSelect sel{c.K, 0, 0, rule};
        expect_same_selection(*gpu, *cpu, distinct, c.rows, c.F, dt, sel, topk_case_name(c, dt, "distinct", rule));
        expect_same_selection(*gpu, *cpu, ties, c.rows, c.F, dt, sel, topk_case_name(c, dt, "ties", rule));
      }
    }
}

// Rows of ld columns of which the first F compete (the model pads d_ffn to 8 columns): the padding holds +inf
// and NaN, and is never selected; row top-K (row kernels and radix kernel) and a:b (small and large groups).
TEST(GpuMoc, SelectIgnoresPaddingChannels) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const int F : {5461, 1377, 16371}) {
    const int ld = (F + 7) / 8 * 8, rows = 19;
    std::vector<float> g = select_input(rng, Fill::distinct, rows, ld);
    for (int r = 0; r < rows; ++r)
      for (int c = F; c < ld; ++c)
        g[static_cast<std::size_t>(r) * ld + static_cast<std::size_t>(c)] = c % 2 ? kInf : kNaN;
    for (DType dt : kDtypes)
      for (MocSelect sel : {MocSelect{1024, 0, 0, SelectRule::gate}, MocSelect{17, 0, 0, SelectRule::abs_silu},
                            MocSelect{0, 2, 8, SelectRule::gate}, MocSelect{0, 100, 300, SelectRule::gate}}) {
        sel.width = F;
        const std::string what = std::string(dtype_name(dt)) + " F" + std::to_string(F) + " of " + std::to_string(ld) +
                                 (sel.grouped() ? " a:b " + std::to_string(sel.group_b) : " K" + std::to_string(sel.k));
        expect_same_selection(*gpu, *cpu, g, rows, ld, dt, sel, what);
      }
  }
}

// a:8 on 16-byte aligned groups (the padded training layout) has its own one-thread-per-group kernel: same
// ranking and tie rule as the CPU on tie-heavy and tie-free rows, every rule, with and without padding channels.
TEST(GpuMoc, GroupsOfEightOnAlignedRowsMatchTheCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const int F : {5461, 5464, 13})
    for (const Fill fill : {Fill::distinct, Fill::ties, Fill::nans}) {
      const int ld = (F + 7) / 8 * 8, rows = 23;
      const std::vector<float> g = select_input(rng, fill, rows, ld);
      for (DType dt : kDtypes)
        for (const int a : {2, 3, 8})
          for (SelectRule rule : {SelectRule::gate, SelectRule::silu, SelectRule::abs_silu}) {
            MocSelect sel{0, a, 8, rule};
            sel.width = F;
            expect_same_selection(*gpu, *cpu, g, rows, ld, dt, sel,
                                  std::string(dtype_name(dt)) + " F" + std::to_string(F) + " a" + std::to_string(a) +
                                      " " + fill_name(fill));
          }
    }
}

// RAFT's select_k behind TopkBackend::raft picks the same channels as the CPU (hence as ours) on tie-free rows.
TEST(GpuMoc, RaftSelectsTheSameChannelsOnTieFreeRows) {
  MOC_GPU_OR_SKIP(gpu);
  if (!raft_built()) GTEST_SKIP() << "the CUDA backend was built without RAFT (scripts/setup_raft.sh)";
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const TopkCase& c : kTopkCases)
    for (DType dt : kDtypes) {
      if (c.F > 8200) continue;
      const auto distinct = tie_free_rows(rng, c.rows, c.F);
      // silu maps the large negative values to -0: ties, but only below the threshold when K < F / 3.
      for (SelectRule rule : {SelectRule::gate, SelectRule::silu, SelectRule::abs_silu}) {
        if (rule != SelectRule::gate && 3 * c.K >= c.F) continue;
        expect_same_selection(*gpu, *cpu, distinct, c.rows, c.F, dt, MocSelect{c.K, 0, 0, rule, TopkBackend::raft},
                              "raft " + topk_case_name(c, dt, "distinct", rule));
      }
    }
  // Padding channels: RAFT sees only the first F columns.
  const int F = 1377, ld = 1384, rows = 31;
  std::vector<float> g = tie_free_rows(rng, rows, ld);
  for (int r = 0; r < rows; ++r)
    for (int c = F; c < ld; ++c) g[static_cast<std::size_t>(r) * ld + static_cast<std::size_t>(c)] = 1e30f;
  for (DType dt : kDtypes)
    for (SelectRule rule : {SelectRule::gate, SelectRule::silu}) {
      MocSelect sel{256, 0, 0, rule, TopkBackend::raft};
      sel.width = F;
      expect_same_selection(*gpu, *cpu, g, rows, ld, dt, sel,
                            std::string("raft padded ") + std::string(dtype_name(dt)) + " " + rule_name(rule));
    }
}

// The raft backend applies to the row top-K only (a:b groups run our kernel, exactly the CPU's even with
// ties); without RAFT in the build it is an error that says how to get it.
TEST(GpuMoc, RaftBackendIsRowTopKOnly) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto ties = select_input(rng, Fill::ties, 19, 5461);
  for (DType dt : kDtypes)
    for (const MocSelect& sel : {MocSelect{0, 2, 8, SelectRule::gate, TopkBackend::raft},
                                 MocSelect{0, 100, 300, SelectRule::silu, TopkBackend::raft}})
      expect_same_selection(*gpu, *cpu, ties, 19, 5461, dt, sel, "raft a:b " + std::string(dtype_name(dt)));
  if (!raft_built()) {
    Tensor g = gpu->empty({3, 37}, DType::f32, workspace_tag());
    Tensor idx = gpu->empty({3, 5}, DType::i16, workspace_tag());
    try {
      gpu->moc_select(g, {5, 0, 0, SelectRule::gate, TopkBackend::raft}, idx);
      ADD_FAILURE() << "moc_select with the raft backend did not throw in a build without RAFT";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("setup_raft.sh"), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------- gather / scatter / sparse down projection

// Selected channels of random gates, computed on the CPU, as host values.
std::vector<std::int32_t> random_selection(Ops& cpu, std::mt19937& rng, int rows, int F, const MocSelect& sel) {
  Tensor g = random_tensor(cpu, rng, {rows, F});
  Tensor idx = cpu.empty({rows, sel.kept(F)}, DType::i16, workspace_tag());
  cpu.moc_select(g, sel, idx);
  return cpu.download_i32(idx);
}

TEST(GpuMoc, GatherScatterMatchCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int rows = 19;
  // 5464: 16-byte aligned rows (the padded training layout); 30000: f32 rows past the shared-memory row path.
  for (int F : {37, 5461, 5464, 30000})
    for (const MocSelect& sel : {MocSelect{17, 0, 0, SelectRule::gate}, MocSelect{0, 2, 8, SelectRule::gate}})
      for (DType src_dt : kDtypes)
        for (DType dst_dt : kDtypes) {
          const int K = sel.kept(F);
          const std::string name = "F" + std::to_string(F) + " K" + std::to_string(K) + " " +
                                   std::string(dtype_name(src_dt)) + "->" + std::string(dtype_name(dst_dt));
          SCOPED_TRACE(name);
          const auto ix = random_selection(*cpu, rng, rows, F, sel);
          Tensor ig = upload_idx16(*gpu, ix, {rows, K}), ic = upload_idx16(*cpu, ix, {rows, K});
          auto src = twin_rand(*gpu, *cpu, rng, {rows, F}, src_dt);
          auto gathered = twin_poison(*gpu, *cpu, {rows, K}, dst_dt);
          gpu->gather_cols(src.g, ig, gathered.g);
          cpu->gather_cols(src.c, ic, gathered.c);
          expect_same_values(name + " gather", *gpu, gathered.g, *cpu, gathered.c);
          auto compact = twin_rand(*gpu, *cpu, rng, {rows, K}, src_dt);
          auto dense = twin_poison(*gpu, *cpu, {rows, F}, dst_dt);
          gpu->scatter_cols(compact.g, ig, dense.g);
          cpu->scatter_cols(compact.c, ic, dense.c);
          expect_same_values(name + " scatter", *gpu, dense.g, *cpu, dense.c);
        }
}

void check_sparse_rows_matmul(Ops& gpu, Ops& cpu, std::mt19937& rng, int rows, int F, const MocSelect& sel, int d,
                              DType dt) {
  const int K = sel.kept(F);
  const auto ix = random_selection(cpu, rng, rows, F, sel);
  Tensor ig = upload_idx16(gpu, ix, {rows, K}), ic = upload_idx16(cpu, ix, {rows, K});
  auto z = twin_rand(gpu, cpu, rng, {rows, K}, dt);
  auto w = twin_rand(gpu, cpu, rng, {F, d}, dt, 0.05f);
  for (float beta : {0.0f, 1.0f}) {
    const std::string name = "rows " + std::to_string(rows) + " F" + std::to_string(F) + " K" + std::to_string(K) +
                             " d" + std::to_string(d) + " " + std::string(dtype_name(dt)) +
                             " beta " + std::to_string(beta);
    SCOPED_TRACE(name);
    auto out = beta == 0.0f ? twin_poison(gpu, cpu, {rows, d}, dt) : twin_rand(gpu, cpu, rng, {rows, d}, dt);
    gpu.sparse_rows_matmul(z.g, ig, w.g, out.g, beta);
    cpu.sparse_rows_matmul(z.c, ic, w.c, out.c, beta);
    expect_close(name + " out", gpu, out.g, cpu, out.c, op_tol(dt));
  }
  const std::string name = "backward rows " + std::to_string(rows) + " F" + std::to_string(F) + " K" +
                           std::to_string(K) + " d" + std::to_string(d) + " " + std::string(dtype_name(dt));
  SCOPED_TRACE(name);
  auto dout = twin_rand(gpu, cpu, rng, {rows, d}, dt);
  auto dz = twin_poison(gpu, cpu, {rows, K}, dt);
  auto dw = twin_rand(gpu, cpu, rng, {F, d}, dt, 0.1f);  // accumulated into
  gpu.sparse_rows_matmul_backward(dout.g, z.g, ig, w.g, dz.g, dw.g);
  cpu.sparse_rows_matmul_backward(dout.c, z.c, ic, w.c, dz.c, dw.c);
  expect_close(name + " dz", gpu, dz.g, cpu, dz.c, op_tol(dt));
  expect_close(name + " dw", gpu, dw.g, cpu, dw.c, op_tol(dt));
}

TEST(GpuMoc, SparseRowsMatmulAndBackwardMatchCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (DType dt : kDtypes)
    for (int rows : {1, 19})
      for (int F : {37, 5461})
        for (const MocSelect& sel : {MocSelect{17, 0, 0, SelectRule::gate}, MocSelect{0, 2, 8, SelectRule::gate}})
          for (int d : {65, 129}) check_sparse_rows_matmul(*gpu, *cpu, rng, rows, F, sel, d, dt);
}

// Enough rows that the dense workspace is split into chunks (and bf16 dW accumulates in an fp32 workspace).
TEST(GpuMoc, SparseRowsMatmulManyRowsInChunks) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (DType dt : kDtypes) check_sparse_rows_matmul(*gpu, *cpu, rng, 6203, 5461, {17, 0, 0, SelectRule::gate}, 65, dt);
}

// Timings for the notes, not a check: run with --gtest_also_run_disabled_tests --gtest_filter='GpuPerf.*'.
TEST(GpuPerf, DISABLED_MocAndAttentionTimings) {
  MOC_GPU_OR_SKIP(gpu);
  std::mt19937 rng(fresh_seed());
  auto median_us = [&](const std::function<void()>& fn) {
    fn();
    gpu->synchronize();
    std::vector<double> t;
    for (int r = 0; r < 15; ++r) t.push_back(gpu->timed(fn) * 1e6);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const int n = 16384, F = 5461, K = 1024, d = 2048;
  for (DType dt : kDtypes) {
    Tensor g = random_tensor(*gpu, rng, {n, F}, 1.0f, dt);
    Tensor idx = gpu->empty({n, K}, DType::i16, workspace_tag());
    const double bytes = static_cast<double>(n) * F * static_cast<double>(dtype_bytes(dt));
    for (SelectRule rule : {SelectRule::gate, SelectRule::silu}) {
      const double us = median_us([&] { gpu->moc_select(g, {K, 0, 0, rule}, idx); });
      std::printf("moc_select %dx%d K%d %s %s: %.1f us (%.0f GB/s)\n", n, F, K, std::string(dtype_name(dt)).c_str(),
                  rule_name(rule), us, bytes / us * 1e-3);
    }
    const MocSelect s28{0, 2, 8, SelectRule::gate};
    Tensor idx28 = gpu->empty({n, s28.kept(F)}, DType::i16, workspace_tag());
    const double us = median_us([&] { gpu->moc_select(g, s28, idx28); });
    std::printf("moc_select %dx%d 2:8 %s: %.1f us (%.0f GB/s)\n", n, F, std::string(dtype_name(dt)).c_str(), us,
                bytes / us * 1e-3);
  }
  {
    const DType dt = DType::bf16;
    Tensor g = random_tensor(*gpu, rng, {n, F}, 1.0f, dt);
    Tensor idx = gpu->empty({n, K}, DType::i16, workspace_tag());
    gpu->moc_select(g, {K, 0, 0, SelectRule::gate}, idx);
    Tensor z = random_tensor(*gpu, rng, {n, K}, 1.0f, dt);
    Tensor w = random_tensor(*gpu, rng, {F, d}, 0.05f, dt);
    Tensor out = gpu->empty({n, d}, dt, workspace_tag());
    const double fl = 2.0 * n * F * d;  // dense-equivalent GEMM flops
    double us = median_us([&] { gpu->sparse_rows_matmul(z, idx, w, out, 0.0f); });
    std::printf("sparse_rows_matmul %dx%d (K%d) x %dx%d bf16: %.1f us (%.0f dense TFLOP/s)\n", n, F, K, F, d, us,
                fl / us * 1e-6);
    Tensor dout = random_tensor(*gpu, rng, {n, d}, 1.0f, dt);
    Tensor dz = gpu->empty({n, K}, dt, workspace_tag());
    Tensor dw = gpu->empty({F, d}, dt, workspace_tag());
    gpu->fill(dw, 0.0f);
    us = median_us([&] { gpu->sparse_rows_matmul_backward(dout, z, idx, w, dz, dw); });
    std::printf("sparse_rows_matmul_backward bf16: %.1f us (%.0f dense TFLOP/s)\n", us, 2 * fl / us * 1e-6);
  }
  for (int hd : {64, 128}) {
    const int b = 4, s = 2048, h = 2048 / hd, kvh = h / 4;
    const DType dt = DType::bf16;
    Tensor q = random_tensor(*gpu, rng, {b, s, h, hd}, 1.0f, dt);
    Tensor k = random_tensor(*gpu, rng, {b, s, kvh, hd}, 1.0f, dt);
    Tensor v = random_tensor(*gpu, rng, {b, s, kvh, hd}, 1.0f, dt);
    Tensor out = gpu->empty({b, s, h, hd}, dt, workspace_tag());
    Tensor lse = gpu->empty({b, h, s}, DType::f32, workspace_tag());
    const double fl = 4.0 * b * h * static_cast<double>(s) * s * hd / 2;  // causal
    double us = median_us([&] { gpu->attention_forward(q, k, v, out, lse); });
    std::printf("attention_forward b%d s%d h%d kvh%d hd%d bf16: %.1f us (%.1f TFLOP/s)\n", b, s, h, kvh, hd, us,
                fl / us * 1e-6);
    Tensor dq = gpu->empty({b, s, h, hd}, dt, workspace_tag());
    Tensor dk = gpu->empty({b, s, kvh, hd}, dt, workspace_tag());
    Tensor dv = gpu->empty({b, s, kvh, hd}, dt, workspace_tag());
    us = median_us([&] { gpu->attention_backward(q, k, v, out, lse, out, dq, dk, dv); });
    std::printf("attention_backward: %.1f us (%.1f TFLOP/s at 2.5x forward flops)\n", us, 2.5 * fl / us * 1e-6);
  }
  for (int b : {1, 4}) {
    const int h = 32, kvh = 8, hd = 128, T = 4096;
    const DType dt = DType::bf16;
    Tensor q = random_tensor(*gpu, rng, {b, h, hd}, 1.0f, dt);
    Tensor kc = random_tensor(*gpu, rng, {b, kvh, T, hd}, 1.0f, dt);
    Tensor vc = random_tensor(*gpu, rng, {b, kvh, T, hd}, 1.0f, dt);
    Tensor pos = gpu->empty({b}, DType::i32, workspace_tag());
    gpu->upload_i32(pos, std::vector<std::int32_t>(static_cast<std::size_t>(b), T - 1));
    Tensor out = gpu->empty({b, h, hd}, dt, workspace_tag());
    auto graph = gpu->capture([&] { gpu->attention_decode(q, kc, vc, pos, out); });
    const double us = median_us([&] { graph->replay(); });
    const double bytes = 2.0 * b * kvh * T * hd * 2;
    std::printf("attention_decode b%d h%d kvh%d hd%d pos %d bf16 (graph): %.1f us (%.0f GB/s)\n", b, h, kvh, hd,
                T - 1, us, bytes / us * 1e-3);
  }
}

}  // namespace
}  // namespace moc
