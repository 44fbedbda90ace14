// The CPU backend's profiler: a decorator over any Ops that records every op it forwards (name, start and
// end on the host clock, the innermost phase range open, the profiled step) into a CpuTracer, so `stats`,
// the Perfetto export and the dashboard work without a GPU. Outside the tracer's steps it only forwards.
// Everything that is not an op (allocator, streams, capture, timing, marks) goes straight to the inner Ops:
// a captured "graph" of the CPU backend re-runs its function, whose ops come back through here.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "kernels/op_cost.h"
#include "kernels/ops.h"
#include "profiling/tracer.h"

namespace moc::prof {

class RecordingOps final : public Ops {
 public:
  RecordingOps(Ops& inner, CpuTracer& tracer) : inner_(inner), tracer_(tracer) {}
  DeviceKind device() const override { return inner_.device(); }
  std::string name() const override { return inner_.name(); }
  Allocator& allocator() override { return inner_.allocator(); }
  void synchronize() override { inner_.synchronize(); }
  void* stream() const override { return inner_.stream(); }
  void set_stream(void* s) override { inner_.set_stream(s); }
  std::unique_ptr<OpGraph> capture(std::function<void()> fn) override { return inner_.capture(std::move(fn)); }
  double timed(const std::function<void()>& fn) override { return inner_.timed(fn); }
  void flush_caches_impl() override { inner_.flush_caches(); }
  int mark() override { return inner_.mark(); }
  double mark_ms(int id) override { return inner_.mark_ms(id); }
  void clear_marks() override { inner_.clear_marks(); }

  void upload(Tensor& dst, const void* host) override {
    run("upload", [&] { return OpCost{"upload", static_cast<std::int64_t>(dst.nbytes()), 0}; }, [&] { inner_.upload(dst, host); });
  }
  void download(const Tensor& src, void* host) override {
    run("download", [&] { return OpCost{"download", static_cast<std::int64_t>(src.nbytes()), 0}; }, [&] { inner_.download(src, host); });
  }
  void copy(Tensor& dst, const Tensor& src) override {
    run("copy", [&] { return cost::copy(dst, src); }, [&] { inner_.copy(dst, src); });
  }
  void fill(Tensor& t, float value) override {
    run("fill", [&] { return cost::fill(t); }, [&] { inner_.fill(t, value); });
  }
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha = 1.0f, float beta = 0.0f) override {
    run("gemm", [&] { return cost::gemm(a, trans_a, b, trans_b, c, beta); }, [&] { inner_.gemm(a, trans_a, b, trans_b, c, alpha, beta); });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    run("add", [&] { return cost::add(a, b, out); }, [&] { inner_.add(a, b, out); });
  }
  void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) override {
    run("embedding_forward", [&] { return cost::embedding_forward(tokens, table, out); }, [&] { inner_.embedding_forward(tokens, table, out); });
  }
  void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) override {
    run("embedding_backward", [&] { return cost::embedding_backward(tokens, dout, dtable); }, [&] { inner_.embedding_backward(tokens, dout, dtable); });
  }
  void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) override {
    run("rmsnorm_forward", [&] { return cost::rmsnorm_forward(x, w, y, rstd); }, [&] { inner_.rmsnorm_forward(x, w, eps, y, rstd); });
  }
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx, Tensor& dw) override {
    run("rmsnorm_backward", [&] { return cost::rmsnorm_backward(dy, x, w, rstd, dx, dw); }, [&] { inner_.rmsnorm_backward(dy, x, w, rstd, dx, dw); });
  }
  void rope(Tensor& x, const Tensor& positions, float theta, bool inverse) override {
    run("rope", [&] { return cost::rope(x, positions); }, [&] { inner_.rope(x, positions, theta, inverse); });
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) override {
    run("attention_forward", [&] { return cost::attention_forward(q, k, v, out, lse); }, [&] { inner_.attention_forward(q, k, v, out, lse); });
  }
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    run("attention_backward", [&] { return cost::attention_backward(q, k, v, out, lse, dout); }, [&] { inner_.attention_backward(q, k, v, out, lse, dout, dq, dk, dv); });
  }
  void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& start, Tensor& k_cache, Tensor& v_cache) override {
    run("kv_cache_write", [&] { return cost::kv_cache_write(k, v, start); }, [&] { inner_.kv_cache_write(k, v, start, k_cache, v_cache); });
  }
  void decode_qkv(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& wq_t, const Tensor& wk_t, const Tensor& wv_t,
                  const Tensor& pos, float theta, Tensor& q, Tensor& k_cache, Tensor& v_cache) override {
    run("decode_qkv", [&] { return cost::decode_qkv(x, norm_w, wq_t, wk_t, wv_t, pos, q, k_cache); },
        [&] { inner_.decode_qkv(x, norm_w, eps, wq_t, wk_t, wv_t, pos, theta, q, k_cache, v_cache); });
  }
  void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos, Tensor& out) override {
    run("attention_decode", [&] { return cost::attention_decode(q, k_cache, pos, out); }, [&] { inner_.attention_decode(q, k_cache, v_cache, pos, out); });
  }
  void swiglu_forward(const Tensor& g, const Tensor& u, Tensor* s, Tensor& z) override {
    run("swiglu_forward", [&] { return cost::swiglu_forward(g, u, s, z); }, [&] { inner_.swiglu_forward(g, u, s, z); });
  }
  void swiglu_backward(const Tensor& dz, const Tensor& g, const Tensor& u, const Tensor* s, Tensor& dg, Tensor& du) override {
    run("swiglu_backward", [&] { return cost::swiglu_backward(dz, g, u, s); }, [&] { inner_.swiglu_backward(dz, g, u, s, dg, du); });
  }
  void moc_select(const Tensor& g, const MocSelect& sel, Tensor& idx) override {
    run("moc_select", [&] { return cost::moc_select(g, idx); }, [&] { inner_.moc_select(g, sel, idx); });
  }
  void gather_cols(const Tensor& src, const Tensor& idx, Tensor& out) override {
    run("gather_cols", [&] { return cost::gather_cols(idx, out); }, [&] { inner_.gather_cols(src, idx, out); });
  }
  void scatter_cols(const Tensor& compact, const Tensor& idx, Tensor& dense) override {
    run("scatter_cols", [&] { return cost::scatter_cols(compact, idx, dense); }, [&] { inner_.scatter_cols(compact, idx, dense); });
  }
  void sparse_rows_matmul(const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& out, float beta) override {
    run("sparse_rows_matmul", [&] { return cost::sparse_rows_matmul(z, idx, w, out, beta); }, [&] { inner_.sparse_rows_matmul(z, idx, w, out, beta); });
  }
  void sparse_rows_matmul_backward(const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& dz, Tensor& dw) override {
    run("sparse_rows_matmul_backward", [&] { return cost::sparse_rows_matmul_backward(dout, z, idx, w); }, [&] { inner_.sparse_rows_matmul_backward(dout, z, idx, w, dz, dw); });
  }
  void gather_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) override {
    run("gather_rows", [&] { return cost::gather_rows(rows, scale, out); }, [&] { inner_.gather_rows(src, rows, scale, out); });
  }
  void scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) override {
    run("scatter_add_rows", [&] { return cost::scatter_add_rows(src, rows, scale); }, [&] { inner_.scatter_add_rows(src, rows, scale, out); });
  }
  void rows_dot(const Tensor& a, const Tensor& rows, const Tensor& b, Tensor& out) override {
    run("rows_dot", [&] { return cost::rows_dot(a, rows, b, out); }, [&] { inner_.rows_dot(a, rows, b, out); });
  }
  void ffn_decode(const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out, const Tensor* force_idx = nullptr, Tensor* idx_out = nullptr, unsigned parts = kFfnAll) override {
    run("ffn_decode", [&] { return cost::ffn_decode(cost::ffn_decode_shape(x, w, sel), parts); }, [&] { inner_.ffn_decode(x, w, sel, out, force_idx, idx_out, parts); });
  }
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses) override {
    run("cross_entropy_forward", [&] { return cost::cross_entropy_forward(logits, targets, losses); }, [&] { inner_.cross_entropy_forward(logits, targets, losses); });
  }
  void cross_entropy_backward(Tensor& logits, const Tensor& targets, float scale) override {
    run("cross_entropy_backward", [&] { return cost::cross_entropy_backward(logits, targets); }, [&] { inner_.cross_entropy_backward(logits, targets, scale); });
  }
  void sum_squares(const Tensor& t, Tensor& acc) override {
    run("sum_squares", [&] { return cost::sum_squares(t); }, [&] { inner_.sum_squares(t, acc); });
  }
  void adamw_step(const std::vector<ParamSlot>& slots, const AdamWParams& p) override {
    run("adamw_step", [&] { return cost::adamw_step(slots); }, [&] { inner_.adamw_step(slots, p); });
  }
  void lm_head_argmax(const Tensor& x, const Tensor& w, Tensor& logits, Tensor& next) override {
    run("lm_head_argmax", [&] { return cost::lm_head_argmax(x, w, logits, next); }, [&] { inner_.lm_head_argmax(x, w, logits, next); });
  }
  void sample(const Tensor& logits, float temperature, std::uint64_t seed, const Tensor& counter, Tensor& next) override {
    run("sample", [&] { return cost::sample(logits, next); }, [&] { inner_.sample(logits, temperature, seed, counter, next); });
  }
  void increment(Tensor& t, int by) override {
    run("increment", [&] { return cost::increment(t); }, [&] { inner_.increment(t, by); });
  }

 private:
  // cost() (what the op declares, kernels/op_cost.h) is evaluated only while recording.
  template <class C, class F>
  void run(const char* op, C&& cost, F&& f) {
    if (!tracer_.enabled() || tracer_.current_step() < 0) return f();
    tracer_.push_cost(cost());
    const auto t0 = std::chrono::steady_clock::now();
    f();
    tracer_.record_op(op, t0, std::chrono::steady_clock::now());
    tracer_.pop_cost();
  }
  Ops& inner_;
  CpuTracer& tracer_;
};

}  // namespace moc::prof
