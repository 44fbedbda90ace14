// `mocbench export --format perfetto`: points' profiles as Chrome / Perfetto trace-event JSON
// ({"traceEvents": [...], "displayTimeUnit": "ns"}), for ui.perfetto.dev or chrome://tracing.
//
// Layout: one process per point (process_name "point N: axes"), with these thread tracks:
//   "Phases"                 the phase ranges as nested complete (X) events at their device projection
//                            (the host times on the CPU backend)
//   "CUDA API"               the CUDA runtime / driver API calls (one track per host thread when several)
//   "GPU D stream S"         kernels, memcpys and memsets of one (device, stream), with their launch
//                            configuration, correlation id, graph node and phase as arguments
//   "CPU ops"                the CPU backend's ops (device_id -1)
//   "GPU D stream S K stages" the device-side stage stamps of kernel K on that stream (the decode FFN kernels;
//                            an older profile's persistent k_step): one slice per stage and layer, with its
//                            barrier wait
// plus a "memory" counter (C) per allocator category (category_live_bytes), and flow arrows (s / f with
// "bp":"e") from each API record to the kernels, copies and sets with its correlation id.
// Device time: by default each kernel, memcpy and memset slice spans its exclusive part [own, end)
// (prof::TimeMode; under PDL a kernel's CUPTI record begins while it still waits for its predecessor), with
// the record's inclusive start, inclusive duration and wait as arguments; TimeMode::inclusive draws CUPTI's
// start to end. The process labels say which.
// Times are microseconds with nanosecond precision, relative to each point's trace start. Every X event of
// a track nests properly: an event that would partially overlap another of its track (CPU clocks can make
// two ops overlap) goes to an overflow track "NAME (overlap K)". Metadata events come first. Thread ids are
// unique across the file (Perfetto's importer names threads by tid alone), and each flow end sits at the
// middle of its slice so that it binds to it whatever the order of events with equal times. GPU ranges
// without device work (no projection) are left out of the Phases track.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "profiling/trace.h"

namespace moc::perfetto {

struct PointProfile {
  int index = 0;      // the point's sweep index (process id = index + 1)
  std::string label;  // "point N: axes" (the process name)
  const prof::ProfileTrace* trace = nullptr;
};

void write_trace(const std::vector<PointProfile>& points, std::ostream& out,
                 prof::TimeMode time = prof::TimeMode::exclusive);

// ns as microseconds with three decimals ("1234.567"): exact, no floating point.
std::string us_text(std::int64_t ns);

}  // namespace moc::perfetto
