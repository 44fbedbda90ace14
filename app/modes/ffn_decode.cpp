// ffn-decode: one FFN layer's decode call (Ops::ffn_decode) on batch rows, weights in the decode layout. Cold:
// `copies` weight copies rotating through more bytes than the caches hold, each call on the next copy (the
// harness does not flush). A repetition replays `calls` calls (rounds over the copies; on the GPU at least
// kMinCallsGpu, so that a graph replay's own launch and completion, inside its timing events, stay small
// against it) and is divided by them. Needs the device's copy bandwidth (the floor's rate). Declares the
// paper's byte floor of a call (the weights it must read once) and the call's FLOPs (kernels/op_cost.h's
// ffn_decode); reports the floor against the copy bandwidth and the paper's gate / top-K / up & down
// breakdown (parts that add up to the call's latency).
#include <algorithm>
#include <optional>

#include "app/harness/ceilings.h"
#include "app/modes/mode.h"
#include "app/modes/mode_util.h"
#include "kernels/op_cost.h"
#include "model/ffn.h"

namespace moc {

namespace {

// Calls per replay on the GPU: a graph replay timed by CUDA events also holds its launch and completion, 2-5 us
// on an H100 beyond its kernels' busy time (about 1 us of it the host's launch latency), which 5 calls of ~20 us
// did not hide: the one-layer profiles read up to 3.6% shorter than their timed medians (bench/RESULTS.md part
// 20). 16 or more calls make it ~1% of a replay or less; a decode step's graph pays it once per step.
constexpr int kMinCallsGpu = 16;

// Calls per replay: whole rounds over the copies, at least kMinCallsGpu on the GPU (the CPU backend has no
// launch cost to hide: one round).
int calls_per_replay(int copies, bool gpu) {
  return gpu ? (kMinCallsGpu + copies - 1) / copies * copies : copies;
}

struct FfnDecodeBench {
  PointState& st;
  FfnLayerBuffers& b;
  int copies;
  int calls;  // per replay, call i on copy i % copies
  bool moc;
  MocSelect sel;
  // `calls` calls, captured as a graph (on a forced selection when force is set).
  std::unique_ptr<OpGraph> graph_of(unsigned parts, const Tensor* force) {
    Ops* ops = &st.ops();
    return ops->capture([this, ops, parts, force] {
      for (int i = 0; i < calls; ++i) {
        const auto c = static_cast<std::size_t>(i % copies);
        ops->ffn_decode(b.x, {&b.wg[c], &b.wu[c], &b.wd[c]}, moc ? &sel : nullptr, b.y, force, nullptr, parts);
      }
    });
  }
};

// A graph's replay timed alone, per call: at most half a second of repetitions.
double part_us(PointState& st, OpGraph& g, int calls) {
  MeasureSettings part = st.spec().measure;
  part.time_bound_s = std::min(part.time_bound_s, 0.5);
  return measure(part, [&] { return timed(st.ops(), [&] { g.replay(); }) / calls; }).median_s * 1e6;
}

// The paper's breakdown of a call, parts that add up to the call: the gate projection (its pass timed alone: it
// comes first in the call), top-K (the gate pass with the selection, less the gate pass), up & down (the rest of
// the whole call), other (below 0 only where the gate and top-K passes alone take longer than the whole call, else
// 0); for MoC also the up & down timed alone on a fixed selection (more than what it adds to the call, where it
// overlaps the passes before it under PDL: H100, MoC batch 1, 14.5 us alone against 8.1 us added, bench/RESULTS.md
// part 19); and the same layer through the generic ops (GEMMs, moc_select, gathers: what a framework without fused
// decode kernels runs), for comparison with the fused decode path.
struct Breakdown {
  double gate_us = 0, topk_us = 0, updown_us = 0, other_us = 0, unfused_us = 0;
  std::optional<double> updown_alone_us;  // MoC only
};

// Leaves in idx the selection on this x: the union of the rows' channels (the floor).
Breakdown breakdown(FfnDecodeBench& fb, Tensor& idx, double total_us) {
  PointState& st = fb.st;
  Ops& ops = st.ops();
  FfnLayerBuffers& b = fb.b;
  Breakdown r;
  r.gate_us = part_us(st, *fb.graph_of(kFfnGate, nullptr), fb.calls);
  if (fb.moc) {
    ops.ffn_decode(b.x, {&b.wg[0], &b.wu[0], &b.wd[0]}, &fb.sel, b.y, nullptr, &idx, kFfnGate | kFfnSelect);
    r.topk_us = std::max(0.0, part_us(st, *fb.graph_of(kFfnGate | kFfnSelect, nullptr), fb.calls) - r.gate_us);
    r.updown_alone_us = part_us(st, *fb.graph_of(kFfnUpDown, &idx), fb.calls);
  }
  r.updown_us = std::max(0.0, total_us - r.gate_us - r.topk_us);
  r.other_us = total_us - r.gate_us - r.topk_us - r.updown_us;
  Ffn ffn(ops, st.config(), 0);
  auto unfused = ops.capture([&] {
    for (int i = 0; i < fb.calls; ++i) {
      const auto c = static_cast<std::size_t>(i % fb.copies);
      ffn.forward(b.x, {&b.wg[c], &b.wu[c], &b.wd[c], true}, b.y, 1.0f, false);
    }
  });
  r.unfused_us = part_us(st, *unfused, fb.calls);
  return r;
}

void run_ffn_decode(PointState& st) {
  Ops& ops = st.ops();
  const PointSpec& spec = st.spec();
  const ModelConfig& cfg = st.config();
  const std::int64_t rows = spec.batch;
  const std::size_t layer_bytes = 3 * static_cast<std::size_t>(cfg.hidden) * static_cast<std::size_t>(cfg.d_ffn) *
                                  dtype_bytes(cfg.param_dtype);
  const int copies =
      spec.cold ? static_cast<int>(std::clamp<std::size_t>(spec.cold_bytes / layer_bytes + 1, 2, 64)) : 1;
  // Measured before anything else is allocated, so its buffers stay out of the point's peak memory.
  const double copy_GBps = copy_bandwidth_GBps(ops);
  FfnLayerBuffers b = ffn_layer_buffers(st, /*train=*/false, rows, copies);
  const bool moc = cfg.ffn.kind == FfnKind::moc;
  const int calls = calls_per_replay(copies, ops.device() == DeviceKind::cuda);
  FfnDecodeBench fb{st, b, copies, calls, moc, moc ? cfg.ffn.selection() : MocSelect{}};
  const int kept = moc ? fb.sel.kept(cfg.d_ffn) : cfg.d_ffn;
  Tensor idx = ops.empty({rows, kept}, DType::i16, workspace_tag());
  // The latency of a call is a replay's time over its calls (launch gaps do not count, as inside a decode
  // step's graph), and with copies rotating through more bytes than the L2 the weights come from memory.
  // One call before the first capture: what the ops make at a first call and no capture may allocate (the zeroed
  // scratch the decode FFN keeps its counters in) exists when the graph is made, so that the graph holds what a
  // decode step runs (without it the dense and 2:8 graphs held a prep kernel that no decode step has).
  ops.ffn_decode(b.x, {&b.wg[0], &b.wu[0], &b.wd[0]}, moc ? &fb.sel : nullptr, b.y, nullptr, nullptr, kFfnAll);
  ops.fill(b.y, 0.0f);
  auto full = fb.graph_of(kFfnAll, nullptr);
  const std::function<double()> sample = [&] {
    return st.repetition([&] {
      ScopedRange sr(st.ranges(), "ffn.decode");
      full->replay();
    }) / calls;
  };
  ExecOptions eo;
  eo.recapture = [&] { full = fb.graph_of(kFfnAll, nullptr); };
  const Stats& stats = st.exec(sample, eo);
  const double total_us = stats.median_s * 1e6;
  const Breakdown br = breakdown(fb, idx, total_us);
  // Byte floor of one call (paper §5): dense 3 d d_ffn, MoC d d_ffn + 2 U d weight elements, U the channels
  // some row selected (each needed weight row is read once per call; U = K at batch 1).
  double union_channels = kept;
  if (moc) {
    std::vector<char> used(static_cast<std::size_t>(cfg.d_ffn), 0);
    for (auto j : ops.download_i32(idx)) used[static_cast<std::size_t>(j)] = 1;
    union_channels = static_cast<double>(std::count(used.begin(), used.end(), 1));
  }
  const double d = cfg.hidden, F = cfg.d_ffn, K = union_channels;
  const double elems = moc ? d * F + 2 * K * d : 3 * d * F;
  const double floor_bytes = elems * static_cast<double>(dtype_bytes(cfg.param_dtype));
  const cost::FfnDecodeShape shape =
      cost::ffn_decode_shape(b.x, {&b.wg[0], &b.wu[0], &b.wd[0]}, moc ? &fb.sel : nullptr);
  st.set_cost({.bytes = floor_bytes, .flops = static_cast<double>(cost::ffn_decode(shape, kFfnAll).flops)});
  const double achieved = st.outcome().cost.bytes / stats.median_s / 1e9;
  st.metric("latency_us", total_us);
  st.metric("union_channels", union_channels);
  st.metric("floor_bytes", floor_bytes);
  st.metric("achieved_GBps", achieved);
  st.metric("copy_GBps", copy_GBps);
  st.metric("pct_of_floor", 100.0 * achieved / copy_GBps);
  st.metric("floor_us", floor_bytes / copy_GBps / 1e3);
  st.metric("gate_us", br.gate_us);
  st.metric("topk_us", br.topk_us);
  st.metric("up_down_us", br.updown_us);
  st.metric("other_us", br.other_us);
  if (br.updown_alone_us) st.metric("up_down_alone_us", *br.updown_alone_us);
  st.metric("unfused_us", br.unfused_us);
  st.metric("weight_copies", copies);
  st.metric("calls_per_replay", calls);
}

}  // namespace

extern const Mode kFfnDecodeMode;
const Mode kFfnDecodeMode{
    .name = "ffn-decode",
    .needs = "one FFN layer's random weights in the decode layout, as many copies as cold needs; the copy bandwidth",
    .repetition = "one FFN layer decode call on batch rows (a replay of calls_per_replay calls over the weight copies, "
                  "divided by them)",
    .flush_when_cold = false,
    .refuse = nullptr,
    .run = run_ffn_decode,
};

}  // namespace moc
