// CudaOps: caching device allocator, stream, graph capture, data movement, cuBLASLt GEMMs, and the
// forwarding of attention / MoC / decode-FFN ops to their kernel files.
#include "kernels/op_cost.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/stage_stamps.cuh"

namespace moc::cuda {

// ================================================================ allocator

namespace {
constexpr std::size_t kSmallStep = 512;
constexpr std::size_t kSmallLimit = std::size_t(1) << 20;
constexpr std::size_t kLargeStep = std::size_t(2) << 20;
}  // namespace

CachingDeviceAllocator::CachingDeviceAllocator(int device, std::size_t limit_bytes)
    : device_(device), limit_(limit_bytes) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  // Blocks still live here belong to tensors that outlived their backend: left alone.
  cudaDeviceSynchronize();
  for (auto& [size, list] : cache_)
    for (void* p : list) cudaFree(p);
  for (auto& [id, pool] : pools_)
    for (auto& [size, list] : pool.free)
      for (void* p : list) cudaFree(p);
}

std::size_t CachingDeviceAllocator::round_size(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes < kSmallLimit) return (bytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* CachingDeviceAllocator::take(FreeLists& fl, std::size_t size) {
  auto it = fl.find(size);
  if (it == fl.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

void CachingDeviceAllocator::free_cached_locked() {
  if (cache_.empty()) return;
  cudaDeviceSynchronize();  // cached blocks may still be read by queued kernels
  for (auto& [size, list] : cache_)
    for (void* p : list) {
      cudaFree(p);
      blocks_.erase(p);
      reserved_ -= size;
      cached_ -= size;
    }
  cache_.clear();
}

void* CachingDeviceAllocator::malloc_locked(std::size_t size, std::size_t requested, const MemTag& tag) {
  void* p = nullptr;
  cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess) e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation && capturing_pool_ == 0) {
    cudaGetLastError();  // clear it: a later launch check must not see it
    free_cached_locked();
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e != cudaErrorMemoryAllocation) check(e, "cudaMalloc", __FILE__, __LINE__);
    throw OutOfMemory("cuda: out of device memory allocating " + format_bytes(static_cast<std::int64_t>(requested)) +
                      " for " + std::string(category_name(tag.category)) + " (live " +
                      format_bytes(static_cast<std::int64_t>(live_bytes_)) + ", reserved " +
                      format_bytes(static_cast<std::int64_t>(reserved_)) + ", cached " +
                      format_bytes(static_cast<std::int64_t>(cached_)) + ")");
  }
  ++mallocs_;
  reserved_ += size;
  return p;
}

void* CachingDeviceAllocator::allocate(std::size_t bytes, const MemTag& tag) {
  if (bytes == 0) bytes = 1;  // as HostAllocator: a zero-byte tensor still owns a distinct block
  std::lock_guard lk(mu_);
  if (limit_ && live_bytes_ + bytes > limit_)
    throw OutOfMemory("cuda memory limit of " + format_bytes(static_cast<std::int64_t>(limit_)) +
                      " exceeded allocating " + format_bytes(static_cast<std::int64_t>(bytes)) + " for " +
                      std::string(category_name(tag.category)) + " (live " +
                      format_bytes(static_cast<std::int64_t>(live_bytes_)) + ", cached " +
                      format_bytes(static_cast<std::int64_t>(cached_)) + ")");
  const std::size_t size = round_size(bytes);
  void* p = nullptr;
  if (capturing_pool_) {
    Pool& pool = pools_.at(capturing_pool_);
    p = take(pool.free, size);
    if (!p) p = take(cache_, size);
    if (p) cached_ -= size;
    else p = malloc_locked(size, bytes, tag);
    blocks_[p] = Block{size, capturing_pool_};
    ++pool.live;
  } else {
    p = take(cache_, size);
    if (p) cached_ -= size;
    else p = malloc_locked(size, bytes, tag);
    blocks_[p] = Block{size, 0};
  }
  live_bytes_ += bytes;
  tracker_.on_alloc(tag, bytes);
  return p;
}

void CachingDeviceAllocator::put_back_locked(void* p, Block& b) {
  cached_ += b.size;
  if (b.pool == 0) {
    cache_[b.size].push_back(p);
    return;
  }
  auto it = pools_.find(b.pool);
  Pool& pool = it->second;
  --pool.live;
  if (pool.graph_alive) {
    pool.free[b.size].push_back(p);
    return;
  }
  cache_[b.size].push_back(p);  // its graph is gone
  b.pool = 0;
  if (pool.live == 0) pools_.erase(it);
}

void CachingDeviceAllocator::release(void* p, std::size_t bytes, const MemTag& tag) {
  if (bytes == 0) bytes = 1;
  std::lock_guard lk(mu_);
  auto it = blocks_.find(p);
  if (it == blocks_.end()) return;  // not ours (cannot happen through Storage)
  Block& b = it->second;
  if (capturing_pool_ && b.pool != capturing_pool_) {
    // Released while capturing: the captured kernels may still address it, so the graph keeps it.
    if (b.pool != 0) {
      auto old = pools_.find(b.pool);
      if (old != pools_.end() && --old->second.live == 0 && !old->second.graph_alive) pools_.erase(old);
    }
    b.pool = capturing_pool_;
    ++pools_.at(capturing_pool_).live;
  }
  put_back_locked(p, b);
  live_bytes_ -= bytes;
  tracker_.on_free(tag, bytes);
}

void CachingDeviceAllocator::begin_capture() {
  std::lock_guard lk(mu_);
  if (capturing_pool_) throw std::logic_error("cuda capture: captures cannot nest");
  capturing_pool_ = next_pool_++;
  pools_[capturing_pool_] = Pool{};
}

int CachingDeviceAllocator::end_capture() {
  std::lock_guard lk(mu_);
  const int id = capturing_pool_;
  capturing_pool_ = 0;
  return id;
}

void CachingDeviceAllocator::release_pool(int id) {
  std::lock_guard lk(mu_);
  auto it = pools_.find(id);
  if (it == pools_.end()) return;
  Pool& pool = it->second;
  for (auto& [size, list] : pool.free)
    for (void* p : list) {
      blocks_.at(p).pool = 0;
      cache_[size].push_back(p);
    }
  pool.free.clear();
  pool.graph_alive = false;
  if (pool.live == 0) pools_.erase(it);
}

std::size_t CachingDeviceAllocator::reserved_bytes() const { std::lock_guard lk(mu_); return reserved_; }
std::size_t CachingDeviceAllocator::cached_bytes() const { std::lock_guard lk(mu_); return cached_; }
std::size_t CachingDeviceAllocator::malloc_count() const { std::lock_guard lk(mu_); return mallocs_; }

// ================================================================ cuBLASLt plans

namespace {
inline void check_lt(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed: " + cublasLtGetStatusName(s) + " (" +
                             cublasLtGetStatusString(s) + ") at " + file + ":" + std::to_string(line));
}
#define MOC_LT_CHECK(call) check_lt((call), #call, __FILE__, __LINE__)

int alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int al = 256;
  while (al > 1 && (a % static_cast<std::uintptr_t>(al)) != 0) al /= 2;
  return al;
}

cudaDataType_t lt_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }
}  // namespace

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Row-major C[m, n] = op(A) op(B) is column-major C^T[n, m] = op(B)^T op(A)^T, and a row-major [r, c]
// array read column-major is its transpose [c, r] with leading dimension c. So cuBLASLt's "A" is our B
// (transposed iff tb), its "B" is our A (transposed iff ta), and D = C is n x m with ld n.
GemmPlan& CudaOps::gemm_plan(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c) {
  const std::int64_t m = c.rows(), n = c.cols(), k = ta ? a.rows() : a.cols();
  const int al_a = alignment_of(a.raw()), al_b = alignment_of(b.raw()), al_c = alignment_of(c.raw());
  GemmKey key{m, n, k, ta, tb, static_cast<int>(a.dtype()), static_cast<int>(b.dtype()), static_cast<int>(c.dtype()),
              al_a, al_b, al_c};
  auto it = gemm_plans_.find(key);
  if (it != gemm_plans_.end()) return *it->second;

  auto plan = std::make_unique<GemmPlan>();
  MOC_LT_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N;   // cuBLASLt "A" = our B
  const cublasOperation_t op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt "B" = our A
  MOC_LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  MOC_LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  // Stored (untransposed) shapes in column-major terms: our row-major [r, c] is [c, r], ld c.
  MOC_LT_CHECK(cublasLtMatrixLayoutCreate(&plan->la, lt_type(b.dtype()), static_cast<std::uint64_t>(b.cols()),
                                          static_cast<std::uint64_t>(b.rows()), b.cols()));
  MOC_LT_CHECK(cublasLtMatrixLayoutCreate(&plan->lb, lt_type(a.dtype()), static_cast<std::uint64_t>(a.cols()),
                                          static_cast<std::uint64_t>(a.rows()), a.cols()));
  MOC_LT_CHECK(cublasLtMatrixLayoutCreate(&plan->lc, lt_type(c.dtype()), static_cast<std::uint64_t>(n),
                                          static_cast<std::uint64_t>(m), n));

  cublasLtMatmulPreference_t pref = nullptr;
  MOC_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const std::uint64_t ws = gemm_ws_bytes_;
  const std::uint32_t ua = static_cast<std::uint32_t>(al_b), ub = static_cast<std::uint32_t>(al_a),
                      uc = static_cast<std::uint32_t>(al_c);
  MOC_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  MOC_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua, sizeof ua));
  MOC_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub, sizeof ub));
  MOC_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &uc, sizeof uc));
  MOC_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &uc, sizeof uc));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, plan->desc, plan->la, plan->lb, plan->lc, plan->lc,
                                                           pref, 1, &res, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || res.state != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cuda gemm: cuBLASLt has no algorithm for " + shape_str(a.shape()) + (ta ? "^T" : "") +
                             " (" + std::string(dtype_name(a.dtype())) + ") x " + shape_str(b.shape()) +
                             (tb ? "^T" : "") + " (" + std::string(dtype_name(b.dtype())) + ") -> " +
                             shape_str(c.shape()) + " (" + std::string(dtype_name(c.dtype())) +
                             "), pointer alignments " + std::to_string(al_a) + "/" + std::to_string(al_b) + "/" +
                             std::to_string(al_c) + " B: " + cublasLtGetStatusName(st));
  plan->algo = res.algo;
  return *gemm_plans_.emplace(key, std::move(plan)).first->second;
}

namespace {
// C = beta * C (k == 0: op(A) op(B) is empty); beta == 0 writes zeros without reading C.
__global__ void scale_kernel(FOut c, std::int64_t n, float beta) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    c.set(i, beta == 0.0f ? 0.0f : beta * c.get(i));
}
}  // namespace

void CudaOps::gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta) {
  const auto [m, n, k] = gemm_dims(a, ta, b, tb, c);
  MOC_OP_COST(cost::gemm(a, ta, b, tb, c, beta));
  const bool dtypes_ok = (a.dtype() == DType::f32 && b.dtype() == DType::f32 && c.dtype() == DType::f32) ||
                         (a.dtype() == DType::bf16 && b.dtype() == DType::bf16 &&
                          (c.dtype() == DType::bf16 || c.dtype() == DType::f32));
  require(dtypes_ok, "gemm",
          "unsupported dtypes " + std::string(dtype_name(a.dtype())) + " x " + std::string(dtype_name(b.dtype())) +
              " -> " + std::string(dtype_name(c.dtype())) + " (all f32, or bf16 x bf16 -> bf16/f32)");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_kernel<<<grid_1d(m * n, 256), 256, 0, cur()>>>(FOut{c.raw(), c.dtype() == DType::bf16}, m * n, beta);
    MOC_CUDA_LAUNCHED("scale_kernel");
    return;
  }
  if (gemv_rows_fits(a, ta, b, tb, c)) {  // decode-sized, W stored [out, in]: stream W (decode_gemv.cu)
    gemv_rows(cur(), a, b, c, alpha, beta);
    return;
  }
  if (skinny_gemm_fits(a, ta, b, tb, c)) {  // decode-sized: stream W (gemv_skinny.cu)
    skinny_gemm(cur(), sm_count_, a, b, c, alpha, beta);
    return;
  }
  GemmPlan& plan = gemm_plan(a, ta, b, tb, c);
  MOC_LT_CHECK(cublasLtMatmul(lt_, plan.desc, &alpha, b.raw(), plan.la, a.raw(), plan.lb, &beta, c.raw(), plan.lc,
                              c.raw(), plan.lc, &plan.algo, gemm_ws_, gemm_ws_bytes_, cur()));
}

// ================================================================ backend core

namespace {
class CudaGraph final : public OpGraph {
 public:
  CudaGraph(CudaOps& ops, cudaGraph_t g, cudaGraphExec_t exec, int pool)
      : ops_(ops), graph_(g), exec_(exec), pool_(pool) {}
  ~CudaGraph() override {
    cudaStreamSynchronize(static_cast<cudaStream_t>(ops_.stream()));  // no replay may still run
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    ops_.device_allocator().release_pool(pool_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void replay() override { MOC_CUDA_CHECK(cudaGraphLaunch(exec_, static_cast<cudaStream_t>(ops_.stream()))); }

 private:
  CudaOps& ops_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  int pool_;
};
}  // namespace

CudaOps::CudaOps(int device, std::size_t memory_limit_bytes) : alloc_(device, memory_limit_bytes), device_(device) {
  int count = 0;
  MOC_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw std::runtime_error("cuda: device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                             " visible)");
  MOC_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  MOC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  sm_count_ = prop.multiProcessorCount;
  name_ = "cuda:" + std::to_string(device) + " " + prop.name;
  MOC_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
  stream_ = own_stream_;
  try {
    MOC_LT_CHECK(cublasLtCreate(&lt_));
    gemm_ws_bytes_ = std::size_t(32) << 20;
    gemm_ws_ = alloc_.allocate(gemm_ws_bytes_, workspace_tag());
    step::prepare_stamps();  // the stage-stamp buffer exists before any graph capture
  } catch (...) {
    if (lt_) cublasLtDestroy(lt_);
    cudaStreamDestroy(own_stream_);
    throw;
  }
}

void CudaOps::set_stamping(bool on) {
  MOC_CUDA_CHECK(cudaSetDevice(device_));
  step::set_stamping(on);
}

std::vector<StampedLaunch> CudaOps::take_stamps(std::uint64_t* dropped) {
  MOC_CUDA_CHECK(cudaSetDevice(device_));
  return step::take_stamps(dropped);
}

CudaOps::~CudaOps() {
  cudaStreamSynchronize(stream_);
  gemm_plans_.clear();
  for (cudaEvent_t ev : marks_) cudaEventDestroy(ev);
  if (gemm_ws_) alloc_.release(gemm_ws_, gemm_ws_bytes_, workspace_tag());
  for (int s = 0; s < kZeroSlots; ++s)
    if (zero_ws_[s]) alloc_.release(zero_ws_[s], zero_ws_bytes_[s], workspace_tag());
  for (const auto& [p, n] : zero_ws_old_) alloc_.release(p, n, workspace_tag());
  if (flush_buf_) cudaFree(flush_buf_);
  if (lt_) cublasLtDestroy(lt_);
  if (own_stream_) cudaStreamDestroy(own_stream_);
}

void CudaOps::synchronize() { MOC_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void* CudaOps::zeroed_scratch(std::size_t bytes, int slot) {
  void*& ws = zero_ws_[slot];
  std::size_t& ws_bytes = zero_ws_bytes_[slot];
  if (ws && bytes <= ws_bytes) return zero_ws_stream_[slot] == stream_ ? ws : nullptr;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MOC_CUDA_CHECK(cudaStreamIsCapturing(stream_, &cap));
  if (cap != cudaStreamCaptureStatusNone) return nullptr;  // no allocation or memset node inside a graph
  // The old region stays allocated: a graph captured with it may be replayed later (it stays zero there).
  if (ws) zero_ws_old_.emplace_back(ws, ws_bytes);
  ws_bytes = (bytes + 4095) / 4096 * 4096;
  ws = alloc_.allocate(ws_bytes, workspace_tag());
  zero_ws_stream_[slot] = stream_;
  MOC_CUDA_CHECK(cudaMemsetAsync(ws, 0, ws_bytes, stream_));
  return nullptr;  // this call runs without it (its first kernel would follow the memset, not a kernel)
}

void* zeroed_scratch(Ops& ops, std::size_t bytes) {
  auto* c = dynamic_cast<CudaOps*>(&ops);
  return c ? c->zeroed_scratch(bytes) : nullptr;
}

void CudaOps::set_stream(void* s) {
  // The cache assumes one stream: what was freed on the old one must be finished before reuse.
  MOC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  stream_ = s ? static_cast<cudaStream_t>(s) : own_stream_;
}

std::unique_ptr<OpGraph> CudaOps::capture(std::function<void()> fn) {
  alloc_.begin_capture();
  cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    alloc_.release_pool(alloc_.end_capture());
    check(e, "cudaStreamBeginCapture", __FILE__, __LINE__);
  }
  try {
    fn();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    cudaGetLastError();
    if (g) cudaGraphDestroy(g);
    alloc_.release_pool(alloc_.end_capture());
    throw;
  }
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(stream_, &graph);
  const int pool = alloc_.end_capture();
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  if (e == cudaSuccess) e = cudaGraphUpload(exec, stream_);
  if (e != cudaSuccess) {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    alloc_.release_pool(pool);
    check(e, "cuda graph capture/instantiate", __FILE__, __LINE__);
  }
  return std::make_unique<CudaGraph>(*this, graph, exec, pool);
}

void CudaOps::flush_caches_impl() {
  MOC_CUDA_CHECK(cudaSetDevice(device_));
  if (!flush_buf_) {
    int l2 = 0;
    MOC_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_));
    flush_bytes_ = std::max<std::size_t>(std::size_t{2} * static_cast<std::size_t>(l2), std::size_t{8} << 20);
    MOC_CUDA_CHECK(cudaMalloc(&flush_buf_, flush_bytes_));
  }
  static unsigned char v = 0;  // a different value each time: every line is written back
  MOC_CUDA_CHECK(cudaMemsetAsync(flush_buf_, ++v, flush_bytes_, stream_));
}

double CudaOps::timed(const std::function<void()>& fn) {
  cudaEvent_t ev[2] = {nullptr, nullptr};
  MOC_CUDA_CHECK(cudaEventCreate(&ev[0]));
  struct Guard {
    cudaEvent_t* e;
    ~Guard() {
      if (e[0]) cudaEventDestroy(e[0]);
      if (e[1]) cudaEventDestroy(e[1]);
    }
  } guard{ev};
  MOC_CUDA_CHECK(cudaEventCreate(&ev[1]));
  MOC_CUDA_CHECK(cudaEventRecord(ev[0], stream_));
  fn();
  MOC_CUDA_CHECK(cudaEventRecord(ev[1], stream_));
  MOC_CUDA_CHECK(cudaEventSynchronize(ev[1]));
  float ms = 0;
  MOC_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
  return static_cast<double>(ms) * 1e-3;
}

// Marks are events recorded on the stream (created once, reused by later timelines).
int CudaOps::mark() {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  MOC_CUDA_CHECK(cudaStreamIsCapturing(stream_, &cs));
  if (cs != cudaStreamCaptureStatusNone) return -1;
  if (marks_used_ == marks_.size()) {
    cudaEvent_t ev = nullptr;
    MOC_CUDA_CHECK(cudaEventCreate(&ev));
    marks_.push_back(ev);
  }
  MOC_CUDA_CHECK(cudaEventRecord(marks_[marks_used_], stream_));
  return static_cast<int>(marks_used_++);
}

double CudaOps::mark_ms(int id) {
  if (id < 0 || static_cast<std::size_t>(id) >= marks_used_) throw std::out_of_range("mark_ms: no such mark");
  MOC_CUDA_CHECK(cudaEventSynchronize(marks_[static_cast<std::size_t>(id)]));
  float ms = 0;
  MOC_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[0], marks_[static_cast<std::size_t>(id)]));
  return static_cast<double>(ms);
}

void CudaOps::clear_marks() { marks_used_ = 0; }

void CudaOps::upload(Tensor& dst, const void* host) {
  MOC_OP_COST(OpCost{"upload", static_cast<std::int64_t>(dst.nbytes()), 0});
  if (dst.nbytes() == 0) return;
  MOC_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), host, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
  MOC_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go away after return
}

void CudaOps::download(const Tensor& src, void* host) {
  MOC_OP_COST(OpCost{"download", static_cast<std::int64_t>(src.nbytes()), 0});
  if (src.nbytes() == 0) return;
  MOC_CUDA_CHECK(cudaMemcpyAsync(host, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  MOC_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ================================================================ ops implemented in other files

void CudaOps::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  MOC_OP_COST(cost::attention_forward(q, k, v, out, lse));
  cuda::attention_forward(*this, q, k, v, out, lse);
}
void CudaOps::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  MOC_OP_COST(cost::attention_backward(q, k, v, out, lse, dout));
  cuda::attention_backward(*this, q, k, v, out, lse, dout, dq, dk, dv);
}
void CudaOps::decode_qkv(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& wq_t, const Tensor& wk_t,
                         const Tensor& wv_t, const Tensor& pos, float theta, Tensor& q, Tensor& k_cache,
                         Tensor& v_cache) {
  MOC_OP_COST(cost::decode_qkv(x, norm_w, wq_t, wk_t, wv_t, pos, q, k_cache));
  if (decode_qkv_fused(cur(), x, norm_w, eps, wq_t, wk_t, wv_t, pos, theta, q, k_cache, v_cache)) return;
  Ops::decode_qkv(x, norm_w, eps, wq_t, wk_t, wv_t, pos, theta, q, k_cache, v_cache);
}

void CudaOps::lm_head_argmax(const Tensor& x, const Tensor& w, Tensor& logits, Tensor& next) {
  MOC_OP_COST(cost::lm_head_argmax(x, w, logits, next));
  const bool fits = x.rank() == 2 && x.dim(0) >= 1 && x.dim(0) <= 8;
  void* best = fits ? zeroed_scratch(static_cast<std::size_t>(x.dim(0)) * 8, 1) : nullptr;
  if (best && gemv_rows_argmax(cur(), x, w, logits, next, best)) return;
  Ops::lm_head_argmax(x, w, logits, next);  // (no words yet: the first call outside a capture allocates them)
}

void CudaOps::attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                               Tensor& out) {
  MOC_OP_COST(cost::attention_decode(q, k_cache, pos, out));
  cuda::attention_decode(*this, q, k_cache, v_cache, pos, out);
}
void CudaOps::moc_select(const Tensor& g, const MocSelect& sel, Tensor& idx) {
  MOC_OP_COST(cost::moc_select(g, idx));
  cuda::moc_select(*this, g, sel, idx);
}
void CudaOps::gather_cols(const Tensor& src, const Tensor& idx, Tensor& out) {
  MOC_OP_COST(cost::gather_cols(idx, out));
  cuda::gather_cols(*this, src, idx, out);
}
void CudaOps::scatter_cols(const Tensor& compact, const Tensor& idx, Tensor& dense) {
  MOC_OP_COST(cost::scatter_cols(compact, idx, dense));
  cuda::scatter_cols(*this, compact, idx, dense);
}
void CudaOps::sparse_rows_matmul(const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& out, float beta) {
  MOC_OP_COST(cost::sparse_rows_matmul(z, idx, w, out, beta));
  cuda::sparse_rows_matmul(*this, z, idx, w, out, beta);
}
void CudaOps::sparse_rows_matmul_backward(const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w,
                                          Tensor& dz, Tensor& dw) {
  MOC_OP_COST(cost::sparse_rows_matmul_backward(dout, z, idx, w));
  cuda::sparse_rows_matmul_backward(*this, dout, z, idx, w, dz, dw);
}
void CudaOps::ffn_decode(const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out,
                         const Tensor* force_idx, Tensor* idx_out, unsigned parts) {
  MOC_OP_COST(cost::ffn_decode(cost::ffn_decode_shape(x, w, sel), parts));
  cuda::ffn_decode(*this, x, w, sel, out, force_idx, idx_out, parts);
}

// ================================================================ entry points

bool gpu_available() {
  static const bool ok = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return n > 0;
  }();
  return ok;
}

std::unique_ptr<Ops> make_cuda_ops(int device, std::size_t memory_limit_bytes) {
  return std::make_unique<CudaOps>(device, memory_limit_bytes);
}

}  // namespace moc::cuda
