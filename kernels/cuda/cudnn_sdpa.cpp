// cuDNN fused SDPA (causal, GQA) behind attention_forward/backward for bf16: graphs built with the cuDNN
// frontend (header-only, scripts/setup_cudnn_frontend.sh), one per shape and direction, cached for the
// process. Compiled as plain C++ (one translation unit: the frontend headers are heavy); without the
// frontend (MOCBENCH_HAVE_CUDNN_SDPA unset) every entry point answers "not here".
#include "kernels/cuda/cudnn_sdpa.h"

#include <atomic>

#if MOCBENCH_HAVE_CUDNN_SDPA
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#endif

namespace moc::cuda {
namespace {
std::atomic<std::int64_t> g_forward_runs{0}, g_backward_runs{0};
}  // namespace

CudnnSdpaRuns cudnn_sdpa_runs() { return {g_forward_runs.load(), g_backward_runs.load()}; }

#if !MOCBENCH_HAVE_CUDNN_SDPA

bool cudnn_sdpa_built() { return false; }
bool cudnn_sdpa_forward(Ops&, const SdpaShape&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  return false;
}
bool cudnn_sdpa_backward(Ops&, const SdpaShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) {
  return false;
}

#else

namespace fe = cudnn_frontend;

namespace {

// Tensor ids in the variant packs.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

enum class Dir { forward, backward };

struct Key {
  int device;
  Dir dir;
  int b, s, h, kvh, hd;
  bool operator<(const Key& o) const {
    return std::tie(device, dir, b, s, h, kvh, hd) < std::tie(o.device, o.dir, o.b, o.s, o.h, o.kvh, o.hd);
  }
};

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the shape
  std::int64_t workspace_bytes = 0;
};

// Process-wide: a handle per device and the plans. Never destroyed (cuDNN handles must not be torn
// down after the CUDA runtime at exit); one mutex orders set-stream + execute on a shared handle.
struct Cache {
  std::mutex mu;
  std::map<int, cudnnHandle_t> handles;
  std::map<Key, Plan> plans;
};
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuDNN SDPA: ") + what + " failed: " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

cudnnHandle_t handle_locked(Cache& c, int device) {
  auto it = c.handles.find(device);
  if (it != c.handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t st = cudnnCreate(&h);
  if (st != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cudnnCreate failed: ") + cudnnGetErrorString(st));
  c.handles.emplace(device, h);
  return h;
}

// MOCBENCH_ATTN=own forces the own kernels; read on every call so a benchmark or test can switch.
bool forced_own() {
  const char* e = std::getenv("MOCBENCH_ATTN");
  return e && std::strcmp(e, "own") == 0;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0; }

// A [b, s, heads, hd] bf16 buffer as cuDNN's logical [b, heads, s, hd].
fe::graph::Tensor_attributes& as_bshd(fe::graph::Tensor_attributes& t, const char* name, Uid uid, const Key& k,
                                      int heads) {
  const std::int64_t s = k.s, hd = k.hd, hh = heads;
  return t.set_name(name)
      .set_uid(uid)
      .set_dim({k.b, hh, s, hd})
      .set_stride({s * hh * hd, hd, hh * hd, 1})
      .set_data_type(fe::DataType_t::BFLOAT16);
}
fe::graph::Tensor_attributes bshd(const char* name, Uid uid, const Key& k, int heads) {
  fe::graph::Tensor_attributes t;
  return as_bshd(t, name, uid, k, heads);
}
// lse [b, h, s] f32 = cuDNN's stats [b, h, s, 1].
fe::graph::Tensor_attributes& as_stats(fe::graph::Tensor_attributes& t, const Key& k) {
  const std::int64_t s = k.s, h = k.h;
  return t.set_name("stats")
      .set_uid(kStats)
      .set_dim({k.b, h, s, 1})
      .set_stride({h * s, s, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

float scale_of(const Key& k) { return 1.0f / std::sqrt(static_cast<float>(k.hd)); }

std::shared_ptr<fe::graph::Graph> forward_graph(const Key& k) {
  auto g = new_graph();
  auto q = g->tensor(bshd("q", kQ, k, k.h));
  auto kt = g->tensor(bshd("k", kK, k, k.kvh));
  auto v = g->tensor(bshd("v", kV, k, k.kvh));
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("sdpa_fwd")
                  .set_generate_stats(true)
                  .set_attn_scale(scale_of(k))
                  .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)  // causal: key j <= query i
                  .set_diagonal_band_right_bound(0);
  auto [o, stats] = g->sdpa(q, kt, v, opts);
  as_bshd(*o, "o", kO, k, k.h).set_output(true);
  as_stats(*stats, k).set_output(true);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Key& k, bool deterministic) {
  auto g = new_graph();
  auto q = g->tensor(bshd("q", kQ, k, k.h));
  auto kt = g->tensor(bshd("k", kK, k, k.kvh));
  auto v = g->tensor(bshd("v", kV, k, k.kvh));
  auto o = g->tensor(bshd("o", kO, k, k.h));
  auto dout = g->tensor(bshd("do", kDO, k, k.h));
  fe::graph::Tensor_attributes st;
  auto stats = g->tensor(as_stats(st, k));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("sdpa_bwd")
                  .set_attn_scale(scale_of(k))
                  .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                  .set_diagonal_band_right_bound(0)
                  .set_deterministic_algorithm(deterministic);
  auto [dq, dk, dv] = g->sdpa_backward(q, kt, v, o, dout, stats, opts);
  as_bshd(*dq, "dq", kDQ, k, k.h).set_output(true);
  as_bshd(*dk, "dk", kDK, k, k.kvh).set_output(true);
  as_bshd(*dv, "dv", kDV, k, k.kvh).set_output(true);
  return g;
}

// Builds the plan for k: the backward deterministic when cuDNN offers that (as the own kernels are),
// else its default. A refusal is kept as a null graph and reported once.
Plan build_plan(cudnnHandle_t handle, const Key& k) {
  std::string why;
  for (int attempt = 0; attempt < (k.dir == Dir::forward ? 1 : 2); ++attempt) {
    try {
      auto g = k.dir == Dir::forward ? forward_graph(k) : backward_graph(k, /*deterministic=*/attempt == 0);
      fe::error_t st = g->build(handle, {fe::HeurMode_t::A});
      if (st.is_good()) {
        Plan p{g, 0};
        st = g->get_workspace_size(p.workspace_bytes);
        if (st.is_good()) return p;
      }
      why = st.get_message();
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  std::fprintf(stderr,
               "mocbench: cuDNN SDPA %s refused b %d s %d h %d kvh %d hd %d (%s); the own attention kernels run it\n",
               k.dir == Dir::forward ? "forward" : "backward", k.b, k.s, k.h, k.kvh, k.hd, why.c_str());
  return {};
}

// Runs the plan of k with these pointers, or returns false (refused shape; or a stream capture that
// would have to build it: a plan is built outside captures only).
bool run(Ops& ops, const Key& key_in, std::unordered_map<std::int64_t, void*>& pack) {
  Key key = key_in;
  check_cuda(cudaGetDevice(&key.device), "cudaGetDevice");
  cudaStream_t stream = static_cast<cudaStream_t>(ops.stream());
  Cache& c = cache();
  std::unique_lock lock(c.mu);
  auto it = c.plans.find(key);
  if (it == c.plans.end()) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(stream, &cap), "cudaStreamIsCapturing");
    if (cap != cudaStreamCaptureStatusNone) return false;
    it = c.plans.emplace(key, build_plan(handle_locked(c, key.device), key)).first;
  }
  const Plan& plan = it->second;
  if (!plan.graph) return false;
  cudnnHandle_t handle = handle_locked(c, key.device);
  // The workspace comes from the ops allocator; released after the launch, it is reused in stream order.
  Tensor ws;
  if (plan.workspace_bytes > 0)
    ws = ops.empty({(plan.workspace_bytes + 3) / 4}, DType::f32, workspace_tag());
  cudnnStatus_t cst = cudnnSetStream(handle, stream);
  if (cst != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cudnnSetStream failed: ") + cudnnGetErrorString(cst));
  fe::error_t st = plan.graph->execute(handle, pack, ws.defined() ? ws.raw() : nullptr);
  if (!st.is_good()) throw std::runtime_error("cuDNN SDPA execute failed: " + st.get_message());
  return true;
}

// What cuDNN's flash attention takes: bf16, head_dim a multiple of 8 (rows of 16-byte multiples) up to 128,
// 16-byte aligned buffers.
bool eligible(const SdpaShape& d, std::initializer_list<const Tensor*> ts) {
  if (forced_own() || d.hd % 8 != 0 || d.hd > 128 || d.s <= 0 || d.b <= 0) return false;
  for (const Tensor* t : ts)
    if (t->dtype() != DType::bf16 || !aligned16(*t)) return false;
  return true;
}

}  // namespace

bool cudnn_sdpa_built() { return true; }

bool cudnn_sdpa_forward(Ops& ops, const SdpaShape& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                        Tensor& lse) {
  if (!eligible(d, {&q, &k, &v, &out}) || !aligned16(lse)) return false;
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, q.raw()}, {kK, k.raw()}, {kV, v.raw()}, {kO, out.raw()}, {kStats, lse.raw()}};
  if (!run(ops, Key{0, Dir::forward, d.b, d.s, d.h, d.kvh, d.hd}, pack)) return false;
  g_forward_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool cudnn_sdpa_backward(Ops& ops, const SdpaShape& d, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (!eligible(d, {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) || !aligned16(lse)) return false;
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, q.raw()},     {kK, k.raw()},     {kV, v.raw()},   {kO, out.raw()},  {kStats, lse.raw()},
      {kDO, dout.raw()}, {kDQ, dq.raw()},   {kDK, dk.raw()}, {kDV, dv.raw()}};
  if (!run(ops, Key{0, Dir::backward, d.b, d.s, d.h, d.kvh, d.hd}, pack)) return false;
  g_backward_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

#endif  // MOCBENCH_HAVE_CUDNN_SDPA

}  // namespace moc::cuda
