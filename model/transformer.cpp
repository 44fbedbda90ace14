#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>

namespace moc {

namespace {
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t name_hash(const std::string& s) {  // FNV-1a: stable across platforms and runs
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Counter-based normal samples: value i of a tensor depends only on (seed, name, i), so every backend
// and every build produces the same weights.
std::vector<float> normal_values(std::uint64_t seed, const std::string& name, std::int64_t n, float std) {
  std::vector<float> out(static_cast<std::size_t>(n));
  const std::uint64_t base = mix64(seed ^ name_hash(name));
  // Counter-based: each pair of elements depends only on (seed, name, pair index), so threads split the
  // work freely; one Box-Muller draw gives both elements of a pair (cos and sin).
  const std::int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < pairs; ++k) {
    const std::uint64_t a = mix64(base + 2 * static_cast<std::uint64_t>(k));
    const std::uint64_t b = mix64(base + 2 * static_cast<std::uint64_t>(k) + 1);
    const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
    const double rad = std::sqrt(-2.0 * std::log(u1)), ang = 2.0 * std::numbers::pi * u2;
    out[static_cast<std::size_t>(2 * k)] = std * static_cast<float>(rad * std::cos(ang));
    if (2 * k + 1 < n) out[static_cast<std::size_t>(2 * k + 1)] = std * static_cast<float>(rad * std::sin(ang));
  }
  return out;
}

std::vector<std::int32_t> row_positions(int batch, int seq) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(seq));
  return p;
}
}  // namespace

Transformer::Transformer(Ops& ops, const ModelConfig& cfg) : ops_(&ops), cfg_(cfg) {
  cfg_.validate();
  // FFN weights hold ffn_cols() >= d_ffn channels (aligned rows); the padding channels are zero.
  const int d = cfg_.hidden, F = cfg_.ffn_cols(), kvd = cfg_.kv_heads * cfg_.head_dim(), hd = cfg_.head_dim();
  // Param addresses must stay stable: room for every parameter up front.
  params_.reserve(3 + static_cast<std::size_t>(cfg_.layers) * (9 + 3 + 3 * static_cast<std::size_t>(cfg_.ffn_blocks())));
  if (cfg_.moe()) moes_.reserve(static_cast<std::size_t>(cfg_.layers));
  embed_ = &add_param("embed", {cfg_.vocab, d}, cfg_.init_std, true);
  std::vector<std::vector<std::size_t>> layer_params;
  for (int l = 0; l < cfg_.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    const std::size_t first = params_.size();
    LayerParams lp{};
    lp.attn_norm = &add_param(p + "attn_norm", {d}, 0.0f, false);
    lp.wq = &add_param(p + "wq", {d, d}, cfg_.init_std, true);
    lp.wk = &add_param(p + "wk", {d, kvd}, cfg_.init_std, true);
    lp.wv = &add_param(p + "wv", {d, kvd}, cfg_.init_std, true);
    lp.wo = &add_param(p + "wo", {d, d}, cfg_.init_std, true);
    if (cfg_.qk_norm) {
      lp.q_norm = &add_param(p + "q_norm", {hd}, 0.0f, false);
      lp.k_norm = &add_param(p + "k_norm", {hd}, 0.0f, false);
    }
    lp.ffn_norm = &add_param(p + "ffn_norm", {d}, 0.0f, false);
    if (cfg_.moe()) {
      lp.router = &add_param(p + "router", {d, cfg_.experts}, cfg_.init_std, true);
      for (int e = 0; e < cfg_.experts; ++e) {
        const std::string pe = p + "expert" + std::to_string(e) + ".";
        lp.expert_gate.push_back(&add_param(pe + "w_gate", {d, F}, cfg_.init_std, true));
        lp.expert_up.push_back(&add_param(pe + "w_up", {d, F}, cfg_.init_std, true));
        lp.expert_down.push_back(&add_param(pe + "w_down", {F, d}, cfg_.init_std, true));
      }
      lp.w_gate = lp.expert_gate[0];
      lp.w_up = lp.expert_up[0];
      lp.w_down = lp.expert_down[0];
      moes_.emplace_back(ops, cfg_, l);
    } else {
      lp.w_gate = &add_param(p + "w_gate", {d, F}, cfg_.init_std, true);
      lp.w_up = &add_param(p + "w_up", {d, F}, cfg_.init_std, true);
      lp.w_down = &add_param(p + "w_down", {F, d}, cfg_.init_std, true);
    }
    layers_.push_back(lp);
    ffns_.emplace_back(ops, cfg_, l);
    layer_params.emplace_back();
    for (std::size_t i = first; i < params_.size(); ++i) layer_params.back().push_back(i);
  }
  final_norm_ = &add_param("final_norm", {d}, 0.0f, false);
  lm_head_ = &add_param("lm_head", {d, cfg_.vocab}, cfg_.init_std, true);
  // The order backward() finalizes gradients in: the head, the layers from the last, the embedding.
  ready_groups_.push_back({params_.size() - 1, params_.size() - 2});
  for (int l = cfg_.layers - 1; l >= 0; --l) ready_groups_.push_back(layer_params[static_cast<std::size_t>(l)]);
  ready_groups_.push_back({0});
  init_weights();
}

Param& Transformer::add_param(const std::string& name, const Shape& shape, float init_std, bool decay) {
  params_.push_back({name, ops_->empty(shape, cfg_.param_dtype, weights_tag()), Tensor(), decay});
  // init_std 0 marks a norm gain (initialized to one).
  if (init_std == 0.0f) params_.back().decay = false;
  return params_.back();
}

void Transformer::init_weights() {
  const std::int64_t F = cfg_.d_ffn, Fp = cfg_.ffn_cols();
  for (auto& p : params_) {
    const bool gain = !p.decay;
    const bool ffn = p.name.ends_with(".w_gate") || p.name.ends_with(".w_up") || p.name.ends_with(".w_down");
    if (gain || !ffn || F == Fp) {
      std::vector<float> v = gain ? std::vector<float>(static_cast<std::size_t>(p.value.numel()), 1.0f)
                                  : normal_values(cfg_.seed, p.name, p.value.numel(), cfg_.init_std);
      ops_->upload_f32(p.value, v);
      continue;
    }
    // The logical [d, d_ffn] / [d_ffn, d] values (the same as an unpadded model's), zero padding channels.
    const std::int64_t logical = p.value.numel() / Fp * F;
    const std::vector<float> v = normal_values(cfg_.seed, p.name, logical, cfg_.init_std);
    std::vector<float> padded(static_cast<std::size_t>(p.value.numel()), 0.0f);
    if (p.value.dim(1) == Fp) {  // [d, Fp]: row r's first F columns
      for (std::int64_t r = 0; r < p.value.dim(0); ++r)
        std::copy_n(v.begin() + r * F, F, padded.begin() + r * Fp);
    } else {  // [Fp, d]: the first F rows
      std::copy(v.begin(), v.end(), padded.begin());
    }
    ops_->upload_f32(p.value, padded);
  }
}

Param& Transformer::param(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

std::int64_t Transformer::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p.value.numel();
  // The FFN's zero padding channels are storage, not parameters.
  return n - 3LL * cfg_.layers * cfg_.ffn_blocks() * cfg_.hidden * (cfg_.ffn_cols() - cfg_.d_ffn);
}

void Transformer::allocate_grads() {
  for (auto& p : params_)
    if (!p.grad.defined()) p.grad = ops_->empty(p.value.shape(), cfg_.param_dtype, {MemCategory::gradients});
  zero_grads();
}

void Transformer::zero_grads() {
  for (auto& p : params_)
    if (p.grad.defined()) ops_->fill(p.grad, 0.0f);
}

FfnWeights Transformer::ffn_weights(int l) const {
  const auto& lp = layers_[static_cast<std::size_t>(l)];
  return {&lp.w_gate->value, &lp.w_up->value, &lp.w_down->value, decode_layout_};
}

std::vector<FfnWeights> Transformer::expert_weights(int l) const {
  const auto& lp = layers_[static_cast<std::size_t>(l)];
  std::vector<FfnWeights> w;
  for (std::size_t e = 0; e < lp.expert_gate.size(); ++e)
    w.push_back({&lp.expert_gate[e]->value, &lp.expert_up[e]->value, &lp.expert_down[e]->value, decode_layout_});
  return w;
}

void Transformer::project_qk(const Tensor& xn, const LayerParams& lp, Tensor& q2, Tensor& k2, Tensor* q_raw,
                             Tensor* k_raw, Tensor* rstd_q, Tensor* rstd_k) {
  if (!cfg_.qk_norm) {
    proj(xn, *lp.wq, q2);
    proj(xn, *lp.wk, k2);
    return;
  }
  const std::int64_t hd = cfg_.head_dim(), rq = q2.numel() / hd, rk = k2.numel() / hd;
  proj(xn, *lp.wq, *q_raw);
  proj(xn, *lp.wk, *k_raw);
  Tensor qr = q_raw->reshape({rq, hd}), kr = k_raw->reshape({rk, hd});
  Tensor qo = q2.reshape({rq, hd}), ko = k2.reshape({rk, hd});
  ops_->rmsnorm_forward(qr, lp.q_norm->value, cfg_.norm_eps, qo, *rstd_q);
  ops_->rmsnorm_forward(kr, lp.k_norm->value, cfg_.norm_eps, ko, *rstd_k);
}

Tensor Transformer::run_layers(const Tensor& tokens, int batch, int seq, Mode mode, KvCache* cache) {
  Ops& o = *ops_;
  const bool keep = mode == Mode::train;
  const std::int64_t n = static_cast<std::int64_t>(batch) * seq;
  const int d = cfg_.hidden, h = cfg_.heads, kvh = cfg_.kv_heads, hd = cfg_.head_dim();
  const DType act = cfg_.act_dtype;
  auto tag = [&](ActModule m, int layer) { return keep ? activation_tag(m, layer) : workspace_tag(); };

  Tensor pos = o.empty({n}, DType::i32, workspace_tag());
  o.upload_i32(pos, row_positions(batch, seq));
  Tensor start;
  if (mode == Mode::prefill) {
    start = o.empty({batch}, DType::i32, workspace_tag());
    o.fill(start, 0.0f);
  }

  Tensor hcur = o.empty({n, d}, act, tag(ActModule::residual, 0));
  {
    ScopedRange sr(ranges_, "embedding");
    o.embedding_forward(tokens, embed_->value, hcur);
  }
  if (keep) saved_.assign(static_cast<std::size_t>(cfg_.layers), {});

  for (int l = 0; l < cfg_.layers; ++l) {
    ScopedRange layer_range(ranges_, "layer." + std::to_string(l));
    const auto& lp = layers_[static_cast<std::size_t>(l)];
    LayerSaved s;
    s.h_in = hcur;
    {
      ScopedRange sr(ranges_, "attention");
      // The normalized input is recomputed in backward from h_in and rstd (one cheap pass) instead of being
      // kept: 2 bsd bytes per layer less. Only 1/rms stays.
      s.xn1 = o.empty({n, d}, act, workspace_tag());
      s.rstd1 = o.empty({n}, DType::f32, tag(ActModule::norm, l));
      o.rmsnorm_forward(hcur, lp.attn_norm->value, cfg_.norm_eps, s.xn1, s.rstd1);
      s.q = o.empty({batch, seq, h, hd}, act, tag(ActModule::attention, l));
      s.k = o.empty({batch, seq, kvh, hd}, act, tag(ActModule::attention, l));
      s.v = o.empty({batch, seq, kvh, hd}, act, tag(ActModule::attention, l));
      Tensor q2 = s.q.reshape({n, h * hd}), k2 = s.k.reshape({n, kvh * hd}), v2 = s.v.reshape({n, kvh * hd});
      if (cfg_.qk_norm) {
        s.q_raw = o.empty({n, h * hd}, act, tag(ActModule::attention, l));
        s.k_raw = o.empty({n, kvh * hd}, act, tag(ActModule::attention, l));
        s.rstd_q = o.empty({n * h}, DType::f32, tag(ActModule::attention, l));
        s.rstd_k = o.empty({n * kvh}, DType::f32, tag(ActModule::attention, l));
      }
      project_qk(s.xn1, lp, q2, k2, &s.q_raw, &s.k_raw, &s.rstd_q, &s.rstd_k);
      proj(s.xn1, *lp.wv, v2);
      Tensor q3 = s.q.reshape({n, h, hd}), k3 = s.k.reshape({n, kvh, hd});
      o.rope(q3, pos, cfg_.rope_theta, false);
      o.rope(k3, pos, cfg_.rope_theta, false);
      if (mode == Mode::prefill)
        o.kv_cache_write(s.k, s.v, start, cache->k[static_cast<std::size_t>(l)], cache->v[static_cast<std::size_t>(l)]);
      s.attn = o.empty({batch, seq, h, hd}, act, tag(ActModule::attention, l));
      s.lse = o.empty({batch, h, seq}, DType::f32, tag(ActModule::attention, l));
      o.attention_forward(s.q, s.k, s.v, s.attn, s.lse);
      // h_mid = h_in + attn W_o: the projection accumulates into a copy of the residual stream.
      s.h_mid = o.empty({n, d}, act, tag(ActModule::residual, l));
      o.copy(s.h_mid, hcur);
      Tensor attn2 = s.attn.reshape({n, d});
      proj(attn2, *lp.wo, s.h_mid, 1.0f);
    }
    {
      ScopedRange sr(ranges_, "ffn");
      s.xn2 = o.empty({n, d}, act, workspace_tag());
      s.rstd2 = o.empty({n}, DType::f32, tag(ActModule::norm, l));
      o.rmsnorm_forward(s.h_mid, lp.ffn_norm->value, cfg_.norm_eps, s.xn2, s.rstd2);
      if (ffn_probe_) ffn_probe_(l, s.xn2);
      const bool last = l + 1 == cfg_.layers;
      Tensor h_out = o.empty({n, d}, act, last ? tag(ActModule::head, -1) : tag(ActModule::residual, l + 1));
      o.copy(h_out, s.h_mid);
      if (cfg_.moe())
        moes_[static_cast<std::size_t>(l)].forward(s.xn2, lp.router->value, expert_weights(l), h_out, keep, ranges_);
      else
        ffns_[static_cast<std::size_t>(l)].forward(s.xn2, ffn_weights(l), h_out, 1.0f, keep, ranges_);
      hcur = h_out;
    }
    if (keep) {
      s.xn1.reset();
      s.xn2.reset();
      saved_[static_cast<std::size_t>(l)] = std::move(s);
    }
  }

  ScopedRange sr(ranges_, "head");
  Tensor xf = o.empty({n, d}, act, tag(ActModule::head, -1));
  Tensor rstdf = o.empty({n}, DType::f32, tag(ActModule::head, -1));
  o.rmsnorm_forward(hcur, final_norm_->value, cfg_.norm_eps, xf, rstdf);
  if (keep) {
    h_final_ = hcur;
    rstdf_ = rstdf;
  }
  return xf;
}

Tensor Transformer::head_logits(const Tensor& xf, bool keep) {
  ScopedRange sr(ranges_, "head");
  // Training keeps the logits in the activation dtype (bf16: half of fp32's bytes; the loss computes in
  // fp32 and its gradient overwrites them in place, so the backward GEMMs read bf16); inference returns f32.
  Tensor logits = ops_->empty({xf.rows(), cfg_.vocab}, keep ? cfg_.act_dtype : DType::f32,
                              keep ? activation_tag(ActModule::head) : workspace_tag());
  proj(xf, *lm_head_, logits);
  return logits;
}

double Transformer::forward(const Tensor& tokens, const Tensor& targets, int batch, int seq, bool keep) {
  if (tokens.numel() != static_cast<std::int64_t>(batch) * seq || targets.numel() != tokens.numel())
    throw std::invalid_argument("forward: tokens and targets must hold batch*seq = " +
                                std::to_string(static_cast<std::int64_t>(batch) * seq) + " ids");
  if (seq > cfg_.seq_len)
    throw std::invalid_argument("forward: seq " + std::to_string(seq) + " exceeds the model's seq_len " +
                                std::to_string(cfg_.seq_len));
  release_activations();
  Ops& o = *ops_;
  Tensor xf = run_layers(tokens, batch, seq, keep ? Mode::train : Mode::infer, nullptr);
  Tensor logits = head_logits(xf, keep);
  Tensor losses = o.empty({logits.rows()}, DType::f32, workspace_tag());
  std::vector<float> host;
  std::vector<std::int32_t> tgt;
  {
    ScopedRange sr(ranges_, "loss");
    o.cross_entropy_forward(logits, targets, losses);
    host = o.download_f32(losses);
    tgt = o.download_i32(targets);
  }
  double sum = 0;
  std::int64_t valid = 0;
  for (std::size_t i = 0; i < host.size(); ++i)
    if (tgt[i] >= 0) {
      sum += host[i];
      ++valid;
    }
  if (keep) {
    tokens_ = tokens;
    targets_ = targets;
    xf_ = xf;
    logits_ = logits;
    batch_ = batch;
    seq_ = seq;
    valid_targets_ = valid;
  }
  return valid ? sum / static_cast<double>(valid) : 0.0;
}

void Transformer::release_activations() {
  saved_.clear();
  for (auto& f : ffns_) f.release();
  for (auto& m : moes_) m.release();
  tokens_.reset();
  targets_.reset();
  h_final_.reset();
  xf_.reset();
  rstdf_.reset();
  logits_.reset();
}

void Transformer::backward() {
  if (!logits_.defined()) throw std::logic_error("backward() needs a forward(keep_for_backward = true) first");
  if (decode_layout_) throw std::logic_error("backward(): the model was switched to the decode layout (inference only)");
  if (!embed_->grad.defined()) allocate_grads();
  Ops& o = *ops_;
  const std::int64_t n = static_cast<std::int64_t>(batch_) * seq_;
  const int d = cfg_.hidden, h = cfg_.heads, kvh = cfg_.kv_heads, hd = cfg_.head_dim();
  const DType act = cfg_.act_dtype;
  auto ws = [&](const Shape& s, DType t) { return o.empty(s, t, workspace_tag()); };

  Tensor dh = ws({n, d}, act);  // gradient of the residual stream, updated in place layer by layer
  {
    ScopedRange sr(ranges_, "head");
    const float scale = valid_targets_ ? 1.0f / static_cast<float>(valid_targets_) : 0.0f;
    o.cross_entropy_backward(logits_, targets_, scale);  // logits_ now holds ∂loss/∂logits
    Tensor dxf = ws({n, d}, act);
    o.gemm(logits_, false, lm_head_->value, true, dxf);
    o.gemm(xf_, true, logits_, false, lm_head_->grad, 1.0f, 1.0f);
    logits_.reset();
    o.fill(dh, 0.0f);
    o.rmsnorm_backward(dxf, h_final_, final_norm_->value, rstdf_, dh, final_norm_->grad);
    xf_.reset();
    h_final_.reset();
    rstdf_.reset();
  }
  if (grads_ready_) grads_ready_(ready_groups_.front());
  Tensor pos = ws({n}, DType::i32);  // RoPE positions, the same for every layer
  o.upload_i32(pos, row_positions(batch_, seq_));
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    ScopedRange layer_range(ranges_, "layer." + std::to_string(l));
    const auto& lp = layers_[static_cast<std::size_t>(l)];
    LayerSaved& s = saved_[static_cast<std::size_t>(l)];
    {
      ScopedRange sr(ranges_, "ffn");
      Tensor xn2 = ws({n, d}, act), rstd = ws({n}, DType::f32);  // recomputed: the forward's values exactly
      o.rmsnorm_forward(s.h_mid, lp.ffn_norm->value, cfg_.norm_eps, xn2, rstd);
      Tensor dxn2 = ws({n, d}, act);
      if (cfg_.moe()) {
        std::vector<FfnGrads> g;
        for (std::size_t e = 0; e < lp.expert_gate.size(); ++e)
          g.push_back({&lp.expert_gate[e]->grad, &lp.expert_up[e]->grad, &lp.expert_down[e]->grad});
        moes_[static_cast<std::size_t>(l)].backward(xn2, dh, lp.router->value, expert_weights(l), dxn2, lp.router->grad, g,
                                                    ranges_);
      } else {
        const FfnGrads g{&lp.w_gate->grad, &lp.w_up->grad, &lp.w_down->grad};
        ffns_[static_cast<std::size_t>(l)].backward(xn2, dh, ffn_weights(l), dxn2, g, ranges_);
      }
      o.rmsnorm_backward(dxn2, s.h_mid, lp.ffn_norm->value, s.rstd2, dh, lp.ffn_norm->grad);  // dh: ∂/∂h_mid
    }
    {
      ScopedRange sr(ranges_, "attention");
      Tensor xn1 = ws({n, d}, act), rstd = ws({n}, DType::f32);
      o.rmsnorm_forward(s.h_in, lp.attn_norm->value, cfg_.norm_eps, xn1, rstd);
      Tensor attn2 = s.attn.reshape({n, d});
      Tensor dattn = ws({batch_, seq_, h, hd}, act);
      Tensor dattn2 = dattn.reshape({n, d});
      o.gemm(dh, false, lp.wo->value, true, dattn2);
      o.gemm(attn2, true, dh, false, lp.wo->grad, 1.0f, 1.0f);
      Tensor dq = ws(s.q.shape(), act), dk = ws(s.k.shape(), act), dv = ws(s.v.shape(), act);
      o.attention_backward(s.q, s.k, s.v, s.attn, s.lse, dattn, dq, dk, dv);
      dattn.reset();
      Tensor dq3 = dq.reshape({n, h, hd}), dk3 = dk.reshape({n, kvh, hd});
      o.rope(dq3, pos, cfg_.rope_theta, true);  // RoPE is a rotation: its backward rotates back
      o.rope(dk3, pos, cfg_.rope_theta, true);
      if (cfg_.qk_norm) {  // back through the per-head RMSNorm: the projections' outputs were q_raw, k_raw
        const std::int64_t rq = n * h, rk = n * kvh;
        Tensor dq_raw = ws({n, h * hd}, act), dk_raw = ws({n, kvh * hd}, act);
        o.fill(dq_raw, 0.0f);
        o.fill(dk_raw, 0.0f);
        Tensor dqv = dq.reshape({rq, hd}), dkv = dk.reshape({rk, hd}), qr = s.q_raw.reshape({rq, hd}),
               kr = s.k_raw.reshape({rk, hd}), dqr = dq_raw.reshape({rq, hd}), dkr = dk_raw.reshape({rk, hd});
        o.rmsnorm_backward(dqv, qr, lp.q_norm->value, s.rstd_q, dqr, lp.q_norm->grad);
        o.rmsnorm_backward(dkv, kr, lp.k_norm->value, s.rstd_k, dkr, lp.k_norm->grad);
        dq = dq_raw;
        dk = dk_raw;
      }
      Tensor dq2 = dq.reshape({n, h * hd}), dk2 = dk.reshape({n, kvh * hd}), dv2 = dv.reshape({n, kvh * hd});
      Tensor dxn1 = ws({n, d}, act);
      o.gemm(dq2, false, lp.wq->value, true, dxn1);
      o.gemm(dk2, false, lp.wk->value, true, dxn1, 1.0f, 1.0f);
      o.gemm(dv2, false, lp.wv->value, true, dxn1, 1.0f, 1.0f);
      o.gemm(xn1, true, dq2, false, lp.wq->grad, 1.0f, 1.0f);
      o.gemm(xn1, true, dk2, false, lp.wk->grad, 1.0f, 1.0f);
      o.gemm(xn1, true, dv2, false, lp.wv->grad, 1.0f, 1.0f);
      o.rmsnorm_backward(dxn1, s.h_in, lp.attn_norm->value, s.rstd1, dh, lp.attn_norm->grad);  // dh: ∂/∂h_in
    }
    s = LayerSaved{};  // this layer's activations are no longer needed
    if (grads_ready_) grads_ready_(ready_groups_[static_cast<std::size_t>(cfg_.layers - l)]);
  }
  {
    ScopedRange sr(ranges_, "embedding");
    o.embedding_backward(tokens_, dh, embed_->grad);
  }
  if (grads_ready_) grads_ready_(ready_groups_.back());
  release_activations();
}

Tensor Transformer::forward_logits(const Tensor& tokens, int batch, int seq) {
  release_activations();
  Tensor xf = run_layers(tokens, batch, seq, Mode::infer, nullptr);
  return head_logits(xf, false);
}

KvCache Transformer::make_kv_cache(int batch, int max_seq) {
  if (batch <= 0 || max_seq <= 0) throw std::invalid_argument("KV cache needs batch > 0 and max_seq > 0");
  KvCache c;
  c.batch = batch;
  c.max_seq = max_seq;
  const MemTag tag{MemCategory::kv_cache};
  for (int l = 0; l < cfg_.layers; ++l) {
    c.k.push_back(ops_->empty({batch, cfg_.kv_heads, max_seq, cfg_.head_dim()}, cfg_.act_dtype, tag));
    c.v.push_back(ops_->empty({batch, cfg_.kv_heads, max_seq, cfg_.head_dim()}, cfg_.act_dtype, tag));
  }
  return c;
}

void Transformer::proj(const Tensor& x, const Param& w, Tensor& out, float beta) {
  ops_->gemm(x, false, w.value, proj_transposed_, out, 1.0f, beta);
}

void Transformer::prepare_decode() {
  if (cfg_.moe())
    throw std::invalid_argument("prepare_decode: a mixture-of-experts model does not decode (its router groups "
                                "tokens per expert on the host, which a captured decode step cannot do)");
  // Decoding reads every projection as [out, in] rows (one output = one contiguous row: the decode GEMVs,
  // Ops::decode_qkv); prefill passes trans_b to its GEMMs.
  if (decode_layout_ && proj_transposed_) return;
  Ops& o = *ops_;
  // A one-time host transpose (the model knows no device code); each weight is replaced as it is done,
  // so at most one extra copy of one matrix is alive.
  auto transpose = [&](Param& p) {
    const std::int64_t r = p.value.dim(0), c = p.value.dim(1);
    const std::size_t es = dtype_bytes(p.value.dtype());
    std::vector<unsigned char> src(p.value.nbytes()), dst(p.value.nbytes());
    o.download(p.value, src.data());
    auto tr = [&](auto* d, const auto* sp) {
#pragma omp parallel for schedule(static)
      for (std::int64_t j = 0; j < c; ++j)
        for (std::int64_t i = 0; i < r; ++i) d[j * r + i] = sp[i * c + j];
    };
    if (es == 2) tr(reinterpret_cast<std::uint16_t*>(dst.data()), reinterpret_cast<const std::uint16_t*>(src.data()));
    else if (es == 4) tr(reinterpret_cast<std::uint32_t*>(dst.data()), reinterpret_cast<const std::uint32_t*>(src.data()));
    else throw std::logic_error("prepare_decode: unexpected element size");
    Tensor t = o.empty({c, r}, p.value.dtype(), p.value.tag());
    o.upload(t, dst.data());
    p.value = t;
    p.grad.reset();
  };
  if (!decode_layout_)
    for (auto& lp : layers_) {
      transpose(*lp.w_gate);
      transpose(*lp.w_up);
    }
  if (!proj_transposed_) {
    for (auto& lp : layers_)
      for (Param* p : {lp.wq, lp.wk, lp.wv, lp.wo}) transpose(*p);
    transpose(*lm_head_);
    proj_transposed_ = true;
  }
  decode_layout_ = true;
}

Tensor Transformer::prefill(const Tensor& tokens, int batch, int seq, KvCache& cache) {
  if (batch != cache.batch || seq > cache.max_seq)
    throw std::invalid_argument("prefill: batch " + std::to_string(batch) + " / prompt " + std::to_string(seq) +
                                " do not fit the cache (batch " + std::to_string(cache.batch) + ", max_seq " +
                                std::to_string(cache.max_seq) + ")");
  release_activations();
  Tensor xf = run_layers(tokens, batch, seq, Mode::prefill, &cache);
  return head_logits(xf, false);
}

bool Transformer::decode_step(const Tensor& tokens, const Tensor& pos, KvCache& cache, Tensor& logits,
                              Tensor* greedy_next) {
  Ops& o = *ops_;
  const int b = cache.batch, d = cfg_.hidden, h = cfg_.heads, kvh = cfg_.kv_heads, hd = cfg_.head_dim();
  const DType act = cfg_.act_dtype;
  auto ws = [&](const Shape& s, DType t) { return o.empty(s, t, workspace_tag()); };
  Tensor x = ws({b, d}, act);
  o.embedding_forward(tokens, embed_->value, x);
  Tensor xn = ws({b, d}, act), rstd = ws({b}, DType::f32);
  Tensor q = ws({b, h, hd}, act), k = ws({b, 1, kvh, hd}, act), v = ws({b, 1, kvh, hd}, act);
  Tensor attn = ws({b, h, hd}, act);
  Tensor q2 = q.reshape({b, h * hd}), k2 = k.reshape({b, kvh * hd}), v2 = v.reshape({b, kvh * hd});
  Tensor k3 = k.reshape({b, kvh, hd}), attn2 = attn.reshape({b, d});
  Tensor q_raw, k_raw, rstd_q, rstd_k;
  if (cfg_.qk_norm) {
    q_raw = ws({b, h * hd}, act);
    k_raw = ws({b, kvh * hd}, act);
    rstd_q = ws({b * h}, DType::f32);
    rstd_k = ws({b * kvh}, DType::f32);
  }
  // QK-norm (Qwen3-like) sits between the projections and RoPE: those models keep the composed ops.
  const bool fused_qkv = proj_transposed_ && !cfg_.qk_norm;
  for (int l = 0; l < cfg_.layers; ++l) {
    ScopedRange layer_range(ranges_, "layer." + std::to_string(l));
    const auto& lp = layers_[static_cast<std::size_t>(l)];
    {
      ScopedRange sr(ranges_, "attention");
      if (fused_qkv) {  // RMSNorm, q/k/v, RoPE and the cache write as one op (one kernel on the GPU)
        o.decode_qkv(x, lp.attn_norm->value, cfg_.norm_eps, lp.wq->value, lp.wk->value, lp.wv->value, pos,
                     cfg_.rope_theta, q, cache.k[static_cast<std::size_t>(l)], cache.v[static_cast<std::size_t>(l)]);
      } else {
        o.rmsnorm_forward(x, lp.attn_norm->value, cfg_.norm_eps, xn, rstd);
        project_qk(xn, lp, q2, k2, &q_raw, &k_raw, &rstd_q, &rstd_k);
        proj(xn, *lp.wv, v2);
        o.rope(q, pos, cfg_.rope_theta, false);
        o.rope(k3, pos, cfg_.rope_theta, false);
        o.kv_cache_write(k, v, pos, cache.k[static_cast<std::size_t>(l)], cache.v[static_cast<std::size_t>(l)]);
      }
      o.attention_decode(q, cache.k[static_cast<std::size_t>(l)], cache.v[static_cast<std::size_t>(l)], pos, attn);
      proj(attn2, *lp.wo, x, 1.0f);  // residual add in place
    }
    {
      ScopedRange sr(ranges_, "ffn");
      if (decode_layout_) {  // the FFN's RMSNorm inside the op (on the GPU: inside the ring kernels, dense and a:b)
        ffns_[static_cast<std::size_t>(l)].decode(x, ffn_weights(l), x, nullptr, ranges_, &lp.ffn_norm->value,
                                                  cfg_.norm_eps);
      } else {
        o.rmsnorm_forward(x, lp.ffn_norm->value, cfg_.norm_eps, xn, rstd);
        ffns_[static_cast<std::size_t>(l)].forward(xn, ffn_weights(l), x, 1.0f, false, ranges_);
      }
    }
  }
  ScopedRange sr(ranges_, "head");
  o.rmsnorm_forward(x, final_norm_->value, cfg_.norm_eps, xn, rstd);
  if (greedy_next && proj_transposed_) {  // the LM head [vocab, d] and the argmax as one op
    o.lm_head_argmax(xn, lm_head_->value, logits, *greedy_next);
    return true;
  }
  proj(xn, *lm_head_, logits);
  return false;
}

}  // namespace moc
