// How much host memory a CPU-backend point may use: by default what the machine (or the cgroup the process
// runs in) can still give, less a margin, so a point that cannot fit is refused by the backend's allocator as
// OutOfMemory -- stored as `oom`, the sweep going on -- instead of the kernel's OOM killer ending the process.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace moc {

struct HostMemory {
  std::size_t available_bytes = 0;
  std::string source;  // "MemAvailable", "cgroup v2 (memory.max - memory.current)", "MOCBENCH_HOST_MEMORY_MIB"
};

// The lower of /proc/meminfo's MemAvailable and the cgroup's limit less its usage (v2, else v1); the
// environment variable MOCBENCH_HOST_MEMORY_MIB overrides both (tests, or to leave room for other work).
// nullopt when none can be read.
std::optional<HostMemory> host_memory_available();

// The CPU backend's default limit: available less max(256 MiB, 10%) for what its allocator does not count
// (code, OpenBLAS and OpenMP buffers, the database, the profile being recorded).
std::size_t default_cpu_memory_limit(const HostMemory& m);

// Parsers, exposed for the tests: MemAvailable (bytes) from /proc/meminfo's text; a cgroup limit file's text
// ("max" or a byte count; v1 reports "unlimited" as a huge number) as bytes, nullopt when unlimited.
std::optional<std::size_t> parse_meminfo_available(const std::string& meminfo);
std::optional<std::size_t> parse_cgroup_limit(const std::string& text);

}  // namespace moc
