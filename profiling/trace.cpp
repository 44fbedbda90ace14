#include "profiling/trace.h"

#include <algorithm>
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

}  // namespace moc::prof
