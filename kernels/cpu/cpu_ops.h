// CPU backend: fp32 reference of every op, multi-threaded with OpenMP, GEMMs through OpenBLAS.
#pragma once
#include "kernels/ops.h"

namespace moc::cpu {

class CpuOps final : public Ops {
 public:
  explicit CpuOps(std::size_t memory_limit_bytes = 0) : alloc_(memory_limit_bytes) {}
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }
  Allocator& allocator() override { return alloc_; }
  HostAllocator& host_allocator() { return alloc_; }
  void synchronize() override {}
  void flush_caches_impl() override;
  std::unique_ptr<OpGraph> capture(std::function<void()> fn) override;

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

 private:
  HostAllocator alloc_;
};

}  // namespace moc::cpu
