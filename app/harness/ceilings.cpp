#include "app/harness/ceilings.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace moc {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Keys hold no tab or newline (they separate fields and lines).
std::string clean(std::string s) {
  for (auto& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

std::map<std::string, DeviceCeilings> read_cache(const std::string& path) {
  std::map<std::string, DeviceCeilings> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string key, copy, gemm, dtype, when;
    if (!std::getline(ls, key, '\t') || !std::getline(ls, copy, '\t') || !std::getline(ls, gemm, '\t') ||
        !std::getline(ls, dtype, '\t') || !std::getline(ls, when))
      continue;
    try {
      DeviceCeilings c;
      c.copy_GBps = std::stod(copy);
      c.gemm_tflops = std::stod(gemm);
      c.gemm_dtype = dtype;
      c.measured_unix_ms = std::stoll(when);
      c.source = "cache";
      if (c.copy_GBps > 0 && c.gemm_tflops > 0) out[key] = c;
    } catch (const std::exception&) {
      // a damaged line: measured again
    }
  }
  return out;
}

}  // namespace

double copy_bandwidth_GBps(Ops& ops) {
  const std::int64_t n = ops.device() == DeviceKind::cuda ? (std::int64_t{512} << 20) : (std::int64_t{32} << 20);
  Tensor a = ops.empty({n}, DType::bf16, workspace_tag()), b = ops.empty({n}, DType::bf16, workspace_tag());
  ops.fill(a, 1.0f);
  std::vector<double> t;
  for (int i = 0; i < 15; ++i) t.push_back(ops.timed([&] { ops.copy(b, a); }));
  return 2.0 * static_cast<double>(a.nbytes()) / median(t) / 1e9;
}

DeviceCeilings measure_ceilings(Ops& ops) {
  DeviceCeilings c;
  c.copy_GBps = copy_bandwidth_GBps(ops);
  const bool gpu = ops.device() == DeviceKind::cuda;
  const std::int64_t n = gpu ? 8192 : 1024;
  const DType dt = gpu ? DType::bf16 : DType::f32;
  Tensor a = ops.empty({n, n}, dt, workspace_tag()), b = ops.empty({n, n}, dt, workspace_tag()),
         out = ops.empty({n, n}, dt, workspace_tag());
  ops.fill(a, 0.01f);
  ops.fill(b, 0.01f);
  ops.gemm(a, false, b, false, out);  // warm-up (the library picks its kernel)
  std::vector<double> t;
  for (int i = 0; i < (gpu ? 20 : 3); ++i) t.push_back(ops.timed([&] { ops.gemm(a, false, b, false, out); }));
  c.gemm_tflops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / median(t) / 1e12;
  c.gemm_dtype = gpu ? "bf16" : "f32";
  c.measured_unix_ms = now_unix_ms();
  c.source = "measured";
  return c;
}

std::string ceilings_cache_path() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("MOCBENCH_CACHE_DIR"); d && *d) return (fs::path(d) / "ceilings.tsv").string();
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (fs::path(x) / "mocbench" / "ceilings.tsv").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "mocbench" / "ceilings.tsv").string();
  return "";
}

std::optional<DeviceCeilings> cached_ceilings(const std::string& key) {
  const std::string path = ceilings_cache_path();
  if (path.empty()) return std::nullopt;
  const auto all = read_cache(path);
  auto it = all.find(clean(key));
  if (it == all.end()) return std::nullopt;
  return it->second;
}

bool store_ceilings(const std::string& key, const DeviceCeilings& c, std::string* why) {
  namespace fs = std::filesystem;
  const std::string path = ceilings_cache_path();
  if (path.empty()) {
    if (why) *why = "no cache folder (set MOCBENCH_CACHE_DIR or HOME)";
    return false;
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  auto all = read_cache(path);
  DeviceCeilings k = c;
  all[clean(key)] = k;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    for (const auto& [name, v] : all) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "\t%.6g\t%.6g\t", v.copy_GBps, v.gemm_tflops);
      f << name << buf << v.gemm_dtype << '\t' << v.measured_unix_ms << '\n';
    }
    f.flush();
    if (!f) {
      fs::remove(tmp, ec);
      if (why) *why = "cannot write " + tmp;
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    if (why) *why = "cannot replace " + path + ": " + ec.message();
    return false;
  }
  return true;
}

DeviceCeilings ceilings_for(const std::string& key, Ops& ops) {
  if (auto c = cached_ceilings(key)) return *c;
  DeviceCeilings c = measure_ceilings(ops);
  store_ceilings(key, c);
  return c;
}

}  // namespace moc
