// What an op must cost: the bytes it has to move (weights and activations read, outputs written, once each)
// and its floating-point operations -- the numbers a roofline sets against a kernel's measured time. Each
// backend op declares its cost around the kernels it launches (CostScope); a profiler listening as the
// CostSink ties every kernel to the innermost declaration open when it was launched (or, for a CUDA graph,
// when its node was captured). The costs are pure functions of tensor shapes and dtypes (no device), so
// the CPU tests check them exactly against the tensors each op touches.
//
// Data-dependent costs are declared as such: attention at decode reads the K/V cache rows 0..pos, whose
// number only the device knows during a graph replay, so it declares bytes_per_pos / flops_per_pos and the
// profiler multiplies them by the positions the step attended (Tracer::set_step_positions). A MoC up/down at
// batch > 1 reads the union of the rows' selections; it declares min(d_ffn, rows x kept) channels, marked
// `bound` (an upper bound).
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace moc {

struct OpCost {
  const char* op = "";           // "gemm", "rmsnorm", "ffn_decode.gate", ... (a string literal)
  std::int64_t bytes = 0;        // fixed part: bytes read + bytes written
  std::int64_t flops = 0;        // fixed part
  std::int64_t bytes_per_pos = 0, flops_per_pos = 0;  // per attended cache position (summed over the rows)
  bool bound = false;            // bytes is an upper bound (data-dependent)
  // The whole cost for a step that attended `positions` cache positions (per row).
  std::int64_t bytes_at(std::int64_t positions) const { return bytes + bytes_per_pos * positions; }
  std::int64_t flops_at(std::int64_t positions) const { return flops + flops_per_pos * positions; }
};

// Where declarations go: a profiler (one at a time; set_cost_sink(nullptr) when it ends). Declarations nest:
// a multi-kernel op declares itself and each of its kernels; the innermost open one is what a launch gets.
class CostSink {
 public:
  virtual ~CostSink() = default;
  virtual void push_cost(const OpCost& c) = 0;
  virtual void pop_cost() = 0;
};
void set_cost_sink(CostSink* sink);
CostSink* cost_sink();

class CostScope {
 public:
  explicit CostScope(const OpCost& c) : sink_(cost_sink()) {
    if (sink_) sink_->push_cost(c);
  }
  ~CostScope() {
    if (sink_) sink_->pop_cost();
  }
  CostScope(const CostScope&) = delete;
  CostScope& operator=(const CostScope&) = delete;

 private:
  CostSink* sink_;
};

// Declares a cost for the rest of the enclosing block; the expression is evaluated only while a profiler
// listens (a launch outside profiling pays one pointer test).
#define MOC_CAT2_(a, b) a##b
#define MOC_CAT_(a, b) MOC_CAT2_(a, b)
#define MOC_OP_COST(...) \
  ::moc::CostScope MOC_CAT_(moc_cost_scope_, __LINE__)(::moc::cost_sink() ? (__VA_ARGS__) : ::moc::OpCost{})

// The costs of the Ops methods (kernels/ops.h), from their arguments' shapes and dtypes.
namespace cost {
OpCost gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float beta);
OpCost add(const Tensor& a, const Tensor& b, const Tensor& out);
OpCost copy(const Tensor& dst, const Tensor& src);
OpCost fill(const Tensor& t);
OpCost embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& out);
OpCost embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable);
OpCost rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd);
OpCost rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                        const Tensor& dw);
OpCost rope(const Tensor& x, const Tensor& positions);
OpCost attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse);
OpCost attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& dout);
// k, v [b, n, kvh, hd] written into the caches: read once, written once.
OpCost kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& start);
// q [b, h, hd]: the K and V rows of every attended position per sequence (per position), q, pos and out.
OpCost attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& pos, const Tensor& out);
// Ops::decode_qkv: x and the norm weight read, the three projections streamed, q written and one K and one
// V row per sequence written to the caches.
OpCost decode_qkv(const Tensor& x, const Tensor& norm_w, const Tensor& wq_t, const Tensor& wk_t, const Tensor& wv_t,
                  const Tensor& pos, const Tensor& q, const Tensor& k_cache);
// Ops::lm_head_argmax: the LM head's gemm (x and W read, the logits written) and next written -- the logits are not
// read back (the fused GEMV compares each output as it writes it); a compare per logit.
OpCost lm_head_argmax(const Tensor& x, const Tensor& w, const Tensor& logits, const Tensor& next);
OpCost swiglu_forward(const Tensor& g, const Tensor& u, const Tensor* s, const Tensor& z);
OpCost swiglu_backward(const Tensor& dz, const Tensor& g, const Tensor& u, const Tensor* s);
OpCost moc_select(const Tensor& g, const Tensor& idx);
OpCost gather_cols(const Tensor& idx, const Tensor& out);
OpCost scatter_cols(const Tensor& compact, const Tensor& idx, const Tensor& dense);
OpCost sparse_rows_matmul(const Tensor& z, const Tensor& idx, const Tensor& w, const Tensor& out, float beta);
OpCost sparse_rows_matmul_backward(const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w);
OpCost gather_rows(const Tensor& rows, const Tensor* scale, const Tensor& out);
OpCost scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor* scale);
OpCost rows_dot(const Tensor& a, const Tensor& rows, const Tensor& b, const Tensor& out);
OpCost cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses);
OpCost cross_entropy_backward(const Tensor& logits, const Tensor& targets);
OpCost sum_squares(const Tensor& t);
OpCost adamw_step(const std::vector<ParamSlot>& slots);
OpCost sample(const Tensor& logits, const Tensor& next);
OpCost increment(const Tensor& t);

// The decode FFN (Ops::ffn_decode) of `rows` rows of width d over d_ffn channels, weights and activations of
// `elem` bytes; kept: channels a row keeps (d_ffn when dense). Its parts, as the CUDA backend's kernels run
// them, and the whole op (the parts that run, summed):
//   gate     x and W_gate in, g (fp32) out
//   select   g in, the kept indices (i16) out
//   up_down  x, g and the indices in, the used rows of W_up and W_down (the union of the rows' selections:
//            min(d_ffn, rows x kept), an upper bound when rows > 1; every row when dense), out read and written
//   dense    gate, up and down in one pass (the dense FFN): x and all three weights in, out read and written
struct FfnDecodeShape {
  std::int64_t rows = 0, d = 0, d_ffn = 0, kept = 0;
  std::int64_t elem = 2;
  bool moc = false;
  std::int64_t used_channels() const;  // the union bound
};
FfnDecodeShape ffn_decode_shape(const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel);
OpCost ffn_decode_gate(const FfnDecodeShape& s);
OpCost ffn_decode_select(const FfnDecodeShape& s);
OpCost ffn_decode_up_down(const FfnDecodeShape& s);
OpCost ffn_decode_dense(const FfnDecodeShape& s);
OpCost ffn_decode(const FfnDecodeShape& s, unsigned parts);  // the parts (FfnDecodePart bits) that run
// The sum of two costs (op: a's).
OpCost plus(const OpCost& a, const OpCost& b);
}  // namespace cost

}  // namespace moc
