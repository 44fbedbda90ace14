// The Roofline view's data and the Timeline's "% of floor" colouring: a point's kernels against the device's
// measured ceilings (profiling/roofline.h: each kernel's declared bytes and FLOPs, the run's DEVICE_CEILINGS).
// One marker per (kernel, phase) row of prof::roofline at (arithmetic intensity, achieved TFLOP/s) on log-log
// axes, sized by time per step and coloured by % of floor; the memory roof (copy GB/s x intensity) and the
// compute roof (GEMM TFLOP/s) meet at the ridge point. Plain data: no ImGui, so the tests use it without a window.
//
// A kernel that does no arithmetic (a copy, a fill: 0 FLOP, intensity 0) has no place on a log axis: its marker
// stands at a fixed small intensity (zero_flop_intensity, left of every real one) at the height its achieved
// bandwidth gives there (GB/s x that intensity), so its distance below the memory roof is still its share of the
// bandwidth -- which, with no FLOPs, is its % of floor.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/results_db.h"
#include "profiling/roofline.h"
#include "profiling/trace.h"

namespace moc::gui {

// The measured ceilings that apply to a profile: the CPU backend's (device -1) for a CPU profile, else those of
// the lowest GPU ordinal its kernels ran on (as `mocbench stats --report roofline` picks them); none when the
// run recorded none (a file from before schema 7) or none for that device.
std::optional<db::CeilingsRecord> ceilings_for_trace(const std::vector<db::CeilingsRecord>& all, const prof::ProfileTrace& t);
prof::Ceilings to_ceilings(const std::optional<db::CeilingsRecord>& c);

// One marker: row `row` of RooflinePlot::roofline.rows.
struct RooflineMarker {
  std::size_t row = 0;
  double x = 0, y = 0;      // where it is drawn: FLOP per byte, TFLOP/s
  bool zero_flops = false;  // pure data movement: x = zero_flop_intensity, y = GB/s x that / 1000
  double size = 0;          // sqrt(time per step / the largest marker's), in (0, 1]
};

struct RooflinePlot {
  prof::Roofline roofline;  // rows: declared by lost time (descending), then undeclared by time
  std::optional<db::CeilingsRecord> ceilings;
  bool has_ceilings() const { return ceilings && ceilings->copy_GBps > 0 && ceilings->gemm_tflops > 0; }
  double ridge_intensity = 0;      // FLOP/byte where the roofs meet (0 without ceilings)
  double zero_flop_intensity = 0;  // where 0-FLOP markers stand (0 when there are none)
  std::vector<RooflineMarker> markers;  // largest first (small ones are drawn over big ones)
  std::size_t declared_rows = 0, undeclared_rows = 0;
  std::size_t unplotted = 0;  // declared rows without a place: no time (exclusive: hidden under earlier work) or no bytes
  double x_min = 1e-2, x_max = 1e3, y_min = 1e-4, y_max = 1e3;  // axis limits: every marker, the roofs and the ridge

  // Per row: % of the copy bandwidth, % of the GEMM peak, % of floor (= the larger of the two: floor / time).
  // NaN where undeclared or without ceilings.
  double pct_bandwidth(const prof::RooflineRow& r) const;
  double pct_peak(const prof::RooflineRow& r) const;
  double pct_floor(const prof::RooflineRow& r) const;
  // The roofs at intensity x (TFLOP/s): memory = copy GB/s x x / 1000, compute = GEMM TFLOP/s; 0 without ceilings.
  double memory_roof(double x) const;
  double compute_roof() const;
};

// zero_flop_intensity: 0.01 FLOP/byte, or a decade below the decade of the smallest real intensity when that is
// under 0.05 (so 0-FLOP markers always stand left of the others).
RooflinePlot build_roofline(const prof::ProfileTrace& t, const std::optional<db::CeilingsRecord>& ceilings, prof::TimeMode mode);

// The table's columns and its order: declared rows by the column (ties by lost time), undeclared rows after them
// by time (descending) whatever the column.
enum class RooflineColumn { time, gbps, pct_bw, tflops, pct_peak, floor, pct_floor, lost, phase, op, kernel };
std::vector<std::size_t> roofline_order(const RooflinePlot& p, RooflineColumn col, bool descending);

// The "% of floor" colour scale (Roofline markers, Timeline kernels): red at 0% through yellow at 50% to green at
// 100% (and above: faster than the measured ceilings, e.g. data that stayed in a cache); grey for NaN (no
// declared cost, or no ceilings). The Timeline draws kernels in kFloorBuckets classes: bucket b stands for
// b * 100 / (kFloorBuckets - 1) %.
struct Rgb {
  float r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};
inline constexpr Rgb kUndeclaredRgb{0.42f, 0.42f, 0.45f};
Rgb floor_colour(double pct);
inline constexpr int kFloorBuckets = 21;  // 0%, 5%, ..., 100%
int floor_bucket(double pct);             // nearest bucket; -1 for NaN
Rgb floor_bucket_colour(int bucket);      // kUndeclaredRgb for -1

// A synthetic profile with declared op costs, for the tests and screenshots of the Roofline view and the floor
// colouring, two steps of (one stream, one after another, so exclusive = inclusive):
//   k_gemm    op gemm:     1 MB, 1 GFLOP in 20 us                (ffn.up)
//   k_copy    op copy:     4 MB, 0 FLOP in 5 us                  (attention)
//   k_norm    op rmsnorm:  2 MB, 1 MFLOP in 8 us                 (attention)
//   k_split + k_reduce     one gemm_splitk declaration: 1 MB, 0.4 GFLOP in 3 us + 1 us (ffn.down)
//   k_mystery              nothing declared, 3 us                (head)
// with synthetic_roofline_ceilings(): copy 1000 GB/s, GEMM 100 TFLOP/s (ridge at 100 FLOP/byte), that is
// k_gemm 50% of floor, k_copy 80%, k_norm 25%, k_split and k_reduce 100%, k_mystery undeclared.
prof::ProfileTrace synthetic_roofline_trace();
db::CeilingsRecord synthetic_roofline_ceilings();

}  // namespace moc::gui
