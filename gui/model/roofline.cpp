#include "gui/model/roofline.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moc::gui {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

std::optional<db::CeilingsRecord> ceilings_for_trace(const std::vector<db::CeilingsRecord>& all, const prof::ProfileTrace& t) {
  return db::ceilings_for_profile(all, t);
}

prof::Ceilings to_ceilings(const std::optional<db::CeilingsRecord>& c) {
  return c ? prof::Ceilings{c->copy_GBps, c->gemm_tflops} : prof::Ceilings{};
}

double RooflinePlot::pct_bandwidth(const prof::RooflineRow& r) const {
  if (!r.declared || !has_ceilings()) return kNaN;
  return 100.0 * r.GBps() / ceilings->copy_GBps;
}

double RooflinePlot::pct_peak(const prof::RooflineRow& r) const {
  if (!r.declared || !has_ceilings()) return kNaN;
  return 100.0 * r.tflops() / ceilings->gemm_tflops;
}

double RooflinePlot::pct_floor(const prof::RooflineRow& r) const {
  if (!r.declared || !has_ceilings() || !(r.time_ns > 0)) return kNaN;
  return 100.0 * r.floor_ns / r.time_ns;
}

double RooflinePlot::memory_roof(double x) const { return has_ceilings() ? ceilings->copy_GBps * x / 1000.0 : 0.0; }
double RooflinePlot::compute_roof() const { return has_ceilings() ? ceilings->gemm_tflops : 0.0; }

RooflinePlot build_roofline(const prof::ProfileTrace& t, const std::optional<db::CeilingsRecord>& ceilings, prof::TimeMode mode) {
  RooflinePlot p;
  p.ceilings = ceilings;
  p.roofline = prof::roofline(t, to_ceilings(ceilings), mode);
  const auto& rows = p.roofline.rows;
  if (p.has_ceilings()) p.ridge_intensity = 1000.0 * ceilings->gemm_tflops / ceilings->copy_GBps;

  // Where 0-FLOP rows stand: left of the smallest real intensity.
  double min_real = std::numeric_limits<double>::infinity();
  bool any_zero = false;
  for (const auto& r : rows) {
    if (!r.declared) {
      ++p.undeclared_rows;
      continue;
    }
    ++p.declared_rows;
    if (!(r.time_ns > 0) || !(r.bytes > 0)) continue;
    if (r.flops > 0) min_real = std::min(min_real, r.intensity());
    else any_zero = true;
  }
  if (any_zero) {
    p.zero_flop_intensity = 0.01;
    if (min_real < 0.05) p.zero_flop_intensity = std::pow(10.0, std::floor(std::log10(min_real)) - 1.0);
  }

  double biggest = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (!r.declared) continue;
    if (!(r.time_ns > 0) || !(r.bytes > 0)) {
      ++p.unplotted;
      continue;
    }
    RooflineMarker m;
    m.row = i;
    m.zero_flops = !(r.flops > 0);
    m.x = m.zero_flops ? p.zero_flop_intensity : r.intensity();
    m.y = m.zero_flops ? r.GBps() * m.x / 1000.0 : r.tflops();
    p.markers.push_back(m);
    biggest = std::max(biggest, r.time_ns);
  }
  for (auto& m : p.markers) m.size = std::sqrt(rows[m.row].time_ns / biggest);
  std::stable_sort(p.markers.begin(), p.markers.end(), [](const RooflineMarker& a, const RooflineMarker& b) { return a.size > b.size; });

  // Limits: every marker, and with ceilings the ridge and the compute roof, with half a decade to spare.
  double x0 = std::numeric_limits<double>::infinity(), x1 = 0, y0 = std::numeric_limits<double>::infinity(), y1 = 0;
  for (const auto& m : p.markers) {
    x0 = std::min(x0, m.x);
    x1 = std::max(x1, m.x);
    y0 = std::min(y0, m.y);
    y1 = std::max(y1, m.y);
  }
  if (p.has_ceilings()) {
    x1 = std::max(x1, p.ridge_intensity);
    x0 = std::min(x0, p.ridge_intensity);
    y1 = std::max(y1, p.compute_roof());
    // The memory roof where the axis begins stays in sight when the markers sit far below it.
    y0 = std::min(y0, std::max(p.memory_roof(x0), p.compute_roof() * 1e-6));
  }
  if (x1 > 0 && y1 > 0) {
    const double spare = std::sqrt(10.0);
    p.x_min = x0 / spare;
    p.x_max = x1 * spare;
    p.y_min = y0 / spare;
    p.y_max = y1 * spare;
  }
  return p;
}

std::vector<std::size_t> roofline_order(const RooflinePlot& p, RooflineColumn col, bool descending) {
  const auto& rows = p.roofline.rows;
  std::vector<std::size_t> declared, undeclared;
  for (std::size_t i = 0; i < rows.size(); ++i) (rows[i].declared ? declared : undeclared).push_back(i);
  auto number = [&](const prof::RooflineRow& r) -> double {
    switch (col) {
      case RooflineColumn::time: return r.time_ns;
      case RooflineColumn::gbps: return r.GBps();
      case RooflineColumn::pct_bw: return p.pct_bandwidth(r);
      case RooflineColumn::tflops: return r.tflops();
      case RooflineColumn::pct_peak: return p.pct_peak(r);
      case RooflineColumn::floor: return r.floor_ns;
      case RooflineColumn::pct_floor: return p.pct_floor(r);
      case RooflineColumn::lost: return r.lost_ns;
      default: return 0;
    }
  };
  auto text = [&](const prof::RooflineRow& r) -> const std::string& {
    return col == RooflineColumn::phase ? r.phase : col == RooflineColumn::op ? r.op : r.kernel;
  };
  const bool textual = col == RooflineColumn::phase || col == RooflineColumn::op || col == RooflineColumn::kernel;
  std::stable_sort(declared.begin(), declared.end(), [&](std::size_t a, std::size_t b) {
    const auto& ra = rows[a];
    const auto& rb = rows[b];
    if (textual) {
      const int c = text(ra).compare(text(rb));
      if (c != 0) return descending ? c > 0 : c < 0;
    } else {
      double va = number(ra), vb = number(rb);
      // NaN (no ceilings) sorts as the least.
      if (std::isnan(va)) va = -std::numeric_limits<double>::infinity();
      if (std::isnan(vb)) vb = -std::numeric_limits<double>::infinity();
      if (va != vb) return descending ? va > vb : va < vb;
    }
    return ra.lost_ns > rb.lost_ns;
  });
  std::stable_sort(undeclared.begin(), undeclared.end(), [&](std::size_t a, std::size_t b) { return rows[a].time_ns > rows[b].time_ns; });
  declared.insert(declared.end(), undeclared.begin(), undeclared.end());
  return declared;
}

Rgb floor_colour(double pct) {
  if (std::isnan(pct)) return kUndeclaredRgb;
  constexpr Rgb red{0.86f, 0.20f, 0.18f}, yellow{0.93f, 0.78f, 0.20f}, green{0.22f, 0.74f, 0.30f};
  const float t = static_cast<float>(std::clamp(pct / 100.0, 0.0, 1.0));
  auto mix = [](const Rgb& a, const Rgb& b, float f) { return Rgb{a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f, a.b + (b.b - a.b) * f}; };
  return t < 0.5f ? mix(red, yellow, t * 2) : mix(yellow, green, (t - 0.5f) * 2);
}

int floor_bucket(double pct) {
  if (std::isnan(pct)) return -1;
  const double t = std::clamp(pct / 100.0, 0.0, 1.0);
  return static_cast<int>(std::lround(t * (kFloorBuckets - 1)));
}

Rgb floor_bucket_colour(int bucket) {
  if (bucket < 0) return kUndeclaredRgb;
  return floor_colour(100.0 * bucket / (kFloorBuckets - 1));
}

prof::ProfileTrace synthetic_roofline_trace() {
  prof::ProfileTrace t;
  t.source = "cupti";
  t.steps = 2;
  struct K {
    const char* name;
    const char* phase;
    const char* op;
    std::int64_t start, end, bytes, flops, call;
  };
  const K ks[] = {
      {"k_gemm", "ffn.up", "gemm", 1000, 21000, 1000000, 1000000000, 0},
      {"k_copy", "attention", "copy", 22000, 27000, 4000000, 0, 1},
      {"k_norm", "attention", "rmsnorm", 28000, 36000, 2000000, 1000000, 2},
      {"k_split", "ffn.down", "gemm_splitk", 37000, 40000, 1000000, 400000000, 3},
      {"k_reduce", "ffn.down", "gemm_splitk", 40000, 41000, 1000000, 400000000, 3},
      {"k_mystery", "head", "", 42000, 45000, -1, -1, -1},
  };
  const char* phases[] = {"ffn.up", "attention", "ffn.down", "head"};
  constexpr std::int64_t kStep = 50000;
  std::int64_t id = 0;
  for (int s = 0; s < t.steps; ++s) {
    const std::int64_t base = s * kStep;
    prof::PhaseRange root;
    root.id = id++;
    root.name = "step";
    root.step = s;
    root.start_ns = base + 1000;
    root.end_ns = base + 45000;
    t.ranges.push_back(root);
    std::int64_t range_of[4] = {};
    for (int i = 0; i < 4; ++i) {
      prof::PhaseRange r;
      r.id = id++;
      r.parent_id = root.id;
      r.name = phases[i];
      r.depth = 1;
      r.step = s;
      range_of[i] = r.id;
      t.ranges.push_back(r);
    }
    for (const K& k : ks) {
      prof::KernelRecord r;
      r.name = r.short_name = k.name;
      r.start_ns = base + k.start;
      r.end_ns = base + k.end;
      r.device_id = 0;
      r.stream_id = 7;
      r.step = s;
      r.grid_x = r.grid_y = r.grid_z = 1;
      r.block_x = 128;
      r.block_y = r.block_z = 1;
      for (int i = 0; i < 4; ++i)
        if (std::string(phases[i]) == k.phase) r.range_id = range_of[i];
      r.op = k.op;
      r.op_bytes = k.bytes;
      r.op_flops = k.flops;
      r.op_call = k.call;
      t.kernels.push_back(r);
      for (auto& rg : t.ranges)
        if (rg.id == r.range_id) {
          rg.start_ns = rg.ops ? std::min(rg.start_ns, r.start_ns) : r.start_ns;
          rg.end_ns = std::max(rg.end_ns, r.end_ns);
          ++rg.ops;
        }
    }
    t.ranges[static_cast<std::size_t>(root.id)].ops = static_cast<int>(std::size(ks));
  }
  t.start_ns = 0;
  t.end_ns = t.steps * kStep;
  return t;
}

db::CeilingsRecord synthetic_roofline_ceilings() {
  db::CeilingsRecord c;
  c.device_id = 0;
  c.device = "Synthetic GPU";
  c.copy_GBps = 1000;
  c.gemm_tflops = 100;
  c.gemm_dtype = "bf16";
  c.measured_unix_ms = 1767225600000;
  c.source = "measured";
  return c;
}

}  // namespace moc::gui
