#include "app/harness/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace moc {

namespace {
std::optional<std::string> read_file(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::size_t> parse_bytes(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  if (pos == text.size() || text[pos] < '0' || text[pos] > '9') return std::nullopt;
  return static_cast<std::size_t>(std::strtoull(text.c_str() + pos, nullptr, 10));
}
}  // namespace

std::optional<std::size_t> parse_meminfo_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    const auto kb = parse_bytes(line.substr(13));
    if (!kb) return std::nullopt;
    return *kb * 1024;  // the file says kB (KiB)
  }
  return std::nullopt;
}

std::optional<std::size_t> parse_cgroup_limit(const std::string& text) {
  if (text.rfind("max", 0) == 0) return std::nullopt;
  const auto v = parse_bytes(text);
  if (!v || *v >= (std::size_t{1} << 60)) return std::nullopt;  // v1's "unlimited" is about 2^63
  return v;
}

std::optional<HostMemory> host_memory_available() {
  if (const char* env = std::getenv("MOCBENCH_HOST_MEMORY_MIB"); env && *env) {
    if (const auto mib = parse_bytes(env)) return HostMemory{*mib << 20, "MOCBENCH_HOST_MEMORY_MIB"};
  }
  std::optional<HostMemory> best;
  auto offer = [&](std::size_t bytes, const char* source) {
    if (!best || bytes < best->available_bytes) best = HostMemory{bytes, source};
  };
  if (const auto m = read_file("/proc/meminfo"))
    if (const auto a = parse_meminfo_available(*m)) offer(*a, "MemAvailable");
  // cgroup v2, else v1: the limit less what the group already uses.
  const auto v2_max = read_file("/sys/fs/cgroup/memory.max"), v2_cur = read_file("/sys/fs/cgroup/memory.current");
  if (v2_max && v2_cur) {
    const auto lim = parse_cgroup_limit(*v2_max);
    const auto cur = parse_bytes(*v2_cur);
    if (lim && cur) offer(*lim > *cur ? *lim - *cur : 0, "cgroup v2 (memory.max - memory.current)");
  } else {
    const auto v1_lim = read_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    const auto v1_use = read_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    if (v1_lim && v1_use) {
      const auto lim = parse_cgroup_limit(*v1_lim);
      const auto cur = parse_bytes(*v1_use);
      if (lim && cur) offer(*lim > *cur ? *lim - *cur : 0, "cgroup v1 (limit - usage)");
    }
  }
  return best;
}

std::size_t default_cpu_memory_limit(const HostMemory& m) {
  const std::size_t margin = std::max<std::size_t>(std::size_t{256} << 20, m.available_bytes / 10);
  // At least 1 MiB: a limit of 0 would mean "unlimited" to the backend.
  return std::max<std::size_t>(std::size_t{1} << 20, m.available_bytes > margin ? m.available_bytes - margin : 0);
}

}  // namespace moc
