#include "model/evaluate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/config.h"

namespace moc {

double token_logprob(const float* row, std::size_t vocab, std::int32_t id) {
  const double mx = *std::max_element(row, row + vocab);
  double z = 0;
  for (std::size_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[static_cast<std::size_t>(id)]) - mx - std::log(z);
}

EvalResult evaluate_ids(Transformer& model, const std::vector<std::int32_t>& ids, int window, bool want_logprobs,
                        bool want_logits) {
  const ModelConfig& c = model.config();
  if (ids.size() < 2) throw ConfigError("eval: at least 2 token ids are needed (one to predict from, one to predict)");
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      throw ConfigError("eval: id " + std::to_string(ids[i]) + " (position " + std::to_string(i) +
                        ") is outside the model's vocabulary of " + std::to_string(c.vocab));
  if (window == 0) window = c.seq_len;
  if (window < 2 || window > c.seq_len)
    throw ConfigError("eval: window " + std::to_string(window) + " must be in [2, " + std::to_string(c.seq_len) +
                      "] (the model's positions)");
  Ops& o = model.ops();
  EvalResult r;
  double sum = 0;
  const auto V = static_cast<std::size_t>(c.vocab);
  for (std::size_t start = 0; start + 1 < ids.size(); start += static_cast<std::size_t>(window)) {
    const std::size_t n = std::min(ids.size() - start, static_cast<std::size_t>(window));
    if (n < 2) break;  // a last window of one id predicts nothing
    const std::vector<std::int32_t> w(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                      ids.begin() + static_cast<std::ptrdiff_t>(start + n));
    Tensor tok = o.empty({static_cast<std::int64_t>(n)}, DType::i32, workspace_tag());
    o.upload_i32(tok, w);
    const std::vector<float> logits = o.download_f32(model.forward_logits(tok, 1, static_cast<int>(n)));
    for (std::size_t p = 0; p + 1 < n; ++p) {
      const double lp = token_logprob(logits.data() + p * V, V, w[p + 1]);
      sum -= lp;
      if (want_logprobs) r.logprobs.push_back(lp);
      ++r.tokens;
    }
    if (want_logits) r.logits.insert(r.logits.end(), logits.begin(), logits.end());
    r.positions += static_cast<std::int64_t>(n);
    ++r.windows;
  }
  r.loss = sum / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  return r;
}

double mean_window_loss(Transformer& model, std::int64_t windows, int batch, int seq, const WindowFn& window,
                        const std::function<void()>& check) {
  Ops& o = model.ops();
  const std::int64_t n = static_cast<std::int64_t>(batch) * seq;
  Tensor tok = o.empty({n}, DType::i32, workspace_tag()), tgt = o.empty({n}, DType::i32, workspace_tag());
  std::vector<std::int32_t> htok, htgt;
  double sum = 0;
  std::int64_t tokens = 0;
  for (std::int64_t w0 = 0; w0 < windows; w0 += batch) {
    if (check) check();
    const int b = static_cast<int>(std::min<std::int64_t>(batch, windows - w0));
    htok.clear();
    htgt.clear();
    for (int r = 0; r < b; ++r) window(w0 + r, htok, htgt);
    const std::int64_t m = static_cast<std::int64_t>(b) * seq;
    Tensor vt = tok.slice0(0, m), vg = tgt.slice0(0, m);
    o.upload_i32(vt, htok);
    o.upload_i32(vg, htgt);
    sum += model.forward(vt, vg, b, seq, false) * static_cast<double>(m);
    tokens += m;
  }
  return sum / static_cast<double>(std::max<std::int64_t>(tokens, 1));
}

std::int64_t id_windows(std::size_t ids, int seq) {
  return static_cast<std::int64_t>(ids / (static_cast<std::size_t>(seq) + 1));
}

void id_window(const std::vector<std::int32_t>& ids, int seq, std::int64_t w, std::vector<std::int32_t>& inputs,
               std::vector<std::int32_t>& targets) {
  const auto s = static_cast<std::size_t>(seq);
  const std::size_t a = static_cast<std::size_t>(w) * (s + 1);
  inputs.insert(inputs.end(), ids.begin() + static_cast<std::ptrdiff_t>(a), ids.begin() + static_cast<std::ptrdiff_t>(a + s));
  targets.insert(targets.end(), ids.begin() + static_cast<std::ptrdiff_t>(a + 1),
                 ids.begin() + static_cast<std::ptrdiff_t>(a + s + 1));
}

}  // namespace moc
