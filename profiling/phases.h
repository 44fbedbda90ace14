// Which phase a profiled op belongs to, and the paper's latency breakdown of a profile (gate / up & down /
// top-K / other), shared by `mocbench stats` (phase_sum) and the dashboard (Breakdown and Timeline views).
// Plain C++ over a ProfileTrace: no CUDA, no SQLite.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "profiling/trace.h"

namespace moc::prof {

// The paper's parts of an FFN's latency (Tables 8 and 11).
enum class PaperPart { gate = 0, up_down = 1, topk = 2, other = 3 };
inline constexpr int kPaperParts = 4;
const char* paper_part_label(PaperPart p);  // "gate", "up & down", "top-K", "other"

// Ranges of one trace by id. Keeps pointers into t.ranges: the trace must outlive it.
class PhaseIndex {
 public:
  explicit PhaseIndex(const ProfileTrace& t);
  // The innermost range's name with layer.N merged into "layer"; "(none)" outside every range.
  std::string phase(std::int64_t range_id) const;
  // The nearest enclosing ffn.gate / ffn.topk / ffn.up / ffn.down range decides; other when none.
  PaperPart part_of_range(std::int64_t range_id) const;
  // The nearest enclosing range called `name` (-1: none).
  std::int64_t ancestor_named(std::int64_t range_id, const std::string& name) const;
  const PhaseRange* find(std::int64_t range_id) const;

 private:
  std::unordered_map<std::int64_t, const PhaseRange*> by_id_;
};

// Inside ffn.decode the fused decode kernels (kernels/cuda/ffn_decode.cu) have no finer ranges: their names
// say which part they are -- k_gate the gate GEMV (with the a:b selection in its epilogue), k_select the
// row top-K, k_updown the up and down projections over the kept channels; k_gen_* the generic fallback;
// k_prep (zeroing the next kernel's accumulators) is other.
PaperPart decode_kernel_part(const std::string& short_name);

// The paper's parts of `ns` of a stamped stage (StageRecord::stage), added into parts: gate -> gate, top-K ->
// top-K, up and down -> up & down, "gate & up" (the dense FFN reads a gate row and an up row together in one
// pass: the time cannot be split by measurement) -> half gate, half up & down (equal bytes), anything else
// (start, qkv, attention, o, head, output) -> other. Returns false for the fused "gate & up".
bool add_stage_parts(const std::string& stage, double ns, std::array<double, kPaperParts>& parts);

struct PaperBreakdown {
  std::array<double, kPaperParts> ns{};  // device (or CPU op) time of each part over the whole trace
  bool in_decode = false;     // some op ran inside ffn.decode
  bool fused_decode = false;  // some op inside ffn.decode could not be told apart (counted as other)
  double idle_ns = 0;         // the steps' spans less the busy time: the device idle between ops (not in ns)
  bool from_stages = false;   // some kernel's time was split by its stage stamps
  bool fused_stages = false;  // some stamped stage was a fused "gate & up" (split evenly)
};

// Attributes every kernel, memcpy and memset of the trace to a part. Inside an ffn.decode range that ran a
// gate kernel, kernels are split by name (decode_kernel_part); the dense decode path has no gate kernel (its
// k_updown computes gate, up and down together), so its ops stay "other".
// Each op counts its device time under `mode` (exclusive: the breakdown sums to the busy time). A kernel with
// stage stamps (the decode FFN's k_gate, k_select, k_updown; in profiles recorded before its retirement also
// the persistent decode step k_step) is split by its stages (add_stage_parts); the part of its time the
// stages do not cover is, for a decode FFN kernel in ffn.decode, the part its name says (its stamps begin
// after its dependency wait), and other for any other kernel (k_step's launch and exit).
PaperBreakdown paper_breakdown(const ProfileTrace& t, TimeMode mode = TimeMode::exclusive);
// The same over times already computed (device_times(t, mode)), for callers that need them too.
PaperBreakdown paper_breakdown(const ProfileTrace& t, const DeviceTimes& dt);

}  // namespace moc::prof
