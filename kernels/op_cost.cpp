#include "kernels/op_cost.h"

#include <algorithm>
#include <atomic>

namespace moc {

namespace {
std::atomic<CostSink*> g_sink{nullptr};
std::int64_t nb(const Tensor& t) { return static_cast<std::int64_t>(t.nbytes()); }
std::int64_t nb(const Tensor* t) { return t ? nb(*t) : 0; }
std::int64_t es(const Tensor& t) { return static_cast<std::int64_t>(dtype_bytes(t.dtype())); }
}  // namespace

void set_cost_sink(CostSink* sink) { g_sink.store(sink, std::memory_order_release); }
CostSink* cost_sink() { return g_sink.load(std::memory_order_acquire); }

namespace cost {

OpCost gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, float beta) {
  const GemmDims g = gemm_dims(a, ta, b, tb, c);
  return {"gemm", nb(a) + nb(b) + nb(c) * (beta != 0.0f ? 2 : 1), 2 * g.m * g.n * g.k};
}
OpCost add(const Tensor& a, const Tensor& b, const Tensor& out) { return {"add", nb(a) + nb(b) + nb(out), out.numel()}; }
OpCost copy(const Tensor& dst, const Tensor& src) { return {"copy", nb(src) + nb(dst), 0}; }
OpCost fill(const Tensor& t) { return {"fill", nb(t), 0}; }

OpCost embedding_forward(const Tensor& tokens, const Tensor& /*table*/, const Tensor& out) {
  // One table row per token is read (out's size), out written.
  return {"embedding_forward", nb(tokens) + 2 * nb(out), 0};
}
OpCost embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& /*dtable*/) {
  // Each token's gradient row is read, and its table row read and written (accumulated).
  const std::int64_t rows = dout.numel() * es(dout);
  return {"embedding_backward", nb(tokens) + rows + 2 * rows, dout.numel()};
}
OpCost rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd) {
  return {"rmsnorm_forward", nb(x) + nb(w) + nb(y) + nb(rstd), 4 * x.numel()};
}
OpCost rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                        const Tensor& dw) {
  // dx and dw accumulate: read and written.
  return {"rmsnorm_backward", nb(dy) + nb(x) + nb(w) + nb(rstd) + 2 * nb(dx) + 2 * nb(dw), 8 * x.numel()};
}
OpCost rope(const Tensor& x, const Tensor& positions) { return {"rope", 2 * nb(x) + nb(positions), 3 * x.numel()}; }

OpCost attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
  // Causal: half of the s x s scores per head, two matmuls of hd each (QK^T and PV).
  const std::int64_t b = q.dim(0), s = q.dim(1), h = q.dim(2), hd = q.dim(3);
  return {"attention_forward", nb(q) + nb(k) + nb(v) + nb(out) + nb(lse), 2 * b * h * s * s * hd};
}
OpCost attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& dout) {
  const std::int64_t b = q.dim(0), s = q.dim(1), h = q.dim(2), hd = q.dim(3);
  // In: q k v out lse dout; out: dq dk dv. Five causal matmuls (QK^T again, dV, dP, dQ, dK).
  return {"attention_backward", 2 * nb(q) + 2 * nb(k) + 2 * nb(v) + nb(out) + nb(lse) + nb(dout),
          5 * b * h * s * s * hd};
}
OpCost kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& start) {
  return {"kv_cache_write", 2 * nb(k) + 2 * nb(v) + nb(start), 0};
}
OpCost attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& pos, const Tensor& out) {
  const std::int64_t b = q.dim(0), h = q.dim(1), hd = q.dim(2), kvh = k_cache.dim(1);
  OpCost c{"attention_decode", nb(q) + nb(pos) + nb(out), 0};
  c.bytes_per_pos = 2 * b * kvh * hd * es(k_cache);  // one K row and one V row per position and sequence
  c.flops_per_pos = 4 * b * h * hd;                   // q.k and p.v per head
  return c;
}
OpCost decode_qkv(const Tensor& x, const Tensor& norm_w, const Tensor& wq_t, const Tensor& wk_t, const Tensor& wv_t,
                  const Tensor& pos, const Tensor& q, const Tensor& k_cache) {
  const std::int64_t b = x.dim(0), d = x.dim(1), kvh = k_cache.dim(1), hd = k_cache.dim(3);
  const std::int64_t rows = wq_t.dim(0) + wk_t.dim(0) + wv_t.dim(0);
  return {"decode_qkv", nb(x) + nb(norm_w) + nb(wq_t) + nb(wk_t) + nb(wv_t) + nb(pos) + nb(q) +
                            2 * b * kvh * hd * es(k_cache),
          2 * b * rows * d + 4 * b * d + 6 * (q.numel() + b * kvh * hd)};
}
OpCost lm_head_argmax(const Tensor& x, const Tensor& w, const Tensor& logits, const Tensor& next) {
  const OpCost a = gemm(x, false, w, true, logits, 0.0f);
  return {"lm_head_argmax", a.bytes + nb(next), a.flops + logits.numel()};
}
OpCost swiglu_forward(const Tensor& g, const Tensor& u, const Tensor* s, const Tensor& z) {
  return {"swiglu_forward", nb(g) + nb(u) + nb(s) + nb(z), 6 * g.numel()};
}
OpCost swiglu_backward(const Tensor& dz, const Tensor& g, const Tensor& u, const Tensor* s) {
  // dg and du written: the sizes of g and u.
  return {"swiglu_backward", nb(dz) + 2 * nb(g) + 2 * nb(u) + nb(s), 10 * g.numel()};
}
OpCost moc_select(const Tensor& g, const Tensor& idx) { return {"moc_select", nb(g) + nb(idx), g.numel()}; }
OpCost gather_cols(const Tensor& idx, const Tensor& out) {
  // One source element per output element.
  return {"gather_cols", nb(idx) + 2 * nb(out), 0};
}
OpCost scatter_cols(const Tensor& compact, const Tensor& idx, const Tensor& dense) {
  return {"scatter_cols", nb(compact) + nb(idx) + nb(dense), 0};
}
OpCost sparse_rows_matmul(const Tensor& z, const Tensor& idx, const Tensor& w, const Tensor& out, float beta) {
  // Each selected row of w is read once per row of z (rows read: the number of indices).
  const std::int64_t rows_read = idx.numel() * w.cols() * es(w);
  return {"sparse_rows_matmul", nb(z) + nb(idx) + rows_read + nb(out) * (beta != 0.0f ? 2 : 1),
          2 * idx.numel() * w.cols()};
}
OpCost sparse_rows_matmul_backward(const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w) {
  const std::int64_t rows = idx.numel() * w.cols() * es(w);
  // dz written (z's size); w's selected rows read, dw's read and written.
  return {"sparse_rows_matmul_backward", nb(dout) + 2 * nb(z) + nb(idx) + 3 * rows, 4 * idx.numel() * w.cols()};
}
OpCost gather_rows(const Tensor& rows, const Tensor* scale, const Tensor& out) {
  return {"gather_rows", nb(rows) + nb(scale) + 2 * nb(out), out.numel()};
}
OpCost scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor* scale) {
  return {"scatter_add_rows", 3 * nb(src) + nb(rows) + nb(scale), 2 * src.numel()};
}
OpCost rows_dot(const Tensor& a, const Tensor& rows, const Tensor& b, const Tensor& out) {
  (void)a;
  return {"rows_dot", 2 * nb(b) + nb(rows) + nb(out), 2 * b.numel()};
}
OpCost cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses) {
  return {"cross_entropy_forward", nb(logits) + nb(targets) + nb(losses), 3 * logits.numel()};
}
OpCost cross_entropy_backward(const Tensor& logits, const Tensor& targets) {
  return {"cross_entropy_backward", 2 * nb(logits) + nb(targets), 4 * logits.numel()};
}
OpCost sum_squares(const Tensor& t) { return {"sum_squares", nb(t) + 4, 2 * t.numel()}; }
OpCost adamw_step(const std::vector<ParamSlot>& slots) {
  OpCost c{"adamw_step", 0, 0};
  for (const auto& s : slots) {
    // param, m, v (and master) read and written; grad read.
    c.bytes += 2 * (nb(*s.param) + nb(*s.m) + nb(*s.v) + nb(s.master)) + nb(*s.grad);
    c.flops += 12 * s.param->numel();
  }
  return c;
}
OpCost sample(const Tensor& logits, const Tensor& next) { return {"sample", nb(logits) + nb(next), logits.numel()}; }
OpCost increment(const Tensor& t) { return {"increment", 2 * nb(t), t.numel()}; }

std::int64_t FfnDecodeShape::used_channels() const {
  if (!moc) return d_ffn;
  return std::min(d_ffn, rows * kept);
}

FfnDecodeShape ffn_decode_shape(const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel) {
  FfnDecodeShape s;
  s.rows = x.rows();
  s.d = x.cols();
  s.d_ffn = w.w_gate_t->rows();
  s.elem = es(*w.w_gate_t);
  s.moc = sel != nullptr;
  s.kept = sel ? sel->kept(static_cast<int>(s.d_ffn)) : s.d_ffn;
  return s;
}

OpCost ffn_decode_gate(const FfnDecodeShape& s) {
  return {"ffn_decode.gate", s.rows * s.d * s.elem + s.d_ffn * s.d * s.elem + s.rows * s.d_ffn * 4,
          2 * s.rows * s.d_ffn * s.d};
}
OpCost ffn_decode_select(const FfnDecodeShape& s) {
  return {"ffn_decode.select", s.rows * s.d_ffn * 4 + s.rows * s.kept * 2, s.rows * s.d_ffn};
}
OpCost ffn_decode_up_down(const FfnDecodeShape& s) {
  const std::int64_t u = s.used_channels();
  OpCost c{"ffn_decode.up_down",
           s.rows * s.d * s.elem            // x
               + s.rows * s.kept * (4 + 2)  // g and the index of every kept channel
               + 2 * u * s.d * s.elem       // the used rows of W_up and W_down
               + 2 * s.rows * s.d * s.elem, // out read and written
           4 * s.rows * s.kept * s.d};
  c.bound = s.rows > 1 && u < s.d_ffn;
  return c;
}
OpCost ffn_decode_dense(const FfnDecodeShape& s) {
  return {"ffn_decode.dense", s.rows * s.d * s.elem + 3 * s.d_ffn * s.d * s.elem + 2 * s.rows * s.d * s.elem,
          6 * s.rows * s.d_ffn * s.d};
}
OpCost plus(const OpCost& a, const OpCost& b) {
  OpCost c = a;
  c.bytes += b.bytes;
  c.flops += b.flops;
  c.bytes_per_pos += b.bytes_per_pos;
  c.flops_per_pos += b.flops_per_pos;
  c.bound = a.bound || b.bound;
  return c;
}
OpCost ffn_decode(const FfnDecodeShape& s, unsigned parts) {
  OpCost c{"ffn_decode", 0, 0};
  if (!s.moc) {
    if (parts & kFfnUpDown) c = plus(c, ffn_decode_dense(s));
    else if (parts & kFfnGate) c = plus(c, ffn_decode_gate(s));
  } else {
    if (parts & kFfnGate) c = plus(c, ffn_decode_gate(s));
    if (parts & kFfnSelect) c = plus(c, ffn_decode_select(s));
    if (parts & kFfnUpDown) c = plus(c, ffn_decode_up_down(s));
  }
  c.op = "ffn_decode";
  return c;
}

}  // namespace cost
}  // namespace moc
