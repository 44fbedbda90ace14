#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace moc {

MoeFfn::MoeFfn(Ops& ops, const ModelConfig& cfg, int layer) : ops_(&ops), cfg_(&cfg), layer_(layer) {
  if (cfg.experts <= 0) throw std::invalid_argument("MoeFfn: the model has no experts");
  experts_.reserve(static_cast<std::size_t>(cfg.experts));
  for (int e = 0; e < cfg.experts; ++e) experts_.emplace_back(ops, cfg, layer);
}

std::int64_t MoeFfn::stored_bytes(const ModelConfig& cfg, std::int64_t n) {
  const std::int64_t t = static_cast<std::int64_t>(cfg.experts_per_token) * n;
  const std::int64_t act = static_cast<std::int64_t>(dtype_bytes(cfg.act_dtype));
  return t * 4 + t * 4 + 2 * t * cfg.hidden * act + Ffn::stored_bytes(cfg, t);
}

void MoeFfn::release() {
  rows_.reset();
  w_.reset();
  x_.reset();
  y_.reset();
  for (auto& e : experts_) e.release();
}

void MoeFfn::route(const std::vector<float>& logits, std::int64_t n) {
  const int E = cfg_->experts, top = cfg_->experts_per_token;
  const auto T = static_cast<std::size_t>(n) * static_cast<std::size_t>(top);
  if (!forced_.empty() && forced_.size() != T)
    throw std::invalid_argument("MoeFfn: a forced routing needs " + std::to_string(T) + " expert ids, got " +
                                std::to_string(forced_.size()));
  route_.assign(T, 0);
  weight_.assign(T, 0.0f);
  std::vector<int> order(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < n; ++t) {
    const float* l = logits.data() + t * E;
    std::int32_t* r = route_.data() + t * top;
    if (!forced_.empty()) {
      for (int j = 0; j < top; ++j) {
        r[j] = forced_[static_cast<std::size_t>(t * top + j)];
        if (r[j] < 0 || r[j] >= E) throw std::invalid_argument("MoeFfn: forced expert id out of range");
        for (int i = 0; i < j; ++i)
          if (r[i] == r[j]) throw std::invalid_argument("MoeFfn: a token is forced to one expert twice");
      }
    } else {
      std::iota(order.begin(), order.end(), 0);
      // The top experts by logit, ties to the lower expert index (stable on the index order).
      std::partial_sort(order.begin(), order.begin() + top, order.end(),
                        [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      for (int j = 0; j < top; ++j) r[j] = order[static_cast<std::size_t>(j)];
    }
    // Softmax over the kept logits (Mixtral: softmax over all, top-k, renormalize -- the same weights).
    float mx = -INFINITY;
    for (int j = 0; j < top; ++j) mx = std::max(mx, l[r[j]]);
    double sum = 0;
    for (int j = 0; j < top; ++j) sum += std::exp(static_cast<double>(l[r[j]] - mx));
    for (int j = 0; j < top; ++j)
      weight_[static_cast<std::size_t>(t * top + j)] = static_cast<float>(std::exp(static_cast<double>(l[r[j]] - mx)) / sum);
  }
  // Group the routed rows per expert, tokens ascending inside a group.
  offset_.assign(static_cast<std::size_t>(E) + 1, 0);
  for (std::size_t s = 0; s < T; ++s) ++offset_[static_cast<std::size_t>(route_[s]) + 1];
  for (int e = 0; e < E; ++e) offset_[static_cast<std::size_t>(e) + 1] += offset_[static_cast<std::size_t>(e)];
  rows_host_.assign(T, 0);
  slot_of_row_.assign(T, 0);
  std::vector<std::int64_t> fill(offset_.begin(), offset_.end() - 1);
  for (std::size_t s = 0; s < T; ++s) {
    const auto g = static_cast<std::size_t>(fill[static_cast<std::size_t>(route_[s])]++);
    rows_host_[g] = static_cast<std::int32_t>(s / static_cast<std::size_t>(top));
    slot_of_row_[g] = static_cast<std::int32_t>(s);
  }
}

void MoeFfn::forward(const Tensor& x, const Tensor& w_router, const std::vector<FfnWeights>& experts, Tensor& out,
                     bool keep, RangeSink* ranges) {
  Ops& o = *ops_;
  const int E = cfg_->experts;
  if (static_cast<int>(experts.size()) != E)
    throw std::invalid_argument("MoeFfn: " + std::to_string(E) + " experts need as many weight sets");
  release();
  const std::int64_t n = x.rows(), d = x.cols();
  const auto T = static_cast<std::int64_t>(cfg_->experts_per_token) * n;
  const MemTag tag = keep ? activation_tag(ActModule::ffn, layer_) : workspace_tag();
  {
    ScopedRange sr(ranges, "ffn.router");
    Tensor logits = o.empty({n, E}, DType::f32, workspace_tag());
    o.gemm(x, false, w_router, false, logits);
    route(o.download_f32(logits), n);
  }
  ScopedRange sr(ranges, "ffn.experts");
  rows_ = o.empty({T}, DType::i32, tag);
  o.upload_i32(rows_, rows_host_);
  std::vector<float> w_grouped(static_cast<std::size_t>(T));
  for (std::size_t g = 0; g < w_grouped.size(); ++g) w_grouped[g] = weight_[static_cast<std::size_t>(slot_of_row_[g])];
  w_ = o.empty({T}, DType::f32, tag);
  o.upload_f32(w_, w_grouped);
  x_ = o.empty({T, d}, cfg_->act_dtype, tag);
  o.gather_rows(x, rows_, nullptr, x_);
  y_ = o.empty({T, d}, cfg_->act_dtype, tag);
  for (int e = 0; e < E; ++e) {
    const std::int64_t b = offset_[static_cast<std::size_t>(e)], end = offset_[static_cast<std::size_t>(e) + 1];
    if (b == end) continue;
    Tensor xe = x_.slice0(b, end), ye = y_.slice0(b, end), re = rows_.slice0(b, end), we = w_.slice0(b, end);
    experts_[static_cast<std::size_t>(e)].forward(xe, experts[static_cast<std::size_t>(e)], ye, 0.0f, keep, ranges);
    o.scatter_add_rows(ye, re, &we, out);
  }
  if (!keep) release();
}

void MoeFfn::backward(const Tensor& x, const Tensor& dout, const Tensor& w_router,
                      const std::vector<FfnWeights>& experts, Tensor& dx, Tensor& d_router,
                      const std::vector<FfnGrads>& grads, RangeSink* ranges) {
  Ops& o = *ops_;
  if (!x_.defined()) throw std::logic_error("MoeFfn::backward needs a forward(keep = true) first");
  const int E = cfg_->experts, top = cfg_->experts_per_token;
  const std::int64_t n = x.rows(), d = x.cols(), T = x_.rows();
  auto ws = [&](const Shape& s, DType t) { return o.empty(s, t, workspace_tag()); };
  o.fill(dx, 0.0f);
  Tensor dw = ws({T}, DType::f32);
  {
    ScopedRange sr(ranges, "ffn.experts");
    o.rows_dot(dout, rows_, y_, dw);  // dL/dweight of each routed row = dout[token] . y
    y_.reset();
    Tensor dy = ws({T, d}, cfg_->act_dtype);
    o.gather_rows(dout, rows_, &w_, dy);  // dL/dy = weight * dout[token]
    Tensor dxe_all = ws({T, d}, cfg_->act_dtype);
    for (int e = E - 1; e >= 0; --e) {
      const std::int64_t b = offset_[static_cast<std::size_t>(e)], end = offset_[static_cast<std::size_t>(e) + 1];
      if (b == end) continue;
      Tensor xe = x_.slice0(b, end), dye = dy.slice0(b, end), dxe = dxe_all.slice0(b, end), re = rows_.slice0(b, end);
      experts_[static_cast<std::size_t>(e)].backward(xe, dye, experts[static_cast<std::size_t>(e)], dxe,
                                                     grads[static_cast<std::size_t>(e)], ranges);
      o.scatter_add_rows(dxe, re, nullptr, dx);
    }
  }
  ScopedRange sr(ranges, "ffn.router");
  // Softmax over each token's kept logits: dL/dl_i = p_i (g_i - sum_j p_j g_j), zero for other experts.
  const std::vector<float> g_grouped = o.download_f32(dw);
  std::vector<float> g(static_cast<std::size_t>(T));
  for (std::size_t r = 0; r < g.size(); ++r) g[static_cast<std::size_t>(slot_of_row_[r])] = g_grouped[r];
  std::vector<float> dlog(static_cast<std::size_t>(n) * static_cast<std::size_t>(E), 0.0f);
  for (std::int64_t t = 0; t < n; ++t) {
    double mean = 0;
    for (int j = 0; j < top; ++j) mean += static_cast<double>(weight_[static_cast<std::size_t>(t * top + j)]) * g[static_cast<std::size_t>(t * top + j)];
    for (int j = 0; j < top; ++j) {
      const auto s = static_cast<std::size_t>(t * top + j);
      dlog[static_cast<std::size_t>(t * E + route_[s])] = static_cast<float>(weight_[s] * (g[s] - mean));
    }
  }
  Tensor dl = ws({n, E}, cfg_->act_dtype);
  o.upload_f32(dl, dlog);
  o.gemm(dl, false, w_router, true, dx, 1.0f, 1.0f);
  o.gemm(x, true, dl, false, d_router, 1.0f, 1.0f);
  release();
}

}  // namespace moc
