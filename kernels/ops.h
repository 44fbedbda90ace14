// The ops interface the model is written against (llama.cpp/ggml-style backends): the CPU backend
// (kernels/cpu) implements it in fp32 now and is the oracle for the CUDA backend (kernels/cuda).
//
// Conventions
// - Tensors are row-major and contiguous. Float tensors are f32 or bf16 (a backend computes in fp32 and
//   converts at the boundary); indices are i32, channel indices i16 read as unsigned (d_ffn <= 65535).
// - Ops are issued in order on the backend's current stream; nothing returns data to the host except
//   download(). Ops read everything that varies between decode steps (tokens, positions, step counters)
//   from tensors, never from host arguments, so a decode step can be captured once and replayed.
// - Temporary memory comes from the backend allocator with a workspace tag.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace moc {

// Which value ranks the channels in a MoC row selection (paper eq. 4 and appendix A remark).
enum class SelectRule : std::uint8_t {
  gate,      // largest G (the paper's practical rule, before SiLU)
  silu,      // largest SiLU(G) (the "top-K after SiLU" ablation)
  abs_silu,  // largest |SiLU(G)| (the rule of the proof of Theorem 1)
};

// Row selection: the K best channels of each row, or, when group_b > 0, the group_a best of every
// group_b consecutive channels. A partial last group of r = d_ffn mod b channels keeps min(a, r).
// Ties are broken towards the lower channel index. Selected indices are written in ascending order.
// Which implementation of the row top-K a backend runs (the `topk_backend` scenario axis): its own kernel,
// or RAFT's raft::matrix::select_k (CUDA built with RAFT only; the CPU backend has only its own).
enum class TopkBackend : std::uint8_t { own, raft };

struct MocSelect {
  int k = 0;
  int group_a = 0;
  int group_b = 0;
  SelectRule rule = SelectRule::gate;
  TopkBackend backend = TopkBackend::own;  // row top-K only; a:b groups always use the backend's own kernel
  // Channels of a row that take part: the first `width` columns (0: all). The model stores FFN tensors
  // with d_ffn rounded up to 8 columns (aligned rows for the GEMMs); the padding channels never compete.
  int width = 0;
  // The row width the selection ranks: width, or the tensor's columns.
  std::int64_t channels(std::int64_t cols) const { return width > 0 ? width : cols; }
  bool grouped() const { return group_b > 0; }
  // Channels kept per row for a row of width d_ffn.
  int kept(int d_ffn) const;
};

// Sizes of C[m, n] = op(A)[m, k] op(B)[k, n] on 2-D views (rows x cols of each tensor), checked against
// C: every backend's gemm validates through this (std::invalid_argument naming the shapes).
struct GemmDims {
  std::int64_t m, n, k;
};
GemmDims gemm_dims(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c);

// A captured sequence of ops (a CUDA graph on the GPU). replay() re-issues it.
class OpGraph {
 public:
  virtual ~OpGraph() = default;
  virtual void replay() = 0;
};

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int step = 1;             // 1-based, for bias correction
  float grad_scale = 1.0f;  // multiplies gradients first (gradient clipping)
};

// One parameter for the multi-tensor optimizer. master (f32), when defined, is the value that is
// updated; param then receives its rounded copy (bf16 compute with fp32 master weights).
struct ParamSlot {
  Tensor* param;
  const Tensor* grad;
  Tensor* m;
  Tensor* v;
  Tensor* master = nullptr;
  bool decay = true;
};

// Decode layout of one FFN layer's weights: channel j is one contiguous row of every matrix, so a
// selected channel costs one contiguous read (as Deja Vu / TEAL / CATS keep W_up and W_down).
struct DecodeFfnWeights {
  const Tensor* w_gate_t;  // [d_ffn, d]  (W_gate transposed)
  const Tensor* w_up_t;    // [d_ffn, d]  (W_up transposed)
  const Tensor* w_down;    // [d_ffn, d]
  // The FFN's RMSNorm, or null: then x is the residual stream and the FFN's input is rmsnorm_forward(x, *norm,
  // norm_eps) (rounded to x's dtype as rmsnorm_forward writes it); out may be x itself (the residual add in
  // place). The CUDA kernel path runs the norm inside its ring kernels (dense and MoC a:b, rows <= 2), else as its
  // own kernel.
  const Tensor* norm = nullptr;
  float norm_eps = 0.0f;
};

// Which parts of ffn_decode run (benchmarks time them apart for the paper's breakdown).
enum FfnDecodePart : unsigned {
  kFfnGate = 1u,    // g = x W_gate
  kFfnSelect = 2u,  // the row top-K / a:b selection of g (MoC only)
  kFfnUpDown = 4u,  // z = SiLU(g) * (x W_up) on the kept channels, out += z W_down
  kFfnAll = 7u,
};

// Device-side stage stamps of one launch of a stamped kernel (the kernel path's decode FFN kernels k_gate,
// k_select, k_updown; the profiler's spin kernel): the stages tile the launch from its first block's start
// to its last block's end. Times on the device clock (ns).
struct StampedStage {
  int layer = -1;     // -1: not known (the kernel path's kernels do not know their layer)
  std::string stage;  // "gate", "gate & up", "top-K", "up", "down", "work"
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t wait_ns = 0;  // time blocks spent waiting at a grid barrier ending it, mean per block (none now: 0)
};
struct StampedLaunch {
  std::string kernel;  // the kernel's short name ("k_gate", "k_select", "k_updown", "spin_kernel")
  int blocks = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  std::vector<StampedStage> stages;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual DeviceKind device() const = 0;
  virtual std::string name() const = 0;
  virtual Allocator& allocator() = 0;
  MemoryTracker& memory() { return allocator().tracker(); }
  Tensor empty(const Shape& shape, DType dt, const MemTag& tag) {
    return Tensor::empty(allocator(), device(), shape, dt, tag);
  }
  virtual void synchronize() = 0;
  // The stream ops are issued on: an opaque handle (a cudaStream_t on the GPU; the CPU backend has one
  // implicit stream and returns null). Workspaces are stream-ordered: freed memory is reused in issue order.
  virtual void* stream() const { return nullptr; }
  virtual void set_stream(void* /*stream*/) {}
  // Records the ops fn issues and returns a graph that re-issues them (the CPU backend re-runs fn).
  virtual std::unique_ptr<OpGraph> capture(std::function<void()> fn) = 0;
  // Seconds the ops that fn issues take on the device: CUDA events around them on the GPU, the host
  // clock between two synchronizations elsewhere.
  virtual double timed(const std::function<void()>& fn);
  // Evicts the device's last-level cache, so that the next ops read their data from memory: a scenario's
  // `cold` timing, between repetitions and outside their timing. GPU: writes a buffer twice the L2's size on
  // the stream (not a tensor: outside the memory accounting). CPU: nothing (cpu_ops.cpp says why).
  void flush_caches() {
    ++cache_flushes_;
    flush_caches_impl();
  }
  std::uint64_t cache_flushes() const { return cache_flushes_; }  // flush_caches() calls on this object
  virtual void flush_caches_impl() = 0;                            // what flush_caches() does (backends)
  // Timeline marks for profiling ranges: mark() stamps "now" in issue order (a CUDA event on the GPU, so
  // a range is timed by the device, not by when the host enqueued it; the host clock here) and returns its
  // id, or -1 where nothing can be stamped (inside a CUDA graph capture). mark_ms(id) is the time of a
  // mark relative to mark 0, valid after synchronize(); clear_marks() starts a new timeline.
  virtual int mark();
  virtual double mark_ms(int id);
  virtual void clear_marks();
  // Stage stamps (StampedLaunch): while on, mocbench's multi-stage kernels record their stages, including
  // launches replayed from graphs captured before; take_stamps returns the launches since the last call
  // (synchronizing) and adds to *dropped those it could not hold. Backends without stamps record nothing.
  virtual void set_stamping(bool /*on*/) {}
  virtual std::vector<StampedLaunch> take_stamps(std::uint64_t* /*dropped*/) { return {}; }

  // ---- data movement
  virtual void upload(Tensor& dst, const void* host) = 0;      // host holds dst.nbytes() of dst.dtype()
  virtual void download(const Tensor& src, void* host) = 0;
  virtual void copy(Tensor& dst, const Tensor& src) = 0;       // same numel; float dtypes convert
  virtual void fill(Tensor& t, float value) = 0;
  void upload_f32(Tensor& dst, const std::vector<float>& host);  // converts to dst's float dtype
  std::vector<float> download_f32(const Tensor& src);
  void upload_i32(Tensor& dst, const std::vector<std::int32_t>& host);
  std::vector<std::int32_t> download_i32(const Tensor& src);     // i16 is widened (unsigned)

  // ---- dense algebra
  // C = alpha * op(A) * op(B) + beta * C on 2-D views (rows x cols of each tensor).
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha = 1.0f,
                    float beta = 0.0f) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;  // out may alias a or b

  // ---- model ops
  // out[i, :] = table[tokens[i], :]; backward accumulates dtable[tokens[i], :] += dout[i, :].
  virtual void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) = 0;
  virtual void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) = 0;
  // y = x / rms(x) * w per row; rstd [rows] f32 keeps 1/rms for backward.
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) = 0;
  // dx += d/dx, dw += d/dw (both accumulate: the residual gradient is already in dx).
  virtual void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                                Tensor& dw) = 0;
  // x [rows, heads, head_dim], positions i32 [rows]. Rotates pairs (i, i + head_dim/2) by
  // pos * theta^(-2i/head_dim) (the LLaMA "rotate half" form); inverse rotates back (its backward).
  virtual void rope(Tensor& x, const Tensor& positions, float theta, bool inverse) = 0;
  // Causal attention with GQA. q [b, s, h, hd], k/v [b, s, kvh, hd] -> out [b, s, h, hd] and
  // lse [b, h, s] (f32). Only these are kept for backward, as flash attention does.
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) = 0;
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) = 0;
  // k/v [b, n, kvh, hd] are written to caches [b, kvh, max_seq, hd] at positions start[i] .. start[i]+n-1.
  virtual void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& start, Tensor& k_cache,
                              Tensor& v_cache) = 0;
  // One query per sequence: q [b, h, hd] attends to cache positions 0..pos[i] (inclusive) -> out [b, h, hd].
  virtual void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                                Tensor& out) = 0;
  // The first half of a decode layer's attention as one op (the kernel path's decode step): xn = RMSNorm(x;
  // norm_w, eps) rounded to x's dtype, q | k | v = xn [Wq; Wk; Wv]^T with the projections stored [out, in]
  // (wq_t [h*hd, d], wk_t and wv_t [kvh*hd, d]), RoPE at pos on q and k, q -> q [b, h, hd], and k, v
  // written to row pos[i] of the caches [b, kvh, max_seq, hd]. The default composes rmsnorm_forward, gemm,
  // rope and kv_cache_write (the CPU twin); the CUDA backend runs one kernel (RMSNorm in its prologue, RoPE
  // and the cache write in its epilogue).
  virtual void decode_qkv(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& wq_t, const Tensor& wk_t,
                          const Tensor& wv_t, const Tensor& pos, float theta, Tensor& q, Tensor& k_cache,
                          Tensor& v_cache);
  // SwiGLU element-wise part: s = SiLU(g) (skipped when s is null), z = s * u.
  virtual void swiglu_forward(const Tensor& g, const Tensor& u, Tensor* s, Tensor& z) = 0;
  // dg = dz * u * SiLU'(g), du = dz * SiLU(g) (paper eq. 7); s, when given, is the stored SiLU(g).
  virtual void swiglu_backward(const Tensor& dz, const Tensor& g, const Tensor& u, const Tensor* s, Tensor& dg,
                               Tensor& du) = 0;

  // ---- Mixture-of-Channels (paper eq. 4-7)
  // idx [rows, kept] (i16): the selected channels of each row of g [rows, d_ffn], ascending.
  virtual void moc_select(const Tensor& g, const MocSelect& sel, Tensor& idx) = 0;
  // out[i, j] = src[i, idx[i, j]]
  virtual void gather_cols(const Tensor& src, const Tensor& idx, Tensor& out) = 0;
  // dense[i, :] = 0, then dense[i, idx[i, j]] = compact[i, j]
  virtual void scatter_cols(const Tensor& compact, const Tensor& idx, Tensor& dense) = 0;
  // out[i, :] = beta * out[i, :] + sum_j z[i, j] * w[idx[i, j], :]  (Z' W_down with Z' kept compact)
  virtual void sparse_rows_matmul(const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& out, float beta) = 0;
  // dz[i, j] = dout[i, :] . w[idx[i, j], :];  dw[idx[i, j], :] += z[i, j] * dout[i, :]
  virtual void sparse_rows_matmul_backward(const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w,
                                           Tensor& dz, Tensor& dw) = 0;

  // ---- mixture of experts: tokens grouped per expert (model/moe.h)
  // out[i, :] = scale[i] * src[rows[i], :] for rows i32 [n], scale f32 [n] (null: 1), out [n, d].
  virtual void gather_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) = 0;
  // out[rows[i], :] += scale[i] * src[i, :] (null scale: 1). The rows of one call are distinct (an expert
  // sees a token once), so no two i write the same row; accumulated in fp32, rounded once per element.
  virtual void scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) = 0;
  // out[i] = a[rows[i], :] . b[i, :] (out f32 [n]), accumulated in fp32.
  virtual void rows_dot(const Tensor& a, const Tensor& rows, const Tensor& b, Tensor& out) = 0;

  // ---- decode-time FFN (a few rows: bound by streaming the weights)
  // out[i, :] += FFN(x[i, :]) for x [rows, d], weights in decode layout. sel null: dense SwiGLU.
  // MoC: g = x W_gate accumulated in fp32 (not rounded to x's dtype); each row keeps the channels
  // moc_select would choose on that fp32 g (ties -> lower index), or those of force_idx [rows, kept] (i16)
  // when given; z_j = SiLU(g_j) * (x . W_up[:, j]) on them; out += z W_down[kept rows]. idx_out, when
  // given, receives the selection [rows, kept] (i16, ascending). Across rows each needed weight row is
  // read once. parts (FfnDecodePart bits) limits what runs, for timing: without kFfnUpDown out is
  // untouched; kFfnUpDown without kFfnSelect needs force_idx (MoC).
  virtual void ffn_decode(const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out,
                          const Tensor* force_idx = nullptr, Tensor* idx_out = nullptr, unsigned parts = kFfnAll) = 0;

  // ---- loss, optimizer, sampling
  // logits [rows, V], targets i32 [rows] (negative: ignored) -> losses [rows] f32 (0 where ignored).
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses) = 0;
  // logits <- scale * (softmax(logits) - onehot(target)) in place; ignored rows become 0.
  virtual void cross_entropy_backward(Tensor& logits, const Tensor& targets, float scale) = 0;
  // acc[0] += sum(t^2), acc an f32 tensor of one element.
  virtual void sum_squares(const Tensor& t, Tensor& acc) = 0;
  virtual void adamw_step(const std::vector<ParamSlot>& slots, const AdamWParams& p) = 0;
  // next[i] = argmax(logits[i]) (ties: lowest id) when temperature <= 0, else a draw from
  // softmax(logits[i] / temperature) with a counter-based RNG keyed by (seed, i, counter[0]).
  virtual void sample(const Tensor& logits, float temperature, std::uint64_t seed, const Tensor& counter,
                      Tensor& next) = 0;
  // Greedy decoding's last step as one op: logits = x w^T (x [rows, d], w [V, d] stored [out, in], logits f32
  // [rows, V]) and next[i] = argmax(logits[i]) (ties: lowest id), as gemm then sample at temperature 0. The
  // default composes them (the CPU twin); the CUDA backend's LM-head GEMV keeps each row's running argmax.
  virtual void lm_head_argmax(const Tensor& x, const Tensor& w, Tensor& logits, Tensor& next);
  // t[i] += by for an i32 tensor (positions and counters that graphs advance on the device).
  virtual void increment(Tensor& t, int by) = 0;

 private:
  std::vector<std::chrono::steady_clock::time_point> host_marks_;  // the default mark() timeline
  std::uint64_t cache_flushes_ = 0;
};

// The backend for a device: "cpu" always; "cuda" when built with the CUDA backend and a GPU is present.
std::unique_ptr<Ops> make_cpu_ops(std::size_t memory_limit_bytes = 0);

// The CPU backend's GEMM library as built and loaded: its version and configuration, whose threads run its GEMMs
// ("OpenMP": the CPU backend's own OpenMP team, as the build asks for; "pthreads": a pool of its own, which competes
// with that team for the cores; "sequential") and how many. Recorded with every run (the machine's description).
struct CpuBlasInfo {
  std::string config;     // OpenBLAS's own description, e.g. "OpenBLAS 0.3.21 ... USE_OPENMP Haswell MAX_THREADS=64"
  std::string threading;  // "OpenMP", "pthreads" or "sequential"
  int threads = 0;
};
CpuBlasInfo cpu_blas();

}  // namespace moc
