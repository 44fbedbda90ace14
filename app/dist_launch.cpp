#include "app/dist_launch.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

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

std::vector<std::string> worker_environment(int rank, int n, const std::string& nccl_id_hex,
                                            const std::vector<int>& devices) {
  if (n < 1 || rank < 0 || rank >= n) throw ConfigError("worker " + std::to_string(rank) + " of " + std::to_string(n));
  check_gpu_count(n, static_cast<int>(devices.size()));
  return {"MOCBENCH_RANK=" + std::to_string(rank),
          "MOCBENCH_WORLD_SIZE=" + std::to_string(n),
          "MOCBENCH_LOCAL_RANK=0",  // each worker sees exactly its own GPU
          "MOCBENCH_NCCL_ID=" + nccl_id_hex,
          "CUDA_VISIBLE_DEVICES=" + std::to_string(devices[static_cast<std::size_t>(rank)]),
          "NCCL_NVLS_ENABLE=0"};
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
