// SwiGLU FFN variants with forward/backward pairs (paper §2, eq. 4-7, Table 2):
//   dense        keeps G, U, S, Z                        (4 bs d_ffn)
//   dense + GCP  keeps G, U; recomputes S, Z              (2 bs d_ffn)
//   MoC          keeps K selected G, U, S, Z + indices    (4 bsK values + bsK i16)
//   MoC + GCP    keeps K selected G, U + indices          (2 bsK values + bsK i16)
// MoC a:b keeps a of every b channels (K derived); the selection rule may rank G (paper), SiLU(G)
// (ablation) or |SiLU(G)| (Theorem 1). No d_ffn-wide tensor outlives forward in the MoC variants.
#pragma once
#include <cstdint>

#include "kernels/ops.h"
#include "model/config.h"
#include "profiling/ranges.h"

namespace moc {

// d_ffn below may also be ModelConfig::ffn_cols() (the Transformer's zero-padded layout: aligned rows).
struct FfnWeights {
  const Tensor* w_gate;  // [d, d_ffn], or [d_ffn, d] in the decode layout
  const Tensor* w_up;    // [d, d_ffn], or [d_ffn, d] in the decode layout
  const Tensor* w_down;  // [d_ffn, d]  (row j is channel j: contiguous for the sparse down projection)
  // Decode layout (inference only): W_gate and W_up are stored transposed, so a channel is one contiguous
  // row of every matrix (see Ops::ffn_decode). forward() works on it; backward() does not.
  bool decode_layout = false;
};

struct FfnGrads {
  Tensor* w_gate;
  Tensor* w_up;
  Tensor* w_down;
};

class Ffn {
 public:
  Ffn(Ops& ops, const ModelConfig& cfg, int layer) : ops_(&ops), cfg_(&cfg), layer_(layer) {}

  // out = beta * out + FFN(x) for x [rows, d]. With keep, stores what backward needs, tagged
  // activations/ffn/layer; everything else is workspace and freed before returning.
  void forward(const Tensor& x, const FfnWeights& w, Tensor& out, float beta, bool keep, RangeSink* ranges = nullptr);
  // dx = dFFN/dx (overwritten); weight gradients accumulate. Releases what forward stored.
  void backward(const Tensor& x, const Tensor& dout, const FfnWeights& w, Tensor& dx, const FfnGrads& g,
                RangeSink* ranges = nullptr);
  void release();
  // Decode-time forward for a few rows (out += FFN(x)) through Ops::ffn_decode; needs the decode layout.
  // A forced selection (force_selection) is used when set. idx_out, when given, receives the selection.
  // norm: x is the residual stream and the FFN's input is its RMSNorm (weight *norm, norm_eps), run inside the
  // op (out may be x itself).
  void decode(const Tensor& x, const FfnWeights& w, Tensor& out, Tensor* idx_out = nullptr,
              RangeSink* ranges = nullptr, const Tensor* norm = nullptr, float norm_eps = 0.0f);

  // decode() keeps its selection in selected() too while on (tests: not inside captured graphs).
  void set_record_selection(bool on) { record_selection_ = on; }
  // Channel indices selected by the last forward ([rows, kept] i16); undefined for dense.
  const Tensor& selected() const { return idx_; }
  // Use these channels ([rows, kept] i16) instead of selecting, until cleared: compares a backend with
  // another one's selection, and lets finite differences differentiate with the mask held fixed.
  void force_selection(const Tensor& idx) { forced_idx_ = idx; }
  void clear_forced_selection() { forced_idx_.reset(); }
  // Bytes forward(keep=true) stores for `rows` rows with weights of `cols` channels (0: cfg.ffn_cols(), the
  // Transformer's padded layout): exactly what the allocator will measure.
  static std::int64_t stored_bytes(const ModelConfig& cfg, std::int64_t rows, std::int64_t cols = 0);

 private:
  // Channels the weights hold: d_ffn, or cfg.ffn_cols() (zero-padded: activations follow the weights).
  std::int64_t cols_of(const FfnWeights& w) const;
  MocSelect selection(std::int64_t cols) const;
  void forward_dense(const Tensor& x, const FfnWeights& w, Tensor& out, float beta, bool keep, RangeSink* r);
  void forward_moc(const Tensor& x, const FfnWeights& w, Tensor& out, float beta, bool keep, RangeSink* r);
  void backward_dense(const Tensor& x, const Tensor& dout, const FfnWeights& w, Tensor& dx, const FfnGrads& g,
                      RangeSink* r);
  void backward_moc(const Tensor& x, const Tensor& dout, const FfnWeights& w, Tensor& dx, const FfnGrads& g,
                    RangeSink* r);
  MemTag keep_tag(bool keep) const {
    return keep ? activation_tag(ActModule::ffn, layer_) : workspace_tag();
  }

  Ops* ops_;
  const ModelConfig* cfg_;
  int layer_;
  // Dense: [rows, d_ffn]. MoC: compact [rows, kept], with idx_ the channel of each column.
  Tensor g_, u_, s_, z_, idx_;
  Tensor forced_idx_;
  bool record_selection_ = false;
};

}  // namespace moc
