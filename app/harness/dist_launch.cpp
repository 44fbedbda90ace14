#include "app/harness/dist_launch.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "model/config.h"

namespace moc {

namespace {

constexpr std::size_t kIdBytes = 128;  // sizeof(ncclUniqueId)

struct Contract {
  const char* name;
  const char *rank, *world, *local;
};
constexpr Contract kContracts[] = {
    {"mocbench", "MOCBENCH_RANK", "MOCBENCH_WORLD_SIZE", "MOCBENCH_LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"MPICH / Intel MPI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun-style", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

int parse_int(const char* name, const char* text, int min) {
  int v = 0;
  const std::string s(text);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw ConfigError(std::string(name) + "='" + s + "' is not an integer");
  if (v < min) throw ConfigError(std::string(name) + "=" + s + " must be at least " + std::to_string(min));
  return v;
}

}  // namespace

std::string id_to_hex(const std::vector<unsigned char>& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : id) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::vector<unsigned char> id_from_hex(const std::string& hex) {
  if (hex.size() != 2 * kIdBytes)
    throw ConfigError("an NCCL unique id is " + std::to_string(2 * kIdBytes) + " hex digits, got " +
                      std::to_string(hex.size()));
  std::vector<unsigned char> id(kIdBytes);
  auto nibble = [&](char c) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) throw ConfigError(std::string("an NCCL unique id holds a non-hex character '") + c + "'");
    return static_cast<unsigned char>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
  };
  for (std::size_t i = 0; i < kIdBytes; ++i) id[i] = static_cast<unsigned char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return id;
}

DistEnv read_dist_env(const EnvLookup& env) {
  DistEnv d;
  auto get = [&](const char* n) -> const char* {
    const char* v = env(n);
    return v != nullptr && *v ? v : nullptr;
  };
  for (const auto& c : kContracts) {
    const char *r = get(c.rank), *w = get(c.world), *l = get(c.local);
    if (!r && !w) {
      if (l && c.name == std::string("mocbench"))
        throw ConfigError(std::string(c.local) + " is set without " + c.rank + " and " + c.world);
      continue;
    }
    if (!r || !w)
      throw ConfigError(std::string(c.name) + " launch: " + (r ? c.world : c.rank) + " is missing (" + c.rank + " and " +
                        c.world + " go together)");
    d.source = c.name;
    d.world = parse_int(c.world, w, 1);
    d.rank = parse_int(c.rank, r, 0);
    if (d.rank >= d.world)
      throw ConfigError(std::string(c.rank) + "=" + r + " is not below " + c.world + "=" + w);
    d.local_rank = l ? parse_int(c.local, l, 0) : (d.world == 1 ? 0 : -1);
    if (d.local_rank < 0)
      throw ConfigError(std::string(c.name) + " launch: " + c.local + " is missing: which GPU of this machine is rank " + r +
                        "'s");
    break;
  }
  if (const char* id = get("MOCBENCH_NCCL_ID")) {
    (void)id_from_hex(id);
    d.nccl_id = id;
  }
  if (const char* f = get("MOCBENCH_NCCL_ID_FILE")) d.nccl_id_file = f;
  if (const char* t = get("MOCBENCH_NCCL_ID_TIMEOUT_S")) d.id_timeout_s = parse_int("MOCBENCH_NCCL_ID_TIMEOUT_S", t, 1);
  if (d.world > 1 && d.nccl_id.empty() && d.nccl_id_file.empty())
    throw ConfigError("a " + d.source + " launch of " + std::to_string(d.world) +
                      " ranks needs the NCCL unique id: set MOCBENCH_NCCL_ID (mocbench's launcher does) or "
                      "MOCBENCH_NCCL_ID_FILE (a path every rank sees; rank 0 writes it)");
  return d;
}

DistEnv read_dist_env() {
  return read_dist_env([](const char* n) { return std::getenv(n); });
}

std::vector<std::string> worker_environment(int rank, int n, const std::string& id_setting,
                                            const std::vector<std::string>& devices) {
  if (n < 1 || rank < 0 || rank >= n) throw ConfigError("worker " + std::to_string(rank) + " of " + std::to_string(n));
  check_gpu_count(n, static_cast<int>(devices.size()));
  return {"MOCBENCH_RANK=" + std::to_string(rank),
          "MOCBENCH_WORLD_SIZE=" + std::to_string(n),
          "MOCBENCH_LOCAL_RANK=0",  // each worker sees exactly its own GPU
          id_setting,
          "CUDA_VISIBLE_DEVICES=" + devices[static_cast<std::size_t>(rank)],
          "NCCL_NVLS_ENABLE=0"};
}

std::vector<std::string> visible_devices(const char* cvd, int count) {
  std::vector<std::string> out;
  if (cvd != nullptr && *cvd) {
    std::string cur;
    for (const char* c = cvd;; ++c) {
      if (*c == ',' || *c == 0) {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
        if (*c == 0) break;
      } else if (!std::isspace(static_cast<unsigned char>(*c))) {
        cur += *c;
      }
    }
    if (static_cast<int>(out.size()) > count) out.resize(static_cast<std::size_t>(std::max(0, count)));
    return out;
  }
  for (int i = 0; i < count; ++i) out.push_back(std::to_string(i));
  return out;
}

std::vector<unsigned char> acquire_nccl_id(const DistEnv& d, const std::function<std::vector<unsigned char>()>& make) {
  if (!d.nccl_id.empty()) return id_from_hex(d.nccl_id);
  if (d.nccl_id_file.empty()) {
    if (d.world == 1) return make();
    throw ConfigError("no NCCL unique id: set MOCBENCH_NCCL_ID or MOCBENCH_NCCL_ID_FILE");
  }
  const std::filesystem::path file(d.nccl_id_file);
  if (d.rank == 0) {
    const auto id = make();
    const std::filesystem::path tmp = file.string() + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream o(tmp, std::ios::trunc);
      o << id_to_hex(id) << "\n";
      if (!o) throw ConfigError("MOCBENCH_NCCL_ID_FILE: cannot write " + tmp.string());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, file, ec);
    if (ec) throw ConfigError("MOCBENCH_NCCL_ID_FILE: cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message());
    return id;
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    std::ifstream f(file);
    std::string hex;
    if (f >> hex && hex.size() == 2 * kIdBytes) return id_from_hex(hex);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > d.id_timeout_s)
      throw ConfigError("rank " + std::to_string(d.rank) + " waited " + std::to_string(static_cast<int>(d.id_timeout_s)) +
                        " s for rank 0's NCCL id in " + file.string() +
                        " (MOCBENCH_NCCL_ID_FILE); is rank 0 running, and is the path on a filesystem every rank sees?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void check_gpu_count(int gpus, int available) {
  if (gpus < 1) throw ConfigError("gpus must be at least 1, got " + std::to_string(gpus));
  if (gpus > available)
    throw ConfigError("gpus = " + std::to_string(gpus) + " but this machine has " + std::to_string(available) +
                      " usable GPU" + (available == 1 ? "" : "s") +
                      " (CUDA_VISIBLE_DEVICES limits what mocbench sees); lower gpus, or run ranks on several machines "
                      "with MPI or Slurm (docs/multi-gpu.md)");
}

}  // namespace moc

namespace moc {

void join_rank_metrics(Communicator& comm, std::vector<std::pair<std::string, double>>& metrics) {
  const int world = comm.world();
  if (world == 1) return;
  // The same names in the same order on every rank: compare a hash of them first.
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& [name, v] : metrics)
    for (char c : name + ";") h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  const auto hashes = comm.all_gather({static_cast<double>(h >> 11), static_cast<double>(metrics.size())});
  for (int r = 1; r < world; ++r)
    if (hashes[2 * static_cast<std::size_t>(r)] != hashes[0] || hashes[2 * static_cast<std::size_t>(r) + 1] != hashes[1])
      throw std::runtime_error("rank " + std::to_string(r) + " measured other metrics than rank 0");
  std::vector<double> mine;
  for (const auto& kv : metrics) mine.push_back(kv.second);
  const auto all = comm.all_gather(mine);
  if (comm.rank() != 0) return;
  const std::size_t n = metrics.size();
  auto at = [&](int r, std::size_t i) { return all[static_cast<std::size_t>(r) * n + i]; };
  auto over = [&](std::size_t i, auto op) {
    double acc = at(0, i);
    for (int r = 1; r < world; ++r) acc = op(acc, at(r, i));
    return acc;
  };
  const auto sum = [](double a, double b) { return a + b; };
  const auto max = [](double a, double b) { return std::max(a, b); };
  std::vector<std::pair<std::string, double>> out, per_rank;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& name = metrics[i].first;
    double v = metrics[i].second;
    if (name == "tokens_per_s") {
      v = over(i, sum);
      out.push_back({"tokens_per_s_per_gpu", v / world});
    } else if (name == "model_tflops") {
      v = over(i, sum);
    } else if (name == "mfu_pct") {
      v = over(i, sum) / world;
    } else if (name == "step_ms" || name == "median_ms") {
      v = over(i, max);
    } else if (name == "peak_bytes") {
      out.push_back({"peak_bytes_max", over(i, max)});
    }
    out.push_back({name, v});
    const bool keep = name == "step_ms" || name == "tokens_per_s" || name == "loss_last" || name == "comm_ms" ||
                      name == "comm_exposed_ms" || (name.starts_with("peak_") && name.ends_with("_bytes"));
    if (keep)
      for (int r = 0; r < world; ++r) per_rank.push_back({"rank" + std::to_string(r) + "_" + name, at(r, i)});
  }
  out.push_back({"ranks", static_cast<double>(world)});
  out.insert(out.end(), per_rank.begin(), per_rank.end());
  metrics = std::move(out);
}

}  // namespace moc
