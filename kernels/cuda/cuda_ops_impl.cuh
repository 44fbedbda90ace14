// Internals of the CUDA backend shared by the cuda_ops*.cu translation units: the caching device
// allocator, the CudaOps class, fp32 views of f32/bf16 pointers and block reductions.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace moc::cuda {

// ---- caching device allocator
//
// Freed blocks wait in free lists keyed by their rounded size (512 B steps below 1 MiB, 2 MiB steps
// above) and are reused by the next request of that size; cudaMalloc runs only on a miss. One stream:
// a block freed by one op can be handed to any later op on the same stream.
//
// Graph capture: between begin_capture() and end_capture() allocations are drawn for a private pool.
// Every block released while the capture runs, and every block allocated during it, belongs to the pool
// (the graph's kernels keep addressing it); such blocks are reused only inside that pool. When the
// graph is destroyed (release_pool) its free blocks go back to the shared cache, and its blocks still
// held by tensors go there when those are released.
class CachingDeviceAllocator final : public Allocator {
 public:
  CachingDeviceAllocator(int device, std::size_t limit_bytes);
  ~CachingDeviceAllocator() override;
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  void* allocate(std::size_t bytes, const MemTag& tag) override;
  void release(void* p, std::size_t bytes, const MemTag& tag) override;
  MemoryTracker& tracker() override { return tracker_; }

  void begin_capture();    // starts a new private pool for the allocations of a capture
  int end_capture();       // the pool's id; the graph hands it back with release_pool
  void release_pool(int pool);

  static std::size_t round_size(std::size_t bytes);
  std::size_t reserved_bytes() const;  // everything cudaMalloc'ed and not freed
  std::size_t cached_bytes() const;    // reserved but free (shared cache and graph pools)
  std::size_t malloc_count() const;    // cudaMalloc calls so far

 private:
  using FreeLists = std::unordered_map<std::size_t, std::vector<void*>>;
  struct Block {
    std::size_t size = 0;  // rounded
    int pool = 0;          // 0: the shared cache
  };
  struct Pool {
    FreeLists free;
    std::size_t live = 0;       // blocks handed out and not released
    bool graph_alive = true;
  };
  static void* take(FreeLists& fl, std::size_t size);
  void* malloc_locked(std::size_t size, std::size_t requested, const MemTag& tag);
  void free_cached_locked();
  void put_back_locked(void* p, Block& b);

  int device_;
  std::size_t limit_;
  MemoryTracker tracker_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;  // every block we own, live or free
  FreeLists cache_;
  std::map<int, Pool> pools_;
  int capturing_pool_ = 0;  // nonzero while a capture runs
  int next_pool_ = 1;
  std::size_t live_bytes_ = 0;  // requested bytes of live allocations (what the limit applies to)
  std::size_t reserved_ = 0, cached_ = 0, mallocs_ = 0;
};

// ---- the backend

struct GemmPlan;

class CudaOps final : public Ops {
 public:
  CudaOps(int device, std::size_t memory_limit_bytes);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  DeviceKind device() const override { return DeviceKind::cuda; }
  std::string name() const override { return name_; }
  Allocator& allocator() override { return alloc_; }
  CachingDeviceAllocator& device_allocator() { return alloc_; }
  void synchronize() override;
  void* stream() const override { return stream_; }
  void set_stream(void* s) override;
  std::unique_ptr<OpGraph> capture(std::function<void()> fn) override;
  double timed(const std::function<void()>& fn) override;
  void flush_caches_impl() override;
  void set_stamping(bool on) override;
  std::vector<StampedLaunch> take_stamps(std::uint64_t* dropped) override;
  int mark() override;
  double mark_ms(int id) override;
  void clear_marks() override;
  int sm_count() const { return sm_count_; }
  void* zeroed_scratch(std::size_t bytes, int slot = 0);  // kernels.h: zeroed_scratch(Ops&, bytes)

  void upload(Tensor& dst, const void* host) override;
  void download(const Tensor& src, void* host) override;
  void copy(Tensor& dst, const Tensor& src) override;
  void fill(Tensor& t, float value) override;

  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
            float beta) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;

  void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) override;
  void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                        Tensor& dw) override;
  void rope(Tensor& x, const Tensor& positions, float theta, bool inverse) override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override;
  void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& start, Tensor& k_cache,
                      Tensor& v_cache) override;
  void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                        Tensor& out) override;
  void decode_qkv(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& wq_t, const Tensor& wk_t,
                  const Tensor& wv_t, const Tensor& pos, float theta, Tensor& q, Tensor& k_cache,
                  Tensor& v_cache) override;
  void swiglu_forward(const Tensor& g, const Tensor& u, Tensor* s, Tensor& z) override;
  void swiglu_backward(const Tensor& dz, const Tensor& g, const Tensor& u, const Tensor* s, Tensor& dg,
                       Tensor& du) override;

  void moc_select(const Tensor& g, const MocSelect& sel, Tensor& idx) override;
  void gather_cols(const Tensor& src, const Tensor& idx, Tensor& out) override;
  void scatter_cols(const Tensor& compact, const Tensor& idx, Tensor& dense) override;
  void sparse_rows_matmul(const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& out, float beta) override;
  void sparse_rows_matmul_backward(const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w,
                                   Tensor& dz, Tensor& dw) override;
  void gather_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) override;
  void scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) override;
  void rows_dot(const Tensor& a, const Tensor& rows, const Tensor& b, Tensor& out) override;

  void ffn_decode(const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out,
                  const Tensor* force_idx, Tensor* idx_out, unsigned parts) override;

  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses) override;
  void cross_entropy_backward(Tensor& logits, const Tensor& targets, float scale) override;
  void sum_squares(const Tensor& t, Tensor& acc) override;
  void adamw_step(const std::vector<ParamSlot>& slots, const AdamWParams& p) override;
  void sample(const Tensor& logits, float temperature, std::uint64_t seed, const Tensor& counter,
              Tensor& next) override;
  void increment(Tensor& t, int by) override;
  void lm_head_argmax(const Tensor& x, const Tensor& w, Tensor& logits, Tensor& next) override;

 private:
  cudaStream_t cur() const { return stream_; }
  GemmPlan& gemm_plan(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c);

  // Declared first: destroyed last, after everything that returns memory to it.
  CachingDeviceAllocator alloc_;
  int device_ = 0;
  int sm_count_ = 1;
  std::string name_;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* gemm_ws_ = nullptr;
  std::size_t gemm_ws_bytes_ = 0;
  void* flush_buf_ = nullptr;  // flush_caches_impl: twice the L2 (cudaMalloc'ed, outside the allocator)
  std::size_t flush_bytes_ = 0;
  // zeroed_scratch(): kept zero by the ops that use it; slot 0 the decode FFN's, slot 1 the LM head's argmax words
  static constexpr int kZeroSlots = 2;
  void* zero_ws_[kZeroSlots] = {};
  std::size_t zero_ws_bytes_[kZeroSlots] = {};
  // Regions a larger request replaced: kept until the ops go, since a captured graph may still use one.
  std::vector<std::pair<void*, std::size_t>> zero_ws_old_;
  cudaStream_t zero_ws_stream_[kZeroSlots] = {};
  using GemmKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, int, int, int, int, int, int>;
  std::map<GemmKey, std::unique_ptr<GemmPlan>> gemm_plans_;
  std::vector<cudaEvent_t> marks_;  // mark() events; the first marks_used_ belong to the current timeline
  std::size_t marks_used_ = 0;
};

// ---- programmatic dependent launch (PDL)
//
// The decode step is a long chain of small kernels; launched with PDL, a kernel's blocks become resident
// while its predecessor still runs, which hides the launch gap. The rules every kernel launched through
// launch_pdl follows:
// - pdl_trigger() early: the next PDL kernel may then be scheduled (it waits in pdl_wait()).
// - pdl_wait() before touching anything an earlier op writes or reads (activations, caches, positions,
//   outputs): it returns once the preceding grid has completed and its memory is visible. Kernels
//   before it complete in stream order, so the guarantee is transitive.
// - Before pdl_wait() only data that no op of the current chain writes may be read: the skinny GEMM
//   streams weight tensors (MemCategory::weights, never written by a decode step) that early.
// A kernel that is not PDL-launched returns from pdl_wait() at once, so the kernels can also be
// launched the ordinary way.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Split cluster barrier: a block arrives early (relaxed: it orders nothing) and waits before it first
// touches another block's shared memory, which must have started; cluster.sync() afterwards orders data.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

// Launches kernel with the PDL attribute, and with a cluster shape for launch_pdl_cluster (a kernel
// that uses cluster barriers is always launched with one, even of a single block); checked.
template <class... KArgs, class... Args>
void launch_ex(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem,
               cudaStream_t stream, const dim3* cluster, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[n].val.programmaticStreamSerializationAllowed = 1;
  ++n;
  if (cluster) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = cluster->x;
    attrs[n].val.clusterDim.y = cluster->y;
    attrs[n].val.clusterDim.z = cluster->z;
    ++n;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), name, __FILE__, __LINE__);
  check(cudaGetLastError(), name, __FILE__, __LINE__);
}
template <class... KArgs, class... Args>
void launch_pdl(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem,
                cudaStream_t stream, Args&&... args) {
  launch_ex(name, kernel, grid, block, smem, stream, nullptr, std::forward<Args>(args)...);
}
template <class... KArgs, class... Args>
void launch_pdl_cluster(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem,
                        cudaStream_t stream, dim3 cluster, Args&&... args) {
  launch_ex(name, kernel, grid, block, smem, stream, &cluster, std::forward<Args>(args)...);
}

// ---- skinny GEMM (gemv_skinny.cu): C[m, n] = alpha A[m, k] W[k, n] + beta C for a few rows of bf16 A and
// row-major bf16 W, C bf16 or f32, neither operand transposed. Bound by streaming W once: 16-byte loads,
// split-K over a thread-block cluster reduced in distributed shared memory, PDL (W of a weights-tagged
// tensor is streamed before the previous kernel finishes). Off unless MOCBENCH_SKINNY(_BIG) selects it:
// skinny_gemm_fits is then false and CudaOps::gemm uses cuBLASLt (slower kernel; see gemv_skinny.cu).
constexpr int kSkinnyMaxRows = 8;
bool skinny_gemm_fits(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c);
void skinny_gemm(cudaStream_t stream, int sm_count, const Tensor& a, const Tensor& b, Tensor& c, float alpha,
                 float beta);

// ---- decode GEMVs over [out, in] weights (decode_gemv.cu): C[m, n] = alpha A W^T + beta C for 1-8 bf16 rows
// (gemv_rows; CudaOps::gemm's decode-sized calls with trans_b), and the fused RMSNorm + QKV + RoPE + cache
// write of Ops::decode_qkv (false: a dtype, alignment or size that kernel does not take; the caller composes).
bool gemv_rows_fits(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c);
void gemv_rows(cudaStream_t stream, const Tensor& a, const Tensor& b, Tensor& c, float alpha, float beta);
// The LM head's GEMV (1-8 rows, f32 logits) keeping each row's argmax (ties: lowest id) in a 64-bit word of `best`
// per row (zero on entry and exit), then a one-block kernel writing next and zeroing the words (false: a call
// gemv_rows does not take; the caller composes).
bool gemv_rows_argmax(cudaStream_t stream, const Tensor& x, const Tensor& w, Tensor& logits, Tensor& next,
                      void* best);
bool decode_qkv_fused(cudaStream_t stream, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& wq_t,
                      const Tensor& wk_t, const Tensor& wv_t, const Tensor& pos, float theta, Tensor& q,
                      Tensor& k_cache, Tensor& v_cache);

// ---- device helpers

// An fp32 view of an f32 or bf16 array whose dtype is known at run time only (operands of one op may
// mix dtypes, as on the CPU backend). The branch is uniform across the grid.
struct FIn {
  const void* p;
  bool bf;
  __device__ __forceinline__ float operator[](std::int64_t i) const {
    return bf ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
  }
};
struct FOut {
  void* p;
  bool bf;
  __device__ __forceinline__ float get(std::int64_t i) const {
    return bf ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  __device__ __forceinline__ void set(std::int64_t i, float v) const {
    if (bf) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
    else static_cast<float*>(p)[i] = v;
  }
};

inline void require_float(const Tensor& t, const char* op, const char* what) {
  require(is_float(t.dtype()), op, std::string(what) + " must be f32 or bf16, got " + std::string(dtype_name(t.dtype())));
}
inline FIn fin(const Tensor& t, const char* op, const char* what) {
  require_float(t, op, what);
  return {t.raw(), t.dtype() == DType::bf16};
}
inline FOut fout(Tensor& t, const char* op, const char* what) {
  require_float(t, op, what);
  return {t.raw(), t.dtype() == DType::bf16};
}

// Grid for a grid-stride loop over n items.
inline int grid_1d(std::int64_t n, int threads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

// Block sum / max: reduce.cuh, the one definition.
using dev::block_max;
using dev::block_sum;

}  // namespace moc::cuda
