#include "profiling/trace.h"

#include <algorithm>
#include <map>
#include <utility>

namespace moc::prof {

std::string memcpy_operation(const std::string& kind) {
  if (kind == "HtoD") return "[CUDA memcpy Host-to-Device]";
  if (kind == "DtoH") return "[CUDA memcpy Device-to-Host]";
  if (kind == "DtoD") return "[CUDA memcpy Device-to-Device]";
  if (kind == "HtoH") return "[CUDA memcpy Host-to-Host]";
  if (kind == "PtoP") return "[CUDA memcpy Peer-to-Peer]";
  return "[CUDA memcpy Unknown]";
}

std::int64_t busy_ns(const ProfileTrace& t) {
  std::vector<std::pair<std::int64_t, std::int64_t>> iv;
  iv.reserve(t.kernels.size() + t.memcpys.size() + t.memsets.size());
  for (const auto& k : t.kernels) iv.emplace_back(k.start_ns, k.end_ns);
  for (const auto& m : t.memcpys) iv.emplace_back(m.start_ns, m.end_ns);
  for (const auto& m : t.memsets) iv.emplace_back(m.start_ns, m.end_ns);
  std::sort(iv.begin(), iv.end());
  std::int64_t total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [s, e] : iv) {
    if (e <= s) continue;
    if (!open || s > cur_end) {
      if (open) total += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
      open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

std::int64_t step_span_ns(const ProfileTrace& t) {
  std::map<int, std::pair<std::int64_t, std::int64_t>> span;
  auto add = [&](int step, std::int64_t s, std::int64_t e) {
    auto [it, fresh] = span.try_emplace(step, s, std::max(s, e));
    if (!fresh) {
      it->second.first = std::min(it->second.first, s);
      it->second.second = std::max(it->second.second, std::max(s, e));
    }
  };
  for (const auto& k : t.kernels) add(k.step, k.start_ns, k.end_ns);
  for (const auto& m : t.memcpys) add(m.step, m.start_ns, m.end_ns);
  for (const auto& m : t.memsets) add(m.step, m.start_ns, m.end_ns);
  std::int64_t total = 0;
  for (const auto& [step, se] : span) total += se.second - se.first;
  return total;
}

std::vector<std::ptrdiff_t> stage_kernels(const ProfileTrace& t) {
  std::vector<std::ptrdiff_t> out(t.stages.size(), -1);
  if (t.stages.empty()) return out;
  std::map<std::pair<int, std::string>, std::vector<std::ptrdiff_t>> records;
  for (std::size_t i = 0; i < t.kernels.size(); ++i)
    records[{t.kernels[i].step, t.kernels[i].short_name}].push_back(static_cast<std::ptrdiff_t>(i));
  for (auto& [key, v] : records)
    std::stable_sort(v.begin(), v.end(), [&](std::ptrdiff_t a, std::ptrdiff_t b) {
      return t.kernels[static_cast<std::size_t>(a)].start_ns < t.kernels[static_cast<std::size_t>(b)].start_ns;
    });
  for (std::size_t i = 0; i < t.stages.size(); ++i) {
    const auto& g = t.stages[i];
    auto it = records.find({g.step, g.kernel});
    if (it != records.end() && g.launch >= 0 && static_cast<std::size_t>(g.launch) < it->second.size())
      out[i] = it->second[static_cast<std::size_t>(g.launch)];
  }
  return out;
}

const char* time_mode_name(TimeMode m) { return m == TimeMode::inclusive ? "inclusive" : "exclusive"; }

bool parse_time_mode(const std::string& text, TimeMode* out) {
  if (text == "exclusive") *out = TimeMode::exclusive;
  else if (text == "inclusive") *out = TimeMode::inclusive;
  else return false;
  return true;
}

DeviceTimes device_times(const ProfileTrace& t, TimeMode mode) {
  DeviceTimes d;
  d.mode = mode;
  const std::size_t nk = t.kernels.size(), nc = t.memcpys.size(), ns = t.memsets.size();
  d.kernels.resize(nk);
  d.memcpys.resize(nc);
  d.memsets.resize(ns);
  d.kernel_own.resize(nk);
  d.memcpy_own.resize(nc);
  d.memset_own.resize(ns);
  struct Rec {
    std::int64_t start, end;
    int kind;  // 0 kernel, 1 memcpy, 2 memset
    std::size_t index;
  };
  std::vector<Rec> recs;
  recs.reserve(nk + nc + ns);
  for (std::size_t i = 0; i < nk; ++i) recs.push_back({t.kernels[i].start_ns, t.kernels[i].end_ns, 0, i});
  for (std::size_t i = 0; i < nc; ++i) recs.push_back({t.memcpys[i].start_ns, t.memcpys[i].end_ns, 1, i});
  for (std::size_t i = 0; i < ns; ++i) recs.push_back({t.memsets[i].start_ns, t.memsets[i].end_ns, 2, i});
  auto put = [&](const Rec& r, std::int64_t own, std::int64_t dur) {
    auto& durs = r.kind == 0 ? d.kernels : r.kind == 1 ? d.memcpys : d.memsets;
    auto& owns = r.kind == 0 ? d.kernel_own : r.kind == 1 ? d.memcpy_own : d.memset_own;
    durs[r.index] = dur;
    owns[r.index] = own;
  };
  if (mode == TimeMode::inclusive) {
    for (const auto& r : recs) put(r, r.start, std::max<std::int64_t>(0, r.end - r.start));
    return d;
  }
  std::sort(recs.begin(), recs.end(), [](const Rec& a, const Rec& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.end != b.end) return a.end < b.end;
    if (a.kind != b.kind) return a.kind < b.kind;
    return a.index < b.index;
  });
  // Every record before r in this order started no later than r, so an instant of r is covered by an earlier
  // record exactly when it lies before the latest end seen so far.
  bool any = false;
  std::int64_t frontier = 0;
  for (const auto& r : recs) {
    const std::int64_t end = std::max(r.start, r.end);
    const std::int64_t own = any ? std::min(end, std::max(r.start, frontier)) : r.start;
    put(r, own, end - own);
    frontier = any ? std::max(frontier, end) : end;
    any = true;
  }
  return d;
}

}  // namespace moc::prof
