// The persistent decode step (Ops::decode_step on the GPU: one cooperative kernel) against its CPU twin (the
// composed ops of the CPU backend) under the GPU's MoC selections: tiny and 1b-layer shapes with odd d_ffn
// (37, 5461), batch 1, 3 and 4, dense / MoC top-K / MoC 2:8, logits poisoned before every step. Then many
// graph-replayed persistent steps against step-by-step decoding of the kernel path, and the FFN part alone
// (Ops::ffn_decode_layers) against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "gpu_util.h"
#include "model/decoder.h"
#include "profiling/tracer.h"
#include "model/transformer.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;
using moc::testing::impose_selection;

struct StepCase {
  const char* name;
  const char* preset;
  int hidden, d_ffn, heads, kv_heads, layers, vocab, k;
};

ModelConfig config_of(const StepCase& c, const char* ffn, std::uint32_t seed) {
  ModelConfig cfg = preset(c.preset);
  apply_override(cfg, "ffn", ffn);
  cfg.hidden = c.hidden;
  cfg.d_ffn = c.d_ffn;
  cfg.heads = c.heads;
  cfg.kv_heads = c.kv_heads;
  cfg.layers = c.layers;
  cfg.vocab = c.vocab;
  cfg.ffn.k = c.k;
  cfg.seed = seed;
  cfg.init_std = c.hidden >= 1024 ? 0.02f : 0.2f;
  cfg.param_dtype = cfg.act_dtype = DType::bf16;
  return cfg;
}

// Each row of a recorded selection: `kept` distinct channels below d_ffn, ascending; a:b keeps a per group.
void expect_valid_selection(const std::vector<std::int32_t>& idx, int rows, const ModelConfig& cfg) {
  const MocSelect sel = cfg.ffn.selection();
  const int kept = sel.kept(cfg.d_ffn);
  ASSERT_EQ(idx.size(), static_cast<std::size_t>(rows) * kept);
  for (int r = 0; r < rows; ++r) {
    const auto* row = idx.data() + static_cast<std::ptrdiff_t>(r) * kept;
    for (int i = 0; i < kept; ++i) {
      ASSERT_GE(row[i], 0);
      ASSERT_LT(row[i], cfg.d_ffn);
      if (i) {
        ASSERT_LT(row[i - 1], row[i]) << "row " << r << " not ascending at " << i;
      }
    }
    if (sel.grouped()) {
      std::vector<int> per_group((cfg.d_ffn + sel.group_b - 1) / sel.group_b, 0);
      for (int i = 0; i < kept; ++i) ++per_group[static_cast<std::size_t>(row[i] / sel.group_b)];
      for (std::size_t g = 0; g < per_group.size(); ++g)
        EXPECT_EQ(per_group[g], std::min(sel.group_a, cfg.d_ffn - static_cast<int>(g) * sel.group_b)) << "group " << g;
    }
  }
}

class GpuDecodeStep : public ::testing::TestWithParam<std::tuple<StepCase, const char*, int>> {};

TEST_P(GpuDecodeStep, PersistentStepMatchesTheCpuTwinUnderOneSelection) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto [c, ffn, batch] = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const ModelConfig cfg = config_of(c, ffn, seed);
  Transformer mg(*gpu, cfg), mc(*cpu, cfg);
  mg.prepare_decode(DecodeImpl::persistent);
  mc.prepare_decode(DecodeImpl::persistent);  // the CPU runs Ops::decode_step's composed ops
  const int S = 9, P = 4, V = cfg.vocab;
  Decoder dg(mg, batch, S), dc(mc, batch, S);
  for (int l = 0; l < cfg.layers; ++l) mg.ffn(l).set_record_selection(true);
  auto ids = random_ids(rng, static_cast<std::size_t>(batch) * S, V);
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < batch; ++i) prompt.insert(prompt.end(), ids.begin() + i * S, ids.begin() + i * S + P);
  dg.prefill(prompt, P);
  impose_selection(mg, *gpu, mc, *cpu);  // the prompt's selections too: the caches must hold the same K/V
  dc.prefill(prompt, P);
  std::vector<std::int32_t> step(static_cast<std::size_t>(batch), 0);
  const Tensor* logits = nullptr;
  for (int t = P; t < S; ++t) {
    for (int i = 0; i < batch; ++i) step[static_cast<std::size_t>(i)] = ids[static_cast<std::size_t>(i * S + t)];
    if (logits) gpu->fill(const_cast<Tensor&>(*logits), std::numeric_limits<float>::quiet_NaN());
    logits = &dg.step(step);
    const auto lg = gpu->download_f32(*logits);
    if (cfg.ffn.kind == FfnKind::moc)
      for (int l = 0; l < cfg.layers; ++l) expect_valid_selection(gpu->download_i32(mg.ffn(l).selected()), batch, cfg);
    impose_selection(mg, *gpu, mc, *cpu);
    const auto lc = cpu->download_f32(dc.step(step));
    for (float v : lg) ASSERT_TRUE(std::isfinite(v)) << "a logit was not written at position " << t;
    EXPECT_LT(rel_err(lg, lc), 2e-2) << "decode logits at position " << t;
  }
}

const StepCase kTiny{"tiny_dffn37", "tiny-gqa", 64, 37, 8, 2, 3, 96, 9};
const StepCase kLayer1b{"layer1b_dffn5461", "1b-gqa", 2048, 5461, 32, 8, 1, 512, 1024};

INSTANTIATE_TEST_SUITE_P(Shapes, GpuDecodeStep,
                         ::testing::Combine(::testing::Values(kTiny, kLayer1b),
                                            ::testing::Values("dense", "moc", "moc_2:8"), ::testing::Values(1, 3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<StepCase, const char*, int>>& i) {
                           std::string n = std::string(std::get<0>(i.param).name) + "_" + std::get<1>(i.param) +
                                           "_batch" + std::to_string(std::get<2>(i.param));
                           std::replace(n.begin(), n.end(), ':', 'x');
                           return n;
                         });

// Greedy generation with the persistent step captured once and replayed equals step-by-step decoding of the
// kernel path fed the same tokens: at every step the kernel path's logits agree and its argmax is the token
// the persistent step chose (unless the top two are closer than the two paths' rounding differs). MoC: the
// two paths round the residual stream differently, so a channel near the K-th (or, in 2:8, near the 2nd of
// its group of 8) may be selected by one path only, and that moves a logit by more than rounding; a few such
// steps are allowed (seen on an H100 in about half the runs for 2:8 at this tiny d_ffn), most must agree.
// Under one selection the paths are compared exactly by the GpuDecodeStep tests above.
TEST(GpuDecodeStepGraph, ReplayedPersistentStepsFollowTheKernelPath) {
  MOC_GPU_OR_SKIP(gpu);
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  for (const char* ffn : {"dense", "moc_2:8", "moc"}) {
    SCOPED_TRACE(ffn);
    const ModelConfig cfg = config_of(kTiny, ffn, seed);
    Transformer m(*gpu, cfg);
    m.prepare_decode(DecodeImpl::persistent);
    const int batch = 3, P = 3, n_new = 12, V = cfg.vocab;
    const std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    Decoder a(m, batch, P + n_new);
    const auto gen = a.generate(prompt, P, n_new, /*use_graph=*/true);
    m.prepare_decode(DecodeImpl::kernels);
    Decoder b(m, batch, P + n_new);
    Tensor plog = b.prefill(prompt, P);
    const auto pl = gpu->download_f32(plog);
    std::vector<std::vector<float>> logits(batch);
    for (int i = 0; i < batch; ++i)
      logits[static_cast<std::size_t>(i)].assign(pl.begin() + (static_cast<std::ptrdiff_t>(i) * P + P - 1) * V,
                                                 pl.begin() + (static_cast<std::ptrdiff_t>(i) * P + P) * V);
    int checked = 0, far = 0;
    const bool moc = std::string(ffn) != "dense";
    for (int t = 0; t < n_new; ++t) {
      std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
      for (int i = 0; i < batch; ++i) {
        const auto& lg = logits[static_cast<std::size_t>(i)];
        const int chosen = gen[static_cast<std::size_t>(i)][static_cast<std::size_t>(t)];
        const int best = static_cast<int>(std::max_element(lg.begin(), lg.end()) - lg.begin());
        if (best != chosen) {
          // Only a near tie may go either way (the paths round the residual stream differently, and MoC's
          // selection follows from it).
          float scale = 0;
          for (float v : lg) scale = std::max(scale, std::fabs(v));
          const float gap = lg[static_cast<std::size_t>(best)] - lg[static_cast<std::size_t>(chosen)];
          if (moc) far += gap >= 0.05f * scale;
          else
            EXPECT_LT(gap, 0.05f * scale) << "row " << i << " token " << t << ": kernel path " << best << ", persistent "
                                          << chosen;
        } else {
          ++checked;
        }
        next[static_cast<std::size_t>(i)] = chosen;
      }
      if (t + 1 == n_new) break;
      const auto lg = gpu->download_f32(b.step(next));
      for (int i = 0; i < batch; ++i)
        logits[static_cast<std::size_t>(i)].assign(lg.begin() + static_cast<std::ptrdiff_t>(i) * V,
                                                   lg.begin() + static_cast<std::ptrdiff_t>(i + 1) * V);
    }
    EXPECT_GT(checked, batch * n_new * 2 / 3);
    EXPECT_LE(far, batch * n_new / 6) << "steps where a selection flip moved the argmax";
  }
}

// Device-side stage stamps of the persistent step (dense, MoC top-K, MoC 2:8; 3 layers of the 1b shape,
// batch 1): one stamped launch per step with its blocks; "start", then each layer's stages in order, then
// "head"; the stages tile the launch (each starts where the previous ended) and, moved onto CUPTI's clock,
// end where the kernel record ends and cover most of it (the rest is launch and exit). Off, nothing stamps.
TEST(GpuDecodeStepStamps, StagesOfEveryLayerInOrderTileTheKernel) {
  MOC_GPU_OR_SKIP(gpu);
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  StepCase c = kLayer1b;
  c.layers = 3;
  const std::map<std::string, std::vector<std::string>> expected = {
      {"dense", {"qkv", "attention", "o", "gate & up", "down"}},
      {"moc", {"qkv", "attention", "o", "gate", "top-K", "up", "down"}},
      {"moc_2:8", {"qkv", "attention", "o", "gate", "up", "down"}}};
  for (const auto& [ffn, per_layer] : expected) {
    SCOPED_TRACE(ffn);
    const ModelConfig cfg = config_of(c, ffn.c_str(), seed);
    Transformer m(*gpu, cfg);
    m.prepare_decode(DecodeImpl::persistent);
    Decoder dec(m, 1, 8);
    dec.prefill({1, 2, 3}, 3);
    std::uint64_t dropped = 0;
    dec.step({4});
    gpu->synchronize();
    EXPECT_TRUE(gpu->take_stamps(&dropped).empty()) << "stamping is off";
    std::string why;
    auto tracer = prof::make_cupti_tracer(&why);
    ASSERT_TRUE(tracer) << why;
    gpu->set_stamping(true);
    tracer->enable();
    tracer->begin_step();
    dec.step({5});
    gpu->synchronize();
    tracer->end_step();
    auto launches = gpu->take_stamps(&dropped);
    gpu->set_stamping(false);
    EXPECT_EQ(dropped, 0u);
    ASSERT_EQ(launches.size(), 1u);
    const StampedLaunch& l = launches[0];
    EXPECT_EQ(l.kernel, "k_step");
    EXPECT_GT(l.blocks, 0);
    std::vector<std::string> want = {"start"};
    for (int layer = 0; layer < c.layers; ++layer) want.insert(want.end(), per_layer.begin(), per_layer.end());
    want.push_back("head");
    ASSERT_EQ(l.stages.size(), want.size());
    std::int64_t at = l.start_ns;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const auto& st = l.stages[i];
      EXPECT_EQ(st.stage, want[i]) << "stage " << i;
      const int layer = i == 0 || i + 1 == want.size() ? -1 : static_cast<int>((i - 1) / per_layer.size());
      EXPECT_EQ(st.layer, layer) << "stage " << i;
      EXPECT_EQ(st.start_ns, at) << "stage " << i << " starts where the previous ended";
      EXPECT_GE(st.end_ns, st.start_ns);
      EXPECT_GE(st.wait_ns, 0);
      at = st.end_ns;
    }
    EXPECT_EQ(at, l.end_ns);
    tracer->add_stamps(std::move(launches), dropped);
    const prof::ProfileTrace t = tracer->finish({});
    std::vector<const prof::KernelRecord*> ks;
    for (const auto& k : t.kernels)
      if (k.short_name == "k_step") ks.push_back(&k);
    ASSERT_EQ(ks.size(), 1u);
    ASSERT_EQ(t.stages.size(), want.size());
    EXPECT_EQ(t.stages.back().end_ns, ks[0]->end_ns);
    const double covered = static_cast<double>(t.stages.back().end_ns - t.stages.front().start_ns);
    const double kernel = static_cast<double>(ks[0]->end_ns - ks[0]->start_ns);
    std::printf("%s: %zu stages cover %.1f of the kernel record's %.1f us\n", ffn.c_str(), t.stages.size(),
                covered / 1e3, kernel / 1e3);
    EXPECT_LE(covered, kernel * 1.01);
    EXPECT_GE(covered, kernel * 0.85);
  }
}

// The kernel path (one kernel per op, chained with PDL, replayed from a graph): the decode FFN's own kernels
// stamp themselves -- k_gate ("gate"), k_select ("top-K"), k_updown ("gate & up" or "up", then "down") --
// from their first block past its dependency wait to their last block's end, one launch per kernel per
// layer in order, each inside its CUPTI record and ending where it ends (to the stamp's alignment).
TEST(GpuDecodeStepStamps, KernelPathFfnKernelsStampTheirWorkAfterTheirWait) {
  MOC_GPU_OR_SKIP(gpu);
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  StepCase c = kLayer1b;
  c.layers = 3;
  const std::map<std::string, std::vector<std::pair<std::string, std::vector<std::string>>>> expected = {
      {"dense", {{"k_updown", {"gate & up", "down"}}}},
      {"moc", {{"k_gate", {"gate"}}, {"k_select", {"top-K"}}, {"k_updown", {"up", "down"}}}}};
  for (const auto& [ffn, per_layer] : expected) {
    SCOPED_TRACE(ffn);
    const ModelConfig cfg = config_of(c, ffn.c_str(), seed);
    Transformer m(*gpu, cfg);
    m.prepare_decode(DecodeImpl::kernels);
    Decoder dec(m, 1, 8);
    dec.prefill({1, 2, 3}, 3);
    dec.step({4});
    std::string why;
    auto tracer = prof::make_cupti_tracer(&why);
    ASSERT_TRUE(tracer) << why;
    auto graph = dec.capture_step();
    graph->replay();  // warm
    dec.advance();
    gpu->synchronize();
    std::uint64_t dropped = 0;
    EXPECT_TRUE(gpu->take_stamps(&dropped).empty()) << "stamping is off";
    gpu->set_stamping(true);
    tracer->enable();
    tracer->begin_step();
    graph->replay();
    gpu->synchronize();
    tracer->end_step();
    auto launches = gpu->take_stamps(&dropped);
    gpu->set_stamping(false);
    EXPECT_EQ(dropped, 0u);
    ASSERT_EQ(launches.size(), per_layer.size() * static_cast<std::size_t>(c.layers));
    for (std::size_t i = 0; i < launches.size(); ++i) {
      SCOPED_TRACE(i);
      const auto& l = launches[i];
      const auto& want = per_layer[i % per_layer.size()];
      EXPECT_EQ(l.kernel, want.first);
      ASSERT_EQ(l.stages.size(), want.second.size());
      std::int64_t at = l.start_ns;
      for (std::size_t s = 0; s < want.second.size(); ++s) {
        EXPECT_EQ(l.stages[s].stage, want.second[s]);
        EXPECT_EQ(l.stages[s].start_ns, at);
        EXPECT_GE(l.stages[s].end_ns, l.stages[s].start_ns);
        at = l.stages[s].end_ns;
      }
      EXPECT_EQ(at, l.end_ns);
      if (i > 0) {
        EXPECT_GE(l.start_ns, launches[i - 1].end_ns) << "a stamped launch starts after its predecessor ended";
      }
    }
    tracer->add_stamps(std::move(launches), dropped);
    const prof::ProfileTrace t = tracer->finish({});
    std::map<std::string, std::vector<const prof::KernelRecord*>> recs;
    for (const auto& k : t.kernels) recs[k.short_name].push_back(&k);
    const auto owner = prof::stage_kernels(t);
    ASSERT_EQ(owner.size(), t.stages.size());
    std::size_t placed = 0;
    for (std::size_t i = 0; i < t.stages.size(); ++i) {
      ASSERT_GE(owner[i], 0) << t.stages[i].kernel << " stage without its record";
      const auto& k = t.kernels[static_cast<std::size_t>(owner[i])];
      EXPECT_GE(t.stages[i].start_ns, k.start_ns) << k.short_name;
      EXPECT_LE(t.stages[i].end_ns, k.end_ns) << k.short_name;
      ++placed;
    }
    EXPECT_EQ(placed, t.stages.size());
    for (const auto& [name, stages] : per_layer) EXPECT_EQ(recs[name].size(), static_cast<std::size_t>(c.layers)) << name;
  }
}

// The FFN part alone over several layers (ffn-decode's persistent variant) against the CPU's ffn_decode per
// layer: out += sum_l FFN_l(x), out poisoned nowhere (it accumulates) but every column must change.
TEST(GpuDecodeStepFfn, FfnLayersMatchTheCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (int F : {37, 5461}) {
    for (int rows : {1, 4}) {
      for (int mode = 0; mode < 3; ++mode) {
        SCOPED_TRACE(::testing::Message() << "d_ffn " << F << " rows " << rows << " mode " << mode);
        const int d = F > 100 ? 2048 : 64, L = 3;
        MocSelect sel;
        if (mode == 1) sel.k = F > 100 ? 1024 : 9;
        if (mode == 2) {
          sel.group_a = 2;
          sel.group_b = 8;
        }
        auto make = [&](Ops& o, const std::vector<float>& h, const Shape& s) {
          Tensor t = o.empty(s, DType::bf16, workspace_tag());
          o.upload_f32(t, h);
          return t;
        };
        const float wstd = 1.0f / std::sqrt(static_cast<float>(d));
        const auto hx = randn(rng, static_cast<std::size_t>(rows) * d), hout = randn(rng, static_cast<std::size_t>(rows) * d);
        std::vector<std::vector<float>> hw;
        for (int i = 0; i < 3 * L; ++i) hw.push_back(randn(rng, static_cast<std::size_t>(F) * d, wstd));
        auto run = [&](Ops& o) {
          Tensor x = make(o, hx, {rows, d}), out = make(o, hout, {rows, d});
          std::vector<Tensor> w;
          for (const auto& h : hw) w.push_back(make(o, h, {F, d}));
          std::vector<DecodeFfnWeights> layers;
          for (int l = 0; l < L; ++l) layers.push_back({&w[3 * l], &w[3 * l + 1], &w[3 * l + 2]});
          o.ffn_decode_layers(x, layers, mode ? &sel : nullptr, out);
          return o.download_f32(out);
        };
        const auto g = run(*gpu), c = run(*cpu);
        for (float v : g) ASSERT_TRUE(std::isfinite(v));
        // A top-K channel at a near tie may differ between the two sums (one of ~1000 channels of one layer).
        EXPECT_LT(rel_err(g, c), mode == 1 ? 2e-2 : 1e-2);
      }
    }
  }
}

}  // namespace
}  // namespace moc
