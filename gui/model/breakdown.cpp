#include "gui/model/breakdown.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "gui/model/sweep.h"

namespace moc::gui {

namespace {
double have(const db::PointRecord& p, const char* name, bool* ok) {
  const double v = metric_of(p, name);
  if (std::isnan(v)) *ok = false;
  return std::isnan(v) ? 0 : v;
}
}  // namespace

std::string point_label(const db::PointRecord& p, const std::vector<std::string>& varying, const char* sep,
                        bool with_names) {
  std::string s;
  for (const auto& a : varying) {
    const std::string* v = axis_of(p, a);
    if (!v) continue;
    if (!s.empty()) s += sep;
    if (with_names) s += a + "=";
    s += *v;
  }
  if (s.empty()) s.append("#").append(std::to_string(p.index));
  return s;
}

bool breakdown_bar(const db::PointRecord& p, const prof::ProfileTrace* profile, BreakdownBar* out, prof::TimeMode mode) {
  const bool ffn_decode = p.mode == "ffn-decode";
  out->point_id = p.id;
  out->parts = {};
  const char* total_name = ffn_decode ? "latency_us" : p.mode == "decode" ? "ms_per_token" : "median_ms";
  const double total = metric_of(p, total_name);
  out->timed_total = std::isnan(total) ? 0 : total;
  static const char* kTimedUs[] = {"gate_us", "up_down_us", "topk_us"};
  static const char* kTimedMs[] = {"gate_ms", "up_down_ms", "topk_ms"};
  bool timed_parts = true;
  for (const char* n : ffn_decode ? kTimedUs : kTimedMs)
    if (std::isnan(metric_of(p, n))) timed_parts = false;
  prof::PaperBreakdown pb;
  const bool profiled = profile && profile->steps > 0 && (!profile->kernels.empty() || !profile->memcpys.empty());
  if (profiled) pb = prof::paper_breakdown(*profile, mode);
  // A profile whose FFN ran as one fused op (the CPU backend's ffn_decode) cannot tell the parts apart: the
  // timed parts can, when the point has them.
  if (profiled && !(pb.fused_decode && timed_parts)) {
    double per = profile->steps * 1e6;  // ns per step -> ms
    if (ffn_decode) {
      // Calls per profiled step: calls_per_replay (since 2026-11-28; before, one call per weight copy).
      double calls = metric_of(p, "calls_per_replay");
      if (std::isnan(calls) || calls <= 0) calls = metric_of(p, "weight_copies");
      if (std::isnan(calls) || calls <= 0) calls = 1;
      per = profile->steps * calls * 1e3;  // ns per call -> us
    }
    for (int i = 0; i < prof::kPaperParts; ++i) out->parts[static_cast<std::size_t>(i)] = pb.ns[static_cast<std::size_t>(i)] / per;
    // other also holds the device's idle time between ops (launch gaps), as the timed other does: the bar is
    // the profiled steps' span, comparable with the timed total.
    if (profile->source != "cpu") out->parts[3] += pb.idle_ns / per;
    out->from_profile = true;
    return true;
  }
  out->from_profile = false;
  bool ok = true;
  if (ffn_decode) {
    // The parts add up to the call (app/modes/ffn_decode.cpp). Runs before 2026-11-28 timed MoC's up & down alone,
    // so their other_us (the call less the parts) could come out below zero: drawn as none.
    out->parts = {have(p, "gate_us", &ok), have(p, "up_down_us", &ok), have(p, "topk_us", &ok),
                  std::max(0.0, have(p, "other_us", &ok))};
    return ok;
  }
  out->parts[0] = have(p, "gate_ms", &ok);
  out->parts[1] = have(p, "up_down_ms", &ok);
  out->parts[2] = have(p, "topk_ms", &ok);
  if (!ok) return false;
  out->parts[3] = std::max(0.0, out->timed_total - out->parts[0] - out->parts[1] - out->parts[2]);
  return out->timed_total > 0;
}

namespace {
// The order that puts each group's entries together (groups by first appearance, stable within).
std::vector<std::size_t> grouped_order(const std::vector<std::string>& groups) {
  std::map<std::string, std::size_t> first;
  for (const auto& g : groups) first.emplace(g, first.size());
  std::vector<std::size_t> order(groups.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return first[groups[a]] < first[groups[b]]; });
  return order;
}
template <typename T>
void permute(std::vector<T>* v, const std::vector<std::size_t>& order) {
  std::vector<T> out;
  out.reserve(v->size());
  for (std::size_t i : order) out.push_back(std::move((*v)[i]));
  *v = std::move(out);
}
}  // namespace

BreakdownData build_breakdown(const std::vector<db::PointRecord>& points, const ProfileOf& profile_of, prof::TimeMode mode) {
  BreakdownData d;
  d.mode = mode;
  const auto varying = varying_axes(points);
  std::vector<std::string> label_axes;
  for (const auto& a : varying)
    if (a != "mode") label_axes.push_back(a);
  // Two or more axes: the first groups the bars, the rest label them.
  if (label_axes.size() >= 2) {
    d.group_axis = label_axes.front();
    label_axes.erase(label_axes.begin());
  }
  d.label_axes = label_axes;
  auto group_of_point = [&](const db::PointRecord& p) {
    if (d.group_axis.empty()) return std::string();
    const std::string* v = axis_of(p, d.group_axis);
    return d.group_axis + "=" + (v ? *v : std::string("?"));
  };
  std::map<std::string, std::size_t> group_of, phases_of;
  std::vector<std::vector<double>> other;  // per d.phases entry: each point's "other"
  // The phases that partition a step, in stacking order; nested ones (forward, layer.N, ffn.gate) are not.
  static const char* kLeaves[] = {"embedding", "attention", "ffn", "ffn.decode", "head", "loss", "optimizer", "sample"};
  for (const auto& p : points) {
    if (p.status != "ok" || p.mode == "topk") continue;
    auto prof = profile_of ? profile_of(p.id) : nullptr;
    BreakdownBar bar;
    if (breakdown_bar(p, prof.get(), &bar, mode)) {
      bar.group = group_of_point(p);
      bar.label = point_label(p, label_axes, "\n", false);
      auto [it, fresh] = group_of.emplace(p.mode, d.groups.size());
      if (fresh) d.groups.push_back({p.mode, p.mode == "ffn-decode" ? "us" : "ms", {}});
      d.groups[it->second].bars.push_back(std::move(bar));
    }
    const double step = metric_of(p, "phase_step_ms");
    if (std::isnan(step)) continue;
    auto [pit, pfresh] = phases_of.emplace(p.mode, d.phases.size());
    if (pfresh) {
      PhaseBars pb;
      pb.mode = p.mode;
      d.phases.push_back(std::move(pb));
      other.emplace_back();
    }
    PhaseBars& pb = d.phases[pit->second];
    const std::size_t col = pb.labels.size();
    pb.labels.push_back(point_label(p, label_axes, "\n", false));
    pb.groups.push_back(group_of_point(p));
    pb.point_ids.push_back(p.id);
    double sum = 0;
    const bool have_ffn = !std::isnan(metric_of(p, "phase_ffn_ms"));
    for (const char* leaf : kLeaves) {
      const double v = metric_of(p, std::string("phase_") + leaf + "_ms");
      if (std::isnan(v)) continue;
      if (have_ffn && std::string(leaf) == "ffn.decode") continue;  // inside ffn
      auto it = std::find(pb.phases.begin(), pb.phases.end(), leaf);
      if (it == pb.phases.end()) {
        pb.phases.push_back(leaf);
        pb.ms.emplace_back(col, 0.0);
        it = pb.phases.end() - 1;
      }
      auto& row = pb.ms[static_cast<std::size_t>(it - pb.phases.begin())];
      row.resize(col + 1, 0.0);
      row[col] = v;
      sum += v;
    }
    other[pit->second].push_back(std::max(0.0, step - sum));
  }
  // "other" (the step less its partitioning phases) goes on top; a mode whose steps have no partitioning
  // phase timed (a decode step replayed from a CUDA graph: only the step range is timed) would be one
  // "other" bar per point: it is left out.
  std::vector<PhaseBars> kept;
  for (std::size_t i = 0; i < d.phases.size(); ++i) {
    PhaseBars& pb = d.phases[i];
    if (pb.phases.empty()) continue;
    pb.phases.push_back("other");
    pb.ms.push_back(std::move(other[i]));
    for (auto& row : pb.ms) row.resize(pb.labels.size(), 0.0);
    kept.push_back(std::move(pb));
  }
  d.phases = std::move(kept);
  for (auto& g : d.groups) {
    std::vector<std::string> groups;
    for (const auto& b : g.bars) groups.push_back(b.group);
    permute(&g.bars, grouped_order(groups));
  }
  for (auto& pb : d.phases) {
    const auto order = grouped_order(pb.groups);
    permute(&pb.labels, order);
    permute(&pb.groups, order);
    permute(&pb.point_ids, order);
    for (auto& row : pb.ms) permute(&row, order);
  }
  return d;
}

}  // namespace moc::gui
