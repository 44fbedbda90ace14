// Ops::decode_step and Ops::ffn_decode_layers on the GPU: checks the tensors, fills the persistent kernel's
// Problem (decode_step.cuh) and launches it, or, for shapes the kernel does not take (f32, more than 4
// rows, ...), runs the composed default of the Ops interface.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_step.cuh"
#include "kernels/cuda/kernels.h"

namespace moc::cuda {
namespace {

bool on_gpu_bf16(const Tensor* t) { return t && t->defined() && t->device() == DeviceKind::cuda && t->dtype() == DType::bf16; }

void set_selection(step::Problem& p, const MocSelect* sel, std::int64_t F) {
  if (!sel) {
    p.sel = step::Sel::dense;
    return;
  }
  p.sel = sel->grouped() ? step::Sel::grouped : step::Sel::topk;
  p.k = sel->k;
  p.group_a = sel->group_a;
  p.group_b = sel->group_b;
  p.rule = static_cast<int>(sel->rule);
  require(sel->width == 0 || sel->width == F, "decode_step", "a selection narrower than the weights is not supported");
}

void fill_ffn(step::LayerPtrs& L, const DecodeFfnWeights& w) {
  L.wg = w.w_gate_t->raw();
  L.wu = w.w_up_t->raw();
  L.wd = w.w_down->raw();
}

bool ffn_ok(const DecodeFfnWeights& w, std::int64_t F, std::int64_t d) {
  for (const Tensor* t : {w.w_gate_t, w.w_up_t, w.w_down})
    if (!on_gpu_bf16(t) || t->rows() != F || t->cols() != d) return false;
  return true;
}

void run(Ops& ops, const step::Problem& p) {
  const std::size_t bytes = step::workspace_bytes(p, step::grid_blocks());
  Tensor ws = ops.empty({static_cast<std::int64_t>((bytes + 3) / 4)}, DType::i32, workspace_tag());
  step::launch(p, ws.raw(), ws.nbytes(), stream_of(ops));
}

}  // namespace

void decode_step(Ops& ops, const DecodeStepArgs& a) {
  const char* op = "decode_step";
  require(a.tokens && a.pos && a.embed && a.final_norm && a.lm_head_t && a.logits && !a.layers.empty(), op,
          "tokens, positions, embedding, final norm, LM head, logits and at least one layer are needed");
  const std::int64_t b = a.tokens->numel(), d = a.embed->cols(), V = a.embed->rows();
  require(a.heads > 0 && a.kv_heads > 0 && d % a.heads == 0, op, "heads must divide the hidden size");
  const std::int64_t F = a.layers[0].ffn.w_gate_t ? a.layers[0].ffn.w_gate_t->rows() : 0;
  step::Problem p;
  p.rows = static_cast<int>(b);
  p.d = static_cast<int>(d);
  p.heads = a.heads;
  p.kv_heads = a.kv_heads;
  p.head_dim = static_cast<int>(d / a.heads);
  p.d_ffn = static_cast<int>(F);
  p.vocab = static_cast<int>(V);
  p.layers = static_cast<int>(a.layers.size());
  p.eps = a.norm_eps;
  p.theta = a.rope_theta;
  set_selection(p, a.sel, F);
  bool ok = a.act_dtype == DType::bf16 && on_gpu_bf16(a.embed) && on_gpu_bf16(a.final_norm) &&
            on_gpu_bf16(a.lm_head_t) && a.lm_head_t->rows() == V && a.lm_head_t->cols() == d &&
            a.logits->dtype() == DType::f32 && a.logits->rows() == b && a.logits->cols() == V &&
            a.tokens->dtype() == DType::i32 && a.pos->dtype() == DType::i32 && a.pos->numel() == b;
  const std::int64_t hq = static_cast<std::int64_t>(a.heads) * p.head_dim, hk = static_cast<std::int64_t>(a.kv_heads) * p.head_dim;
  for (std::size_t l = 0; ok && l < a.layers.size(); ++l) {
    const DecodeStepLayer& s = a.layers[l];
    ok = on_gpu_bf16(s.attn_norm) && on_gpu_bf16(s.ffn_norm) && on_gpu_bf16(s.wq_t) && s.wq_t->rows() == hq &&
         on_gpu_bf16(s.wk_t) && s.wk_t->rows() == hk && on_gpu_bf16(s.wv_t) && s.wv_t->rows() == hk &&
         on_gpu_bf16(s.wo_t) && s.wo_t->rows() == d && s.wo_t->cols() == hq && ffn_ok(s.ffn, F, d) &&
         on_gpu_bf16(s.k_cache) && on_gpu_bf16(s.v_cache) && s.k_cache->rank() == 4 && s.k_cache->dim(0) == b &&
         s.k_cache->dim(1) == a.kv_heads && s.k_cache->dim(3) == p.head_dim && s.v_cache->shape() == s.k_cache->shape();
    if (!ok || l >= static_cast<std::size_t>(step::kMaxLayers)) break;
    step::LayerPtrs& L = p.layer[l];
    L.attn_norm = s.attn_norm->raw();
    L.wq = s.wq_t->raw();
    L.wk = s.wk_t->raw();
    L.wv = s.wv_t->raw();
    L.wo = s.wo_t->raw();
    L.ffn_norm = s.ffn_norm->raw();
    fill_ffn(L, s.ffn);
    L.k_cache = s.k_cache->raw();
    L.v_cache = s.v_cache->raw();
    p.max_seq = static_cast<int>(s.k_cache->dim(2));
    if (a.sel) {
      const std::int64_t kept = a.sel->kept(static_cast<int>(F));
      if (s.force_idx)
        require(s.force_idx->dtype() == DType::i16 && s.force_idx->rows() == b && s.force_idx->cols() == kept, op,
                "force_idx must be i16 [batch, kept]");
      if (s.idx_out)
        require(s.idx_out->dtype() == DType::i16 && s.idx_out->rows() == b && s.idx_out->cols() == kept, op,
                "idx_out must be i16 [batch, kept]");
      L.force = s.force_idx ? static_cast<const std::uint16_t*>(s.force_idx->raw()) : nullptr;
      L.idx_out = s.idx_out ? static_cast<std::uint16_t*>(s.idx_out->raw()) : nullptr;
    }
  }
  p.tokens = static_cast<const std::int32_t*>(a.tokens->raw());
  p.pos = static_cast<const std::int32_t*>(a.pos->raw());
  p.embed = a.embed->raw();
  p.final_norm = a.final_norm->raw();
  p.lm_head = a.lm_head_t->raw();
  p.logits = static_cast<float*>(a.logits->raw());
  if (!ok || !step::unsupported(p).empty()) return ops.Ops::decode_step(a);  // the composed ops
  run(ops, p);
}

void ffn_decode_layers(Ops& ops, const Tensor& x, const std::vector<DecodeFfnWeights>& layers, const MocSelect* sel,
                       Tensor& out) {
  if (layers.empty() || x.rows() == 0) return;
  const std::int64_t b = x.rows(), d = x.cols();
  const std::int64_t F = layers[0].w_gate_t ? layers[0].w_gate_t->rows() : 0;
  step::Problem p;
  p.ffn_only = true;
  p.rows = static_cast<int>(b);
  p.d = static_cast<int>(d);
  p.d_ffn = static_cast<int>(F);
  p.layers = static_cast<int>(layers.size());
  set_selection(p, sel, F);
  bool ok = on_gpu_bf16(&x) && on_gpu_bf16(&out) && out.rows() == b && out.cols() == d &&
            layers.size() <= static_cast<std::size_t>(step::kMaxLayers);
  for (std::size_t l = 0; ok && l < layers.size(); ++l) {
    ok = ffn_ok(layers[l], F, d);
    if (ok) fill_ffn(p.layer[l], layers[l]);
  }
  p.x = x.raw();
  p.out = out.raw();
  if (!ok || !step::unsupported(p).empty()) return ops.Ops::ffn_decode_layers(x, layers, sel, out);
  run(ops, p);
}

}  // namespace moc::cuda
