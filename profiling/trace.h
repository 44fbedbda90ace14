// A point's profile: what ran during its profiled step(s), on one clock. The CUPTI tracer (GPU) and the
// recording Ops decorator (CPU backend) produce it; the results database stores it in tables named after
// Nsight Systems' SQLite export (db/README.md); `mocbench stats`, the Perfetto export and the dashboard read
// it back. Plain data: no CUDA, no SQLite.
//
// Clock: every *_ns is on the trace clock -- CUPTI's timestamps on the GPU (host ranges and allocator events
// are converted onto it), the host's steady clock on the CPU backend -- so kernels, phase ranges and memory
// line up on one timeline. Only differences are meaningful; ProfileTrace::start_ns is the window's start.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moc::prof {

// One kernel (GPU) or one op (CPU backend: name = short_name = the Ops method, device_id = -1, no launch
// configuration). Columns follow CUPTI_ACTIVITY_KIND_KERNEL / CUpti_ActivityKernel10.
struct KernelRecord {
  std::string name;        // demangled name
  std::string short_name;  // the name without namespace, template arguments and parameters
  std::int64_t start_ns = 0, end_ns = 0;
  int device_id = -1;  // -1: a CPU op
  std::uint32_t context_id = 0, stream_id = 0, correlation_id = 0;
  int grid_x = 0, grid_y = 0, grid_z = 0, block_x = 0, block_y = 0, block_z = 0;
  int registers_per_thread = 0, static_shared_bytes = 0, dynamic_shared_bytes = 0;
  std::uint32_t graph_id = 0;       // 0: not launched from a CUDA graph
  std::uint64_t graph_node_id = 0;  // the graph node that launched it (0: none)
  std::int64_t range_id = -1;       // innermost PhaseRange::id it belongs to (-1: outside every range)
  int step = 0;                     // which profiled step (0-based)
  // What the op that launched it declared (kernels/op_cost.h): the bytes it must move and its FLOPs, for the
  // roofline. op_call: one declaration in one step (several kernels of one op share it, and its cost);
  // -1 with op_bytes = -1: nothing was declared. op_bound: op_bytes is an upper bound (data-dependent).
  std::string op;
  std::int64_t op_bytes = -1, op_flops = -1;
  std::int64_t op_call = -1;
  bool op_bound = false;
  bool operator==(const KernelRecord&) const = default;
};

// CUPTI_ACTIVITY_KIND_MEMCPY. copy_kind: "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "unknown".
struct MemcpyRecord {
  std::int64_t start_ns = 0, end_ns = 0;
  int device_id = 0;
  std::uint32_t context_id = 0, stream_id = 0, correlation_id = 0;
  std::int64_t bytes = 0;
  std::string copy_kind, src_kind, dst_kind;  // src/dst: "pageable", "pinned", "device", "managed", ...
  std::uint32_t graph_id = 0;
  std::uint64_t graph_node_id = 0;
  std::int64_t range_id = -1;
  int step = 0;
  bool operator==(const MemcpyRecord&) const = default;
};

// CUPTI_ACTIVITY_KIND_MEMSET.
struct MemsetRecord {
  std::int64_t start_ns = 0, end_ns = 0;
  int device_id = 0;
  std::uint32_t context_id = 0, stream_id = 0, correlation_id = 0;
  std::int64_t bytes = 0;
  int value = 0;
  std::string mem_kind;  // "device", "pinned", ...
  std::uint32_t graph_id = 0;
  std::uint64_t graph_node_id = 0;
  std::int64_t range_id = -1;
  int step = 0;
  bool operator==(const MemsetRecord&) const = default;
};

// A CUDA runtime or driver API call (CUPTI_ACTIVITY_KIND_RUNTIME / _DRIVER). correlation_id ties a launch
// to the kernel, memcpy or memset it started (launch-to-start latency = kernel start - API start).
struct ApiRecord {
  std::string name;    // "cudaLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch", ...
  std::string domain;  // "runtime" | "driver"
  std::int64_t start_ns = 0, end_ns = 0;
  std::uint32_t correlation_id = 0;
  std::uint32_t thread_id = 0;
  int return_value = 0;
  bool operator==(const ApiRecord&) const = default;
};

// CUPTI_ACTIVITY_KIND_MEMORY2: a device allocation or free by the CUDA driver (cudaMalloc/cudaFree, pools).
struct DeviceMemoryRecord {
  std::int64_t t_ns = 0;
  int device_id = 0;
  std::uint32_t context_id = 0, stream_id = 0, correlation_id = 0;
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  bool is_alloc = true;  // false: a free
  std::string mem_kind;  // "device", "pinned", "managed", ...
  bool operator==(const DeviceMemoryRecord&) const = default;
};

// One opened-and-closed phase range (step, layer.N, attention, ffn.gate, ffn.topk, ffn.up, ffn.down, head,
// optimizer, ...) of a profiled step. host_* is when the host pushed and popped it (the NVTX range);
// start/end is where its work ran: the span from the first start to the last end of the kernels, copies
// and sets attributed to it or to its children (the device projection nsys calls "GPU projection"; on
// the CPU backend the host times). A range whose ops all ran inside a CUDA graph was pushed only while the
// graph was captured; each replay gets its own PhaseRange (same name, parent structure and step) whose
// host_start_ns = host_end_ns = 0 (the host did not open it during the trace: nvtx_sum skips such ranges).
struct PhaseRange {
  std::int64_t id = 0;
  std::int64_t parent_id = -1;  // -1: a root range
  std::string name;
  int depth = 0;  // 0 for a root
  int step = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t host_start_ns = 0, host_end_ns = 0;
  int ops = 0;  // kernels, memcpys and memsets attributed to it or to its children
  bool operator==(const PhaseRange&) const = default;
};

// The engine allocator's timeline during the profiled steps (category-tagged, as memory_events), on the
// trace clock. The first events of a trace (bytes = 0) give each category's live bytes when it began.
struct AllocatorEvent {
  std::int64_t t_ns = 0;
  std::string category, module;
  int layer = -1;
  std::int64_t bytes = 0;                // +allocated / -released
  std::int64_t category_live_bytes = 0;  // the category's live bytes after this event
  bool operator==(const AllocatorEvent&) const = default;
};

// One stage of one launch of a stamped kernel (the decode FFN's k_gate, k_select, k_updown; profiles recorded
// before its retirement also hold the persistent decode step's k_step, per layer), from the kernel's own
// device-side stamps (%globaltimer; Ops::take_stamps): the stages of a launch tile it from its first block's
// start to its last block's end, and are placed on the trace clock by aligning the launch's stamped end
// with the end of its kernel record (the n-th stamped launch of a step is the n-th record of that kernel in
// the step). The harness runs its profiled steps unstamped and gives each the launches of one untraced
// stamped repetition of the same work (app/harness/point_bench.cpp): stamping would lengthen the kernels it
// splits. Stored in STAGE_STAMPS (db/README.md).
struct StageRecord {
  int step = 0;
  std::string kernel;               // the kernel's short name ("k_updown"; "k_step" in older profiles)
  int launch = 0;                   // which launch of that kernel in the step (0-based)
  std::int64_t range_id = -1;       // the kernel record's phase range
  int layer = -1;                   // -1: not known (the decode FFN kernels), or k_step's start, head, output
  std::string stage;                // "gate", "gate & up", "top-K", "up", "down"; k_step also "start", "qkv",
                                    // "attention", "o", "head", "output"
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t wait_ns = 0;  // time the launch's blocks waited at the grid barrier ending the stage, mean per
                             // block (k_step's; 0 for kernels without grid barriers)
  bool operator==(const StageRecord&) const = default;
};

struct ProfileTrace {
  std::string source;  // "cupti" | "cpu"
  int steps = 0;       // profiled steps (repetitions of the point's unit of work)
  std::int64_t start_ns = 0, end_ns = 0;  // the traced window
  std::uint64_t dropped_records = 0;      // records CUPTI dropped (reported, never silent)
  std::vector<KernelRecord> kernels;
  std::vector<MemcpyRecord> memcpys;
  std::vector<MemsetRecord> memsets;
  std::vector<ApiRecord> api;
  std::vector<DeviceMemoryRecord> device_memory;
  std::vector<PhaseRange> ranges;
  std::vector<AllocatorEvent> allocator;
  std::vector<StageRecord> stages;   // by step, launch, then time
  std::uint64_t dropped_stamps = 0;  // stamped launches the device buffer could not hold
  bool operator==(const ProfileTrace&) const = default;
};

// nsys's name of a copy kind: "HtoD" -> "[CUDA memcpy Host-to-Device]" (stats and the Perfetto export).
std::string memcpy_operation(const std::string& copy_kind);

// Busy time of the device(s): the length of the union of every kernel, memcpy and memset interval.
std::int64_t busy_ns(const ProfileTrace& t);
// The profiled steps' spans summed: per step, from its first op's start to its last op's end (kernels,
// memcpys, memsets). span - busy is the time the device sat idle between the step's ops (launch gaps).
std::int64_t step_span_ns(const ProfileTrace& t);

// How a record's device time is counted.
//   inclusive: end - start, as CUPTI reports it. Under programmatic dependent launch (PDL) a kernel starts
//              early and waits for its predecessor inside its record; a graph may start a node early too. The
//              inclusive times of overlapping records count the shared part twice (or more).
//   exclusive: the time a record alone accounts for. Wherever records overlap, the instant belongs to the
//              one that started earlier (ties: the one that ends first, then kernels before copies before
//              sets, then record order). A record's exclusive part is then one interval, [own, end) with
//              own = max(start, the latest end of every record that started before it), or nothing when an
//              earlier record outlasts it; the exclusive times of a trace sum to busy_ns() exactly. Two
//              streams running at once: the later-started record gets only what it added to the busy time.
// Exclusive is the default everywhere a per-op time is shown (stats, dashboard, report, Perfetto).
enum class TimeMode { exclusive, inclusive };
const char* time_mode_name(TimeMode m);  // "exclusive" | "inclusive"
// "exclusive" / "inclusive" -> the mode; false for anything else.
bool parse_time_mode(const std::string& text, TimeMode* out);

// Every kernel, memcpy and memset of a trace timed under one mode, parallel to the trace's vectors.
struct DeviceTimes {
  TimeMode mode = TimeMode::exclusive;
  std::vector<std::int64_t> kernels, memcpys, memsets;              // duration (ns), >= 0
  std::vector<std::int64_t> kernel_own, memcpy_own, memset_own;     // where the counted part begins: start
                                                                    // (inclusive) or own (exclusive; = end
                                                                    // when it owns nothing)
  // [start, own) of an exclusive record is the part that overlapped earlier work (a PDL kernel's wait).
  bool operator==(const DeviceTimes&) const = default;
};
DeviceTimes device_times(const ProfileTrace& t, TimeMode mode);

// For each of t.stages, the index in t.kernels of the launch's kernel record (the `launch`-th record of that
// kernel in the stage's step, by start), or -1 when the trace has no such record.
std::vector<std::ptrdiff_t> stage_kernels(const ProfileTrace& t);

}  // namespace moc::prof
