// The CUPTI tracer: CUPTI's Activity API (kernels as CUpti_ActivityKernel10, memcpy, memset, runtime and
// driver API calls, device memory records) into buffers that CUPTI hands back through
// cuptiActivityRegisterCallbacks, plus the Callback API's resource domain for the graph nodes created during
// a capture (so replayed kernels find the ranges that were open when they were captured).
//
// CUPTI is one per process: one tracer is active at a time (a second is refused), and buffers that complete
// on CUPTI's worker thread go to the active tracer under a lock.
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "profiling/tracer.h"

namespace moc::prof {
namespace {

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : ("CUPTI error " + std::to_string(static_cast<int>(r)));
}

void check(CUptiResult r, const char* call) {
  if (r != CUPTI_SUCCESS) throw std::runtime_error(std::string(call) + " failed: " + cupti_error(r));
}
#define MOC_CUPTI_CHECK(call) check((call), #call)

constexpr std::size_t kBufferBytes = std::size_t{8} << 20;

// The kinds a profile records. The kernel kind is required; the others are recorded where the GPU allows.
constexpr std::array<CUpti_ActivityKind, 6> kKinds = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MEMORY2};

// MOCBENCH_CUPTI_KINDS=kernel,memcpy,memset,runtime,driver,memory (a subset; default all) limits what is
// traced, to see what each kind costs. The kernel kind is always on.
std::vector<CUpti_ActivityKind> kinds() {
  const char* env = std::getenv("MOCBENCH_CUPTI_KINDS");
  if (env == nullptr || *env == '\0') return {kKinds.begin(), kKinds.end()};
  const std::string list = std::string(",") + env + ",";
  const std::pair<const char*, CUpti_ActivityKind> names[] = {
      {"memcpy", CUPTI_ACTIVITY_KIND_MEMCPY},   {"memset", CUPTI_ACTIVITY_KIND_MEMSET},
      {"runtime", CUPTI_ACTIVITY_KIND_RUNTIME}, {"driver", CUPTI_ACTIVITY_KIND_DRIVER},
      {"memory", CUPTI_ACTIVITY_KIND_MEMORY2}};
  std::vector<CUpti_ActivityKind> out = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
  for (const auto& [name, kind] : names)
    if (list.find(std::string(",") + name + ",") != std::string::npos) out.push_back(kind);
  return out;
}

std::string demangle(const char* name) {
  if (name == nullptr) return "<unnamed>";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return name;
  std::string out(d);
  std::free(d);
  return out;
}

// "void moc::cuda::(anonymous namespace)::gate_kernel<128, true>(float const*, int)" -> "gate_kernel": the
// function's own name, without return type, scopes, template arguments and parameters (nsys's short name).
std::string short_name(const std::string& demangled) {
  // Cut the parameter list: the last top-level '(' that closes at the end.
  std::size_t end = demangled.size();
  if (end && demangled[end - 1] == ')') {
    int depth = 0;
    for (std::size_t i = end; i-- > 0;) {
      if (demangled[i] == ')') ++depth;
      else if (demangled[i] == '(' && --depth == 0) {
        end = i;
        break;
      }
    }
  }
  std::string s = demangled.substr(0, end);
  // Drop a trailing template argument list.
  if (!s.empty() && s.back() == '>') {
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == '>') ++depth;
      else if (s[i] == '<' && --depth == 0) {
        s.resize(i);
        break;
      }
    }
  }
  // The last name after "::" or a space at template depth 0.
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '(') ++depth;
    else if (s[i] == '>' || s[i] == ')') --depth;
    else if (depth == 0 && (s[i] == ' ' || (s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':'))) start = i + 1;
  }
  while (start < s.size() && s[start] == ':') ++start;
  return start < s.size() ? s.substr(start) : demangled;
}

std::string api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const char* n = nullptr;
  if (cuptiGetCallbackName(domain, cbid, &n) != CUPTI_SUCCESS || n == nullptr) return "cbid " + std::to_string(cbid);
  std::string s(n);
  const auto v = s.rfind("_v");  // cudaLaunchKernel_v7000 -> cudaLaunchKernel
  if (v != std::string::npos && v + 2 < s.size() && s.find_first_not_of("0123456789", v + 2) == std::string::npos)
    s.resize(v);
  return s;
}

const char* copy_kind(std::uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "DtoA";
    default: return "unknown";
  }
}

const char* memory_kind(unsigned k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return "pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return "pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE: return "device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return "array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED: return "managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return "device_static";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return "managed_static";
    default: return "unknown";
  }
}

class CuptiTracer;
struct Global {
  std::mutex mu;
  CuptiTracer* active = nullptr;
  bool callbacks_registered = false;
};
Global& global() {
  static Global g;
  return g;
}

class CuptiTracer final : public Tracer {
 public:
  CuptiTracer() {
    std::lock_guard lk(global().mu);
    if (global().active) throw std::runtime_error("another CUPTI tracer is active in this process");
    if (!global().callbacks_registered) {
      MOC_CUPTI_CHECK(cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed));
      global().callbacks_registered = true;
    }
    // Fails when another CUPTI client (Nsight Systems, Nsight Compute) already owns the subscriber.
    MOC_CUPTI_CHECK(cuptiSubscribe(&subscriber_, reinterpret_cast<CUpti_CallbackFunc>(&on_callback), this));
    try {
      MOC_CUPTI_CHECK(cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
      MOC_CUPTI_CHECK(cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
    } catch (...) {
      cuptiUnsubscribe(subscriber_);
      throw;
    }
    calibrate();
    global().active = this;
  }
  ~CuptiTracer() override {
    disable();
    cudaDeviceSynchronize();  // nothing traced may still run when CUPTI detaches
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    {
      std::lock_guard lk(global().mu);
      global().active = nullptr;  // later buffers are dropped
      global().callbacks_registered = false;
    }
    cuptiUnsubscribe(subscriber_);
    // Detach CUPTI from the process: once attached it slows the graphs instantiated afterwards even with
    // every activity kind disabled (2-9% on the decode study's later points, measured on an H100), and the
    // next point's timed repetitions must run as if no profiler existed. The next tracer attaches again.
    cuptiFinalize();
  }

  void enable() override {
    if (enabled_) return;
    calibrate();
    for (auto k : kinds()) {
      const CUptiResult r = cuptiActivityEnable(k);
      if (r == CUPTI_SUCCESS) {
        enabled_kinds_.push_back(k);
      } else if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        disable();
        check(r, "cuptiActivityEnable(CONCURRENT_KERNEL)");
      } else {
        std::fprintf(stderr, "mocbench: profile: CUPTI activity kind %d not recorded: %s\n", static_cast<int>(k),
                     cupti_error(r).c_str());
      }
    }
    enabled_ = true;
  }
  void disable() override {
    for (auto k : enabled_kinds_) cuptiActivityDisable(k);
    enabled_kinds_.clear();
    enabled_ = false;
  }
  std::string source() const override { return "cupti"; }
  std::int64_t now_ns() override {
    std::uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return static_cast<std::int64_t>(t);
  }
  std::int64_t from_steady(std::chrono::steady_clock::time_point t) override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() + steady_to_cupti_ns_;
  }

  // Called by CUPTI (its worker thread or a flush) with a buffer of records.
  void take(CUcontext ctx, std::uint32_t stream_id, std::uint8_t* buffer, std::size_t valid) {
    std::lock_guard lk(mu());
    ProfileTrace& r = raw();
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          KernelRecord o;
          o.name = demangle(k->name);
          o.short_name = short_name(o.name);
          o.start_ns = static_cast<std::int64_t>(k->start);
          o.end_ns = static_cast<std::int64_t>(k->end);
          o.device_id = static_cast<int>(k->deviceId);
          o.context_id = k->contextId;
          o.stream_id = k->streamId;
          o.correlation_id = k->correlationId;
          o.grid_x = k->gridX, o.grid_y = k->gridY, o.grid_z = k->gridZ;
          o.block_x = k->blockX, o.block_y = k->blockY, o.block_z = k->blockZ;
          o.registers_per_thread = k->registersPerThread;
          o.static_shared_bytes = k->staticSharedMemory;
          o.dynamic_shared_bytes = k->dynamicSharedMemory;
          o.graph_id = k->graphId;
          o.graph_node_id = k->graphNodeId;
          r.kernels.push_back(std::move(o));
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          MemcpyRecord o;
          o.start_ns = static_cast<std::int64_t>(m->start);
          o.end_ns = static_cast<std::int64_t>(m->end);
          o.device_id = static_cast<int>(m->deviceId);
          o.context_id = m->contextId;
          o.stream_id = m->streamId;
          o.correlation_id = m->correlationId;
          o.bytes = static_cast<std::int64_t>(m->bytes);
          o.copy_kind = copy_kind(m->copyKind);
          o.src_kind = memory_kind(m->srcKind);
          o.dst_kind = memory_kind(m->dstKind);
          o.graph_id = m->graphId;
          o.graph_node_id = m->graphNodeId;
          r.memcpys.push_back(std::move(o));
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          MemsetRecord o;
          o.start_ns = static_cast<std::int64_t>(m->start);
          o.end_ns = static_cast<std::int64_t>(m->end);
          o.device_id = static_cast<int>(m->deviceId);
          o.context_id = m->contextId;
          o.stream_id = m->streamId;
          o.correlation_id = m->correlationId;
          o.bytes = static_cast<std::int64_t>(m->bytes);
          o.value = static_cast<int>(m->value);
          o.mem_kind = memory_kind(m->memoryKind);
          o.graph_id = m->graphId;
          o.graph_node_id = m->graphNodeId;
          r.memsets.push_back(std::move(o));
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
          const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
          const bool rt = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
          ApiRecord o;
          o.name = api_name(rt ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid);
          o.domain = rt ? "runtime" : "driver";
          o.start_ns = static_cast<std::int64_t>(a->start);
          o.end_ns = static_cast<std::int64_t>(a->end);
          o.correlation_id = a->correlationId;
          o.thread_id = a->threadId;
          o.return_value = static_cast<int>(a->returnValue);
          r.api.push_back(std::move(o));
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMORY2: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(rec);
          DeviceMemoryRecord o;
          o.t_ns = static_cast<std::int64_t>(m->timestamp);
          o.device_id = static_cast<int>(m->deviceId);
          o.context_id = m->contextId;
          o.stream_id = m->streamId;
          o.correlation_id = m->correlationId;
          o.address = m->address;
          o.bytes = static_cast<std::int64_t>(m->bytes);
          o.is_alloc = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
          o.mem_kind = memory_kind(m->memoryKind);
          r.device_memory.push_back(std::move(o));
          break;
        }
        default:
          break;
      }
    }
    std::size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS) r.dropped_records += dropped;
  }

 protected:
  void flush() override { MOC_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)); }

 private:
  // The offset from the host's steady clock to CUPTI's: the sample read between the closest pair of
  // steady-clock reads.
  void calibrate() {
    std::int64_t best = -1;
    for (int i = 0; i < 16; ++i) {
      const auto a = std::chrono::steady_clock::now();
      const std::int64_t c = now_ns();
      const auto b = std::chrono::steady_clock::now();
      const std::int64_t width = std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
      if (best < 0 || width < best) {
        best = width;
        const std::int64_t mid =
            std::chrono::duration_cast<std::chrono::nanoseconds>(a.time_since_epoch()).count() + width / 2;
        steady_to_cupti_ns_ = c - mid;
      }
    }
  }

  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }
  static void CUPTIAPI buffer_completed(CUcontext ctx, std::uint32_t stream_id, std::uint8_t* buffer,
                                        std::size_t /*size*/, std::size_t valid) {
    {
      std::lock_guard lk(global().mu);
      if (global().active && buffer) global().active->take(ctx, stream_id, buffer, valid);
    }
    std::free(buffer);
  }
  static void CUPTIAPI on_callback(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                   const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || data == nullptr) return;
    auto* self = static_cast<CuptiTracer*>(user);
    const auto* rd = static_cast<const CUpti_ResourceData*>(data);
    const auto* g = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
    if (g == nullptr) return;
    std::uint64_t id = 0, original = 0;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
      if (cuptiGetGraphNodeId(g->node, &id) == CUPTI_SUCCESS) self->map_graph_node(id);
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
      if (cuptiGetGraphNodeId(g->node, &id) == CUPTI_SUCCESS &&
          cuptiGetGraphNodeId(g->originalNode, &original) == CUPTI_SUCCESS)
        self->map_graph_node_clone(original, id);
    }
  }

  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::vector<CUpti_ActivityKind> enabled_kinds_;
  bool enabled_ = false;
  std::int64_t steady_to_cupti_ns_ = 0;
};

}  // namespace

std::unique_ptr<Tracer> make_cupti_tracer(std::string* why) {
  try {
    return std::make_unique<CuptiTracer>();
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return nullptr;
  }
}

}  // namespace moc::prof
