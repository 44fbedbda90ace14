// A device's ceilings for the roofline (profiling/roofline.h): the copy bandwidth (bytes read + written per
// second by a large device-to-device copy, Ops::copy) and a dense GEMM's rate (Ops::gemm: bf16 8192^3 on a GPU,
// f32 1024^3 on the CPU backend), measured once per device and kept in a cache file, so each run records them
// (DEVICE_CEILINGS) without paying for them again. `mocbench devices --measure` measures afresh.
//
// Cache: $MOCBENCH_CACHE_DIR, else $XDG_CACHE_HOME/mocbench, else $HOME/.cache/mocbench; file ceilings.tsv,
// one line per device key (name, compute capability, SMs, memory clock, driver: a different card, clock or
// driver measures again). Written whole through a temporary file and a rename; an unreadable or malformed cache
// is ignored (measured again), never fatal.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/ops.h"

namespace moc {

struct DeviceCeilings {
  double copy_GBps = 0, gemm_tflops = 0;
  std::string gemm_dtype;             // "bf16" | "f32"
  std::int64_t measured_unix_ms = 0;  // when
  std::string source;                 // "measured" | "cache"
};

// Memory bandwidth the way nvbench and the paper quote it (a device-to-device copy of a buffer far larger than
// the last-level cache, (read + write bytes) / time, median of 15) and the GEMM rate. Both numbers on `ops` now (about a second on an H100; a few tenths on the CPU backend).
DeviceCeilings measure_ceilings(Ops& ops);
// The copy bandwidth alone (GB/s, read + write), as measure_ceilings takes it.
double copy_bandwidth_GBps(Ops& ops);

std::string ceilings_cache_path();  // "" when no folder can be named (no HOME)
std::optional<DeviceCeilings> cached_ceilings(const std::string& key);
// Best effort: false (and *why) when the cache cannot be written.
bool store_ceilings(const std::string& key, const DeviceCeilings& c, std::string* why = nullptr);
// From the cache, else measured on ops and cached.
DeviceCeilings ceilings_for(const std::string& key, Ops& ops);

}  // namespace moc
