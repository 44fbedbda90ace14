// The roofline on the CPU: what each decode op declares it must move (kernels/op_cost.h) against the tensor
// sizes it touches, exactly; how a declaration's cost is split among its kernels and set against the device's
// ceilings (profiling/roofline.h); the ceilings cache (app/harness/ceilings.h); the `stats` roofline table; and a
// profiled CPU decode point whose every op carries its declaration, per-position costs included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <unistd.h>

#include "app/harness/ceilings.h"
#include "app/harness/point_bench.h"
#include "app/report/profile_stats.h"
#include "kernels/op_cost.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "profiling/roofline.h"

namespace moc {
namespace {

using prof::KernelRecord;
using prof::ProfileTrace;

// Shapes of the 1b model at decode (d 2048, d_ffn 5461 (odd on purpose), 32 heads of 64, GQA 8 KV heads here)
// with small sizes where the op allows it, in bf16 -- the CPU backend allocates them (never touched).
struct DecodeShapes {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  Tensor empty(const Shape& s, DType t) { return ops->empty(s, t, workspace_tag()); }
};

TEST(OpCost, ProjectionGemvMovesTheWeightAndBothVectors) {
  DecodeShapes s;
  const std::int64_t b = 1, d = 2048, n = 2560;  // q + k + v of a GQA layer, as one matrix
  Tensor x = s.empty({b, d}, DType::bf16), w = s.empty({n, d}, DType::bf16), y = s.empty({b, n}, DType::bf16);
  const OpCost c = cost::gemm(x, false, w, true, y, 0.0f);
  EXPECT_STREQ(c.op, "gemm");
  EXPECT_EQ(c.bytes, 2 * (b * d + n * d + b * n));
  EXPECT_EQ(c.flops, 2 * b * n * d);
  // beta != 0 (the O projection adding into the residual): the output is read too.
  EXPECT_EQ(cost::gemm(x, false, w, true, y, 1.0f).bytes, 2 * (b * d + n * d + 2 * b * n));
  EXPECT_EQ(c.bytes_per_pos, 0);
  EXPECT_FALSE(c.bound);
}

// Ops::decode_qkv (one kernel for RMSNorm, q/k/v, RoPE and the cache write): x and the norm weight in, the
// three projections once, q out and one K and one V row per sequence and KV head into the caches -- what the
// seven composed ops move less their intermediates (xn, k and v round trips).
TEST(OpCost, FusedQkvMovesTheProjectionsOnceAndOneCacheRowPerSequence) {
  DecodeShapes s;
  const std::int64_t b = 2, d = 2048, h = 32, kvh = 8, hd = 64, max_seq = 256;
  Tensor x = s.empty({b, d}, DType::bf16), nw = s.empty({d}, DType::bf16), pos = s.empty({b}, DType::i32);
  Tensor wq = s.empty({h * hd, d}, DType::bf16), wk = s.empty({kvh * hd, d}, DType::bf16),
         wv = s.empty({kvh * hd, d}, DType::bf16);
  Tensor q = s.empty({b, h, hd}, DType::bf16), kc = s.empty({b, kvh, max_seq, hd}, DType::bf16);
  const OpCost c = cost::decode_qkv(x, nw, wq, wk, wv, pos, q, kc);
  EXPECT_STREQ(c.op, "decode_qkv");
  EXPECT_EQ(c.bytes, 2 * b * d + 2 * d + 2 * (h + 2 * kvh) * hd * d + 4 * b + 2 * b * h * hd + 2 * (2 * b * kvh * hd));
  EXPECT_EQ(c.flops, 2 * b * (h + 2 * kvh) * hd * d + 4 * b * d + 6 * (b * h * hd + b * kvh * hd));
  EXPECT_EQ(c.bytes_per_pos, 0);
}

TEST(OpCost, SmallDecodeOpsMoveTheirTensorsOnce) {
  DecodeShapes s;
  const std::int64_t b = 3, d = 2048, h = 32, kvh = 8, hd = 64, max_seq = 256;
  Tensor x = s.empty({b, d}, DType::bf16), w = s.empty({d}, DType::bf16), y = s.empty({b, d}, DType::bf16);
  Tensor rstd = s.empty({b}, DType::f32), pos = s.empty({b}, DType::i32);
  EXPECT_EQ(cost::rmsnorm_forward(x, w, y, rstd).bytes, 2 * b * d + 2 * d + 2 * b * d + 4 * b);
  Tensor q = s.empty({b, h, hd}, DType::bf16);
  EXPECT_EQ(cost::rope(q, pos).bytes, 2 * (2 * b * h * hd) + 4 * b);
  Tensor k = s.empty({b, 1, kvh, hd}, DType::bf16), v = s.empty({b, 1, kvh, hd}, DType::bf16);
  EXPECT_EQ(cost::kv_cache_write(k, v, pos).bytes, 4 * (2 * b * kvh * hd) + 4 * b);
  Tensor kc = s.empty({b, kvh, max_seq, hd}, DType::bf16), out = s.empty({b, h, hd}, DType::bf16);
  const OpCost a = cost::attention_decode(q, kc, pos, out);
  // Fixed: q in, positions, out; per attended position: one K and one V row of every KV head, per sequence.
  EXPECT_EQ(a.bytes, 2 * b * h * hd + 4 * b + 2 * b * h * hd);
  EXPECT_EQ(a.bytes_per_pos, 2 * b * kvh * hd * 2);
  EXPECT_EQ(a.flops_per_pos, 4 * b * h * hd);
  EXPECT_EQ(a.bytes_at(100), a.bytes + 100 * a.bytes_per_pos);
  Tensor logits = s.empty({b, 32000}, DType::f32), next = s.empty({b}, DType::i32);
  EXPECT_EQ(cost::sample(logits, next).bytes, 4 * b * 32000 + 4 * b);
  // Greedy's LM head with the argmax fused: the gemm's bytes and next, the logits not read back.
  Tensor head = s.empty({32000, d}, DType::bf16);
  const OpCost lh = cost::lm_head_argmax(x, head, logits, next);
  EXPECT_STREQ(lh.op, "lm_head_argmax");
  EXPECT_EQ(lh.bytes, 2 * b * d + 2 * 32000 * d + 4 * b * 32000 + 4 * b);
  EXPECT_EQ(lh.flops, 2 * b * 32000 * d + b * 32000);
  Tensor tok = s.empty({b}, DType::i32), table = s.empty({32000, d}, DType::bf16);
  EXPECT_EQ(cost::embedding_forward(tok, table, x).bytes, 4 * b + 2 * (2 * b * d));  // one row per token
  EXPECT_EQ(cost::add(x, y, x).bytes, 3 * 2 * b * d);
  Tensor cnt = s.empty({1}, DType::i32);
  EXPECT_EQ(cost::increment(cnt).bytes, 8);
}

TEST(OpCost, DecodeFfnPartsReadEachNeededWeightRowOnce) {
  DecodeShapes s;
  const std::int64_t d = 2048, F = 5461, K = 1024;
  Tensor wg = s.empty({F, d}, DType::bf16), wu = s.empty({F, d}, DType::bf16), wd = s.empty({F, d}, DType::bf16);
  const DecodeFfnWeights w{&wg, &wu, &wd};
  MocSelect sel;
  sel.k = static_cast<int>(K);
  for (std::int64_t rows : {1, 4}) {
    SCOPED_TRACE(rows);
    Tensor x = s.empty({rows, d}, DType::bf16);
    // Dense: x in, the three weights, out read and written (the fused kernel; gate and up in one pass).
    const auto dense = cost::ffn_decode_shape(x, w, nullptr);
    EXPECT_EQ(cost::ffn_decode(dense, kFfnAll).bytes, 2 * rows * d + 3 * 2 * F * d + 2 * 2 * rows * d);
    EXPECT_EQ(cost::ffn_decode(dense, kFfnAll).flops, 6 * rows * F * d);
    const auto moc = cost::ffn_decode_shape(x, w, &sel);
    EXPECT_EQ(moc.kept, K);
    const OpCost gate = cost::ffn_decode_gate(moc), select = cost::ffn_decode_select(moc),
                 updown = cost::ffn_decode_up_down(moc);
    EXPECT_EQ(gate.bytes, 2 * rows * d + 2 * F * d + 4 * rows * F);  // g out in fp32
    EXPECT_EQ(select.bytes, 4 * rows * F + 2 * rows * K);            // indices out in i16
    // Up and down: the union of the rows' selections, at most min(d_ffn, rows K) rows of each matrix.
    const std::int64_t u = std::min(F, rows * K);
    EXPECT_EQ(updown.bytes, 2 * rows * d + 6 * rows * K + 2 * 2 * u * d + 2 * 2 * rows * d);
    EXPECT_EQ(updown.bound, rows > 1);  // the union is data-dependent beyond one row
    const OpCost all = cost::ffn_decode(moc, kFfnAll);
    EXPECT_EQ(all.bytes, gate.bytes + select.bytes + updown.bytes);
    EXPECT_EQ(all.flops, gate.flops + select.flops + updown.flops);
    EXPECT_EQ(cost::ffn_decode(moc, kFfnGate).bytes, gate.bytes);
  }
  // The byte floor the paper states for one decode call at batch 1 (§5): weights d d_ffn + 2 K d.
  Tensor x1 = s.empty({1, d}, DType::bf16);
  const auto moc1 = cost::ffn_decode_shape(x1, w, &sel);
  const std::int64_t weights = 2 * (F * d + 2 * K * d);
  const std::int64_t declared = cost::ffn_decode(moc1, kFfnAll).bytes;
  EXPECT_GE(declared, weights);
  EXPECT_LT(static_cast<double>(declared - weights) / static_cast<double>(weights), 0.01);  // activations: < 1%
}

TEST(OpCost, ScopesReachTheSinkOnlyWhileOneListens) {
  struct Sink : CostSink {
    std::vector<std::string> log;
    void push_cost(const OpCost& c) override { log.push_back(std::string("+") + c.op + ":" + std::to_string(c.bytes)); }
    void pop_cost() override { log.push_back("-"); }
  } sink;
  int evaluated = 0;
  auto expensive = [&] {
    ++evaluated;
    return OpCost{"x", 7, 0};
  };
  { MOC_OP_COST(expensive()); }
  EXPECT_EQ(evaluated, 0);  // nobody listening: the cost is never computed
  set_cost_sink(&sink);
  {
    MOC_OP_COST(expensive());
    { MOC_OP_COST(OpCost{"inner", 3, 0}); }
  }
  set_cost_sink(nullptr);
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(sink.log, (std::vector<std::string>{"+x:7", "+inner:3", "-", "-"}));
}

KernelRecord rec(const std::string& name, std::int64_t start, std::int64_t end, std::int64_t call,
                 std::int64_t bytes, std::int64_t flops, int step = 0) {
  KernelRecord k;
  k.name = k.short_name = name;
  k.start_ns = start;
  k.end_ns = end;
  k.device_id = 0;
  k.step = step;
  k.op_call = call;
  k.op_bytes = bytes;
  k.op_flops = flops;
  k.op = bytes >= 0 ? "op_" + name : "";
  return k;
}

TEST(Roofline, ADeclarationIsSplitAmongItsKernelsByTimeAndSetAgainstTheCeilings) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  // gemv: 3000 B in 1000 ns; a two-kernel op (split-K + reduce) sharing 4000 B over 1500 + 500 ns; a GEMM-like
  // kernel with 1e6 FLOPs and 100 B in 1000 ns; an undeclared kernel.
  t.kernels = {rec("gemv", 0, 1000, 0, 3000, 0), rec("splitk", 1000, 2500, 1, 4000, 0),
               rec("reduce", 2500, 3000, 1, 4000, 0), rec("mma", 3000, 4000, 2, 100, 1000000),
               rec("other", 4000, 4200, -1, -1, -1)};
  const prof::Ceilings c{10.0, 2.0};  // 10 bytes/ns, 2000 FLOP/ns
  const auto costs = prof::kernel_costs(t, prof::device_times(t, prof::TimeMode::exclusive).kernels);
  EXPECT_DOUBLE_EQ(costs[1].bytes, 3000);  // 3/4 of the op's time
  EXPECT_DOUBLE_EQ(costs[2].bytes, 1000);
  EXPECT_FALSE(costs[4].declared());
  const prof::Roofline r = prof::roofline(t, c);
  ASSERT_EQ(r.rows.size(), 5u);
  std::map<std::string, prof::RooflineRow> by;
  for (const auto& row : r.rows) by[row.kernel] = row;
  EXPECT_DOUBLE_EQ(by["gemv"].floor_ns, 300);  // 3000 B / 10 B/ns
  EXPECT_DOUBLE_EQ(by["gemv"].lost_ns, 700);
  EXPECT_DOUBLE_EQ(by["gemv"].GBps(), 3.0);
  EXPECT_DOUBLE_EQ(by["mma"].floor_ns, 500);  // FLOP-bound: 1e6 / 2000
  EXPECT_DOUBLE_EQ(by["splitk"].floor_ns, 300);
  EXPECT_DOUBLE_EQ(by["reduce"].floor_ns, 100);
  EXPECT_FALSE(by["other"].declared);
  // Sorted by lost time (declared first), the undeclared kernel last.
  EXPECT_EQ(r.rows.front().kernel, "splitk");  // 1200 lost
  EXPECT_EQ(r.rows.back().kernel, "other");
  EXPECT_DOUBLE_EQ(r.time_ns, 4200);
  EXPECT_DOUBLE_EQ(r.declared_ns, 4000);
  EXPECT_DOUBLE_EQ(r.floor_ns, 300 + 300 + 100 + 500);
  const auto pct = prof::kernel_floor_pct(t, c);
  EXPECT_DOUBLE_EQ(pct[0], 30.0);
  EXPECT_DOUBLE_EQ(pct[3], 50.0);
  EXPECT_TRUE(std::isnan(pct[4]));
  // Unknown ceilings: rates, no floor.
  const prof::Roofline u = prof::roofline(t, {});
  for (const auto& row : u.rows) EXPECT_EQ(row.floor_ns, 0);
  EXPECT_TRUE(std::isnan(prof::kernel_floor_pct(t, {})[0]));
}

TEST(Roofline, ExclusiveTimeGivesAPdlKernelsWaitToItsPredecessor) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 2;
  // Step 0 and 1: a kernel that starts early (PDL) and waits inside its record for the one before it.
  for (int s = 0; s < 2; ++s) {
    const std::int64_t o = 10000 * s;
    t.kernels.push_back(rec("gemv", o, o + 1000, 2 * s, 2000, 0, s));
    t.kernels.push_back(rec("norm", o + 100, o + 1200, 2 * s + 1, 400, 0, s));  // waits 900 ns
  }
  const prof::Roofline ex = prof::roofline(t, {1.0, 1.0});
  const prof::Roofline in = prof::roofline(t, {1.0, 1.0}, prof::TimeMode::inclusive);
  auto row = [](const prof::Roofline& r, const std::string& k) {
    for (const auto& x : r.rows)
      if (x.kernel == k) return x;
    return prof::RooflineRow{};
  };
  EXPECT_DOUBLE_EQ(row(ex, "norm").time_ns, 200);  // per step: its own 200 ns, not the 1100 of its record
  EXPECT_DOUBLE_EQ(row(in, "norm").time_ns, 1100);
  EXPECT_DOUBLE_EQ(row(ex, "norm").bytes, 400);  // per step
  EXPECT_EQ(row(ex, "norm").instances, 2);
}

TEST(RooflineReport, StatsTableShowsRatesPercentsAndTheUndeclared) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  t.kernels = {rec("gemv", 0, 1000, 0, 3000, 0), rec("other", 1000, 1100, -1, -1, -1)};
  t.kernels[0].op_bound = true;
  const stats::Table tb = stats::roofline(t, {10.0, 2.0});
  ASSERT_EQ(tb.rows.size(), 2u);
  auto col = [&](const std::string& name) {
    for (std::size_t i = 0; i < tb.columns.size(); ++i)
      if (tb.columns[i].key == name || tb.columns[i].key.rfind(name + " (", 0) == 0) return i;  // "Of floor (%)"
    ADD_FAILURE() << name;
    return std::size_t{0};
  };
  EXPECT_DOUBLE_EQ(*tb.rows[0][col("GB/s")].value, 3.0);
  EXPECT_DOUBLE_EQ(*tb.rows[0][col("Of bandwidth")].value, 30.0);
  EXPECT_DOUBLE_EQ(*tb.rows[0][col("Of floor")].value, 30.0);
  EXPECT_DOUBLE_EQ(*tb.rows[0][col("Lost per step")].value, 700.0);
  EXPECT_NE(tb.rows[0][col("Op")].text.find("upper bound"), std::string::npos);
  EXPECT_EQ(tb.rows[1][col("Op")].text, "(undeclared)");
  EXPECT_TRUE(tb.rows[1][col("GB/s")].empty());
  // Without ceilings: rates, but no percent or floor.
  const stats::Table nc = stats::roofline(t, {});
  EXPECT_DOUBLE_EQ(*nc.rows[0][col("GB/s")].value, 3.0);
  EXPECT_TRUE(nc.rows[0][col("Of floor")].empty());
}

TEST(Ceilings, CacheRoundTripsPerKeyAndIgnoresDamage) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("mocbench-ceilings-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const char* old = std::getenv("MOCBENCH_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("MOCBENCH_CACHE_DIR", dir.c_str(), 1);
  EXPECT_EQ(ceilings_cache_path(), (dir / "ceilings.tsv").string());
  EXPECT_FALSE(cached_ceilings("gpu|A").has_value());
  DeviceCeilings a{2990.5, 786.25, "bf16", 1234, "measured"};
  ASSERT_TRUE(store_ceilings("gpu|A", a));
  ASSERT_TRUE(store_ceilings("gpu|B\twith tab", {10, 1, "f32", 5, "measured"}));
  const auto got = cached_ceilings("gpu|A");
  ASSERT_TRUE(got.has_value());
  EXPECT_DOUBLE_EQ(got->copy_GBps, 2990.5);
  EXPECT_DOUBLE_EQ(got->gemm_tflops, 786.25);
  EXPECT_EQ(got->gemm_dtype, "bf16");
  EXPECT_EQ(got->measured_unix_ms, 1234);
  EXPECT_EQ(got->source, "cache");
  EXPECT_TRUE(cached_ceilings("gpu|B\twith tab").has_value());
  {  // damage: a garbage line and a truncated one are skipped, the good line still reads
    std::ofstream f(dir / "ceilings.tsv", std::ios::app);
    f << "garbage\n" << "gpu|C\tnot-a-number\t1\tbf16\t0\n" << "gpu|D\t5\n";
  }
  EXPECT_TRUE(cached_ceilings("gpu|A").has_value());
  EXPECT_FALSE(cached_ceilings("gpu|C").has_value());
  EXPECT_FALSE(cached_ceilings("gpu|D").has_value());
  // Measured on the CPU backend: both numbers positive, f32.
  auto ops = make_cpu_ops();
  const DeviceCeilings m = measure_ceilings(*ops);
  EXPECT_GT(m.copy_GBps, 0);
  EXPECT_GT(m.gemm_tflops, 0);
  EXPECT_EQ(m.gemm_dtype, "f32");
  EXPECT_EQ(m.source, "measured");
  if (saved.empty()) ::unsetenv("MOCBENCH_CACHE_DIR");
  else ::setenv("MOCBENCH_CACHE_DIR", saved.c_str(), 1);
  fs::remove_all(dir);
}

TEST(ProfiledPoint, CpuDecodeOpsCarryTheirDeclaredCostsWithAttendedPositions) {
  PointSpec spec;
  spec.mode = "decode";
  spec.model = preset("tiny");
  spec.model.ffn.kind = FfnKind::moc;
  spec.model.ffn.k = spec.model.d_ffn / 4;
  spec.batch = 2;
  spec.prompt = 4;
  spec.generate = 8;
  spec.measure.warmup = 1;
  spec.measure.min_reps = 2;
  spec.measure.max_reps = 2;
  spec.profile = true;
  spec.profile_steps = 2;
  auto ops = make_cpu_ops();
  const PointOutcome out = run_point(*ops, spec);
  ASSERT_TRUE(out.profile.has_value()) << out.profile_note;
  const ProfileTrace& t = *out.profile;
  ASSERT_EQ(t.steps, 2);
  std::map<int, std::int64_t> attn_bytes;  // per step
  std::set<std::pair<int, std::int64_t>> calls;
  for (const auto& k : t.kernels) {
    EXPECT_GE(k.op_bytes, 0) << k.name << ": every op of a decode step declares its cost";
    EXPECT_EQ(k.op, k.name) << "a CPU op is its own declaration";
    EXPECT_TRUE(calls.insert({k.step, k.op_call}).second) << "one declaration per op on the CPU";
    if (k.name == "attention_decode") attn_bytes[k.step] += k.op_bytes;
    if (k.name == "gemm") {
      EXPECT_GT(k.op_flops, 0);
    }
  }
  // The second step attends one position more: every layer's attention reads one K and one V row more per
  // sequence.
  ASSERT_EQ(attn_bytes.size(), 2u);
  const ModelConfig& m = spec.model;
  const std::int64_t per_pos =
      2LL * spec.batch * m.kv_heads * m.head_dim() * static_cast<std::int64_t>(dtype_bytes(m.act_dtype));
  EXPECT_EQ(attn_bytes[1] - attn_bytes[0], static_cast<std::int64_t>(m.layers) * per_pos);
  const stats::Table tb = stats::roofline(t, {10.0, 0.1});
  EXPECT_FALSE(tb.rows.empty());
  for (const auto& row : tb.rows)
    EXPECT_NE(row[row.size() - 2].text, "(undeclared)") << row.back().text;
}

}  // namespace
}  // namespace moc
