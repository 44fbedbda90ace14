#include "model/ffn.h"

#include <stdexcept>

namespace moc {

std::int64_t Ffn::stored_bytes(const ModelConfig& cfg, std::int64_t rows, std::int64_t cols) {
  const std::int64_t act = static_cast<std::int64_t>(dtype_bytes(cfg.act_dtype));
  const std::int64_t values = cfg.ffn.gcp ? 2 : 4;  // G, U (+ S, Z without GCP)
  if (cfg.ffn.kind == FfnKind::dense) return values * rows * (cols > 0 ? cols : cfg.ffn_cols()) * act;
  const std::int64_t kept = cfg.kept_channels();
  return values * rows * kept * act + rows * kept * static_cast<std::int64_t>(dtype_bytes(DType::i16));
}

std::int64_t Ffn::cols_of(const FfnWeights& w) const {
  const std::int64_t c = w.decode_layout ? w.w_gate->rows() : w.w_gate->cols();
  if (c != cfg_->d_ffn && c != cfg_->ffn_cols())
    throw std::invalid_argument("Ffn: W_gate has " + std::to_string(c) + " channels; expected d_ffn " +
                                std::to_string(cfg_->d_ffn) + " or its padded " + std::to_string(cfg_->ffn_cols()));
  return c;
}

MocSelect Ffn::selection(std::int64_t cols) const {
  MocSelect sel = cfg_->ffn.selection();
  if (cols != cfg_->d_ffn) sel.width = cfg_->d_ffn;  // the padding channels never compete
  return sel;
}

void Ffn::release() {
  g_.reset();
  u_.reset();
  s_.reset();
  z_.reset();
  idx_.reset();
}

void Ffn::forward(const Tensor& x, const FfnWeights& w, Tensor& out, float beta, bool keep, RangeSink* r) {
  release();
  if (cfg_->ffn.kind == FfnKind::dense) forward_dense(x, w, out, beta, keep, r);
  else forward_moc(x, w, out, beta, keep, r);
}

void Ffn::decode(const Tensor& x, const FfnWeights& w, Tensor& out, Tensor* idx_out, RangeSink* r, const Tensor* norm,
                 float norm_eps) {
  if (!w.decode_layout) throw std::logic_error("Ffn::decode needs the decode layout (Transformer::prepare_decode)");
  ScopedRange sr(r, "ffn.decode");
  // Padded weights ([ffn_cols, d] in the decode layout): the decode kernels see the first d_ffn rows.
  const std::int64_t F = cfg_->d_ffn;
  const bool padded = cols_of(w) != F;
  const Tensor wg = padded ? w.w_gate->slice0(0, F) : *w.w_gate, wu = padded ? w.w_up->slice0(0, F) : *w.w_up,
               wd = padded ? w.w_down->slice0(0, F) : *w.w_down;
  const DecodeFfnWeights dw{&wg, &wu, &wd, norm, norm_eps};
  if (cfg_->ffn.kind == FfnKind::dense) {
    ops_->ffn_decode(x, dw, nullptr, out);
    return;
  }
  const MocSelect sel = cfg_->ffn.selection();
  Tensor rec;
  if (record_selection_ && !idx_out) {
    rec = ops_->empty({x.rows(), sel.kept(cfg_->d_ffn)}, DType::i16, workspace_tag());
    idx_out = &rec;
  }
  ops_->ffn_decode(x, dw, &sel, out, forced_idx_.defined() ? &forced_idx_ : nullptr, idx_out);
  if (record_selection_) idx_ = *idx_out;
}

void Ffn::backward(const Tensor& x, const Tensor& dout, const FfnWeights& w, Tensor& dx, const FfnGrads& g,
                   RangeSink* r) {
  if (!g_.defined()) throw std::logic_error("Ffn::backward without a forward that kept its activations");
  if (w.decode_layout) throw std::logic_error("Ffn::backward: the decode layout is for inference only");
  if (cfg_->ffn.kind == FfnKind::dense) backward_dense(x, dout, w, dx, g, r);
  else backward_moc(x, dout, w, dx, g, r);
  release();
}

// ---- dense SwiGLU (paper eq. FFN-1, FFN-2)
void Ffn::forward_dense(const Tensor& x, const FfnWeights& w, Tensor& out, float beta, bool keep, RangeSink* r) {
  Ops& o = *ops_;
  const std::int64_t n = x.rows(), F = cols_of(w);
  const DType act = cfg_->act_dtype;
  Tensor G = o.empty({n, F}, act, keep_tag(keep));
  Tensor U = o.empty({n, F}, act, keep_tag(keep));
  {
    ScopedRange sr(r, "ffn.gate");
    o.gemm(x, false, *w.w_gate, w.decode_layout, G);
  }
  {
    ScopedRange sr(r, "ffn.up");
    o.gemm(x, false, *w.w_up, w.decode_layout, U);
  }
  const bool store_sz = keep && !cfg_->ffn.gcp;
  Tensor S, Z = o.empty({n, F}, act, keep_tag(store_sz));
  {
    ScopedRange sr(r, "ffn.act");
    if (store_sz) S = o.empty({n, F}, act, keep_tag(true));
    o.swiglu_forward(G, U, store_sz ? &S : nullptr, Z);
  }
  {
    ScopedRange sr(r, "ffn.down");
    o.gemm(Z, false, *w.w_down, false, out, 1.0f, beta);
  }
  if (keep) {
    g_ = G;
    u_ = U;
    if (store_sz) {
      s_ = S;
      z_ = Z;
    }
  }
}

void Ffn::backward_dense(const Tensor& x, const Tensor& dout, const FfnWeights& w, Tensor& dx, const FfnGrads& g,
                         RangeSink* r) {
  Ops& o = *ops_;
  const std::int64_t n = x.rows(), F = cols_of(w);
  const DType act = cfg_->act_dtype;
  Tensor Z = z_;
  if (!Z.defined()) {  // GCP: recompute Z = SiLU(G) * U (S is recomputed inside swiglu_backward)
    ScopedRange sr(r, "ffn.recompute");
    Z = o.empty({n, F}, act, workspace_tag());
    o.swiglu_forward(g_, u_, nullptr, Z);
  }
  Tensor dZ = o.empty({n, F}, act, workspace_tag());
  {
    ScopedRange sr(r, "ffn.down");
    o.gemm(dout, false, *w.w_down, true, dZ);               // ∇Z = ∇D W_downᵀ
    o.gemm(Z, true, dout, false, *g.w_down, 1.0f, 1.0f);     // ∇W_down += Zᵀ ∇D
  }
  Z.reset();
  Tensor dG = o.empty({n, F}, act, workspace_tag());
  Tensor dU = o.empty({n, F}, act, workspace_tag());
  {
    ScopedRange sr(r, "ffn.act");
    o.swiglu_backward(dZ, g_, u_, s_.defined() ? &s_ : nullptr, dG, dU);
  }
  dZ.reset();
  {
    ScopedRange sr(r, "ffn.gate");
    o.gemm(x, true, dG, false, *g.w_gate, 1.0f, 1.0f);  // ∇W_gate += Xᵀ ∇G
    o.gemm(dG, false, *w.w_gate, true, dx);             // ∇X = ∇G W_gateᵀ
  }
  {
    ScopedRange sr(r, "ffn.up");
    o.gemm(x, true, dU, false, *g.w_up, 1.0f, 1.0f);      // ∇W_up += Xᵀ ∇U
    o.gemm(dU, false, *w.w_up, true, dx, 1.0f, 1.0f);     //  ∇X += ∇U W_upᵀ
  }
}

// ---- Mixture-of-Channels (paper eq. 4-6 forward, eq. 7 backward)
void Ffn::forward_moc(const Tensor& x, const FfnWeights& w, Tensor& out, float beta, bool keep, RangeSink* r) {
  Ops& o = *ops_;
  const std::int64_t n = x.rows(), F = cols_of(w), K = cfg_->kept_channels();
  const DType act = cfg_->act_dtype;
  Tensor idx = o.empty({n, K}, DType::i16, keep_tag(keep));
  Tensor gsel = o.empty({n, K}, act, keep_tag(keep));
  Tensor usel = o.empty({n, K}, act, keep_tag(keep));
  {
    // G is needed dense only long enough to select and gather from it.
    Tensor G = o.empty({n, F}, act, workspace_tag());
    {
      ScopedRange sr(r, "ffn.gate");
      o.gemm(x, false, *w.w_gate, w.decode_layout, G);
    }
    {
      ScopedRange sr(r, "ffn.topk");
      if (forced_idx_.defined()) {
        if (forced_idx_.rows() != n || forced_idx_.cols() != K)
          throw std::invalid_argument("forced selection " + shape_str(forced_idx_.shape()) + " does not match [" +
                                      std::to_string(n) + ", " + std::to_string(K) + "]");
        o.copy(idx, forced_idx_);
      } else {
        o.moc_select(G, selection(F), idx);  // M = TopK(G), eq. 4
      }
      o.gather_cols(G, idx, gsel);                   // G ⊙ M, kept compact
    }
  }
  {
    Tensor U = o.empty({n, F}, act, workspace_tag());
    ScopedRange sr(r, "ffn.up");
    o.gemm(x, false, *w.w_up, w.decode_layout, U);
    o.gather_cols(U, idx, usel);  // U ⊙ M
  }
  const bool store_sz = keep && !cfg_->ffn.gcp;
  Tensor ssel, zsel = o.empty({n, K}, act, keep_tag(store_sz));
  {
    ScopedRange sr(r, "ffn.act");
    if (store_sz) ssel = o.empty({n, K}, act, keep_tag(true));
    o.swiglu_forward(gsel, usel, store_sz ? &ssel : nullptr, zsel);  // S' = SiLU(G) ⊙ M, Z' = S' ⊙ U
  }
  {
    ScopedRange sr(r, "ffn.down");
    o.sparse_rows_matmul(zsel, idx, *w.w_down, out, beta);  // D = Z' W_down, eq. 6
  }
  if (keep) {
    g_ = gsel;
    u_ = usel;
    if (store_sz) {
      s_ = ssel;
      z_ = zsel;
    }
  }
  idx_ = idx;  // kept for inspection even in inference (tiny: rows x kept i16)
}

void Ffn::backward_moc(const Tensor& x, const Tensor& dout, const FfnWeights& w, Tensor& dx, const FfnGrads& g,
                       RangeSink* r) {
  Ops& o = *ops_;
  const std::int64_t n = x.rows(), F = cols_of(w), K = cfg_->kept_channels();
  const DType act = cfg_->act_dtype;
  Tensor S = s_, Z = z_;
  if (!Z.defined()) {  // MoC + GCP: recompute S' and Z' from the kept G ⊙ M and U ⊙ M
    ScopedRange sr(r, "ffn.recompute");
    S = o.empty({n, K}, act, workspace_tag());
    Z = o.empty({n, K}, act, workspace_tag());
    o.swiglu_forward(g_, u_, &S, Z);
  }
  Tensor dZ = o.empty({n, K}, act, workspace_tag());
  {
    ScopedRange sr(r, "ffn.down");
    // ∇Z' = ∇D W_downᵀ on the selected channels; ∇W_down += Z'ᵀ ∇D on their rows (eq. 7a)
    o.sparse_rows_matmul_backward(dout, Z, idx_, *w.w_down, dZ, *g.w_down);
  }
  Tensor dGsel = o.empty({n, K}, act, workspace_tag());
  Tensor dUsel = o.empty({n, K}, act, workspace_tag());
  {
    ScopedRange sr(r, "ffn.act");
    // ∇S' = (U ⊙ M) ⊙ ∇Z', ∇U = S' ⊙ ∇Z', ∇G = ∇S' ⊙ SiLU'(G) (eq. 7b, 7c)
    o.swiglu_backward(dZ, g_, u_, &S, dGsel, dUsel);
  }
  dZ.reset();
  S.reset();
  Z.reset();
  {
    ScopedRange sr(r, "ffn.gate");
    Tensor dG = o.empty({n, F}, act, workspace_tag());
    o.scatter_cols(dGsel, idx_, dG);
    o.gemm(x, true, dG, false, *g.w_gate, 1.0f, 1.0f);  // eq. 7d
    o.gemm(dG, false, *w.w_gate, true, dx);             // eq. 7e
  }
  {
    ScopedRange sr(r, "ffn.up");
    Tensor dU = o.empty({n, F}, act, workspace_tag());
    o.scatter_cols(dUsel, idx_, dU);
    o.gemm(x, true, dU, false, *g.w_up, 1.0f, 1.0f);
    o.gemm(dU, false, *w.w_up, true, dx, 1.0f, 1.0f);
  }
}

}  // namespace moc
