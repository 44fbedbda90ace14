#include "model/activation_analysis.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace moc {

namespace {

Histogram histogram(const std::vector<float>& v, int bins, double lo, double hi) {
  Histogram h;
  h.lo = lo;
  h.hi = hi > lo ? hi : lo + 1;
  h.density.assign(static_cast<std::size_t>(bins), 0.0);
  const double scale = bins / (h.hi - h.lo);
  for (float x : v) {
    const auto b = std::clamp(static_cast<long>(std::floor((x - h.lo) * scale)), 0L, static_cast<long>(bins - 1));
    h.density[static_cast<std::size_t>(b)] += 1.0;
  }
  for (auto& d : h.density) d /= static_cast<double>(std::max<std::size_t>(v.size(), 1));
  return h;
}

// The range holding all but the extreme 0.05% on each side (so one outlier does not flatten the picture).
std::pair<double, double> robust_range(std::vector<float> v) {
  if (v.empty()) return {0, 1};
  const std::size_t n = v.size(), a = n / 2000, b = n - 1 - n / 2000;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(a), v.end());
  const double lo = v[a];
  std::nth_element(v.begin(), v.begin() + static_cast<long>(b), v.end());
  return {lo, v[b]};
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

}  // namespace

GateAnalysis analyze_gates(Transformer& model, const std::vector<std::int32_t>& tokens, int batch, int seq,
                           int max_batch, std::uint64_t seed, int bins) {
  const ModelConfig& cfg = model.config();
  if (cfg.moe()) throw std::invalid_argument("analyze_gates: a mixture-of-experts model has no single FFN gate");
  if (static_cast<std::int64_t>(tokens.size()) != static_cast<std::int64_t>(batch) * seq)
    throw std::invalid_argument("analyze_gates: tokens must hold batch x seq ids");
  Ops& ops = model.ops();
  const int F = cfg.d_ffn;
  const bool moc = cfg.ffn.kind == FfnKind::moc;
  const MocSelect sel = moc ? cfg.ffn.selection() : MocSelect{};
  const int K = moc ? sel.kept(F) : std::clamp(cfg.ffn.k > 0 ? cfg.ffn.k : F / 4, 1, F);
  const bool grouped = moc && sel.grouped();
  const SelectRule rule = moc ? cfg.ffn.rule : SelectRule::gate;
  const std::int64_t n = static_cast<std::int64_t>(batch) * seq;

  GateAnalysis out;
  out.d_ffn = F;
  out.kept = K;
  out.tokens = static_cast<int>(n);
  std::mt19937_64 rng(seed);

  model.set_ffn_probe([&](int layer, const Tensor& xn) {
    const Param& wg = model.param("layer" + std::to_string(layer) + ".w_gate");
    const std::int64_t cols = wg.value.cols();
    Tensor g = ops.empty({n, cols}, cfg.act_dtype, workspace_tag());
    ops.gemm(xn, false, wg.value, false, g);
    const std::vector<float> all = ops.download_f32(g);
    std::vector<float> G(static_cast<std::size_t>(n) * static_cast<std::size_t>(F)), S(G.size());
    for (std::int64_t r = 0; r < n; ++r)
      for (int c = 0; c < F; ++c) {
        const float x = all[static_cast<std::size_t>(r * cols + c)];
        G[static_cast<std::size_t>(r * F + c)] = x;
        S[static_cast<std::size_t>(r * F + c)] = static_cast<float>(silu(x));
      }
    LayerGateStats L;
    const auto [glo, ghi] = robust_range(G);
    const auto [slo, shi] = robust_range(S);
    L.pre = histogram(G, bins, glo, ghi);
    L.post = histogram(S, bins, slo, shi);
    // Each token's selection by the model's ranking (rank: G, SiLU(G) or |SiLU(G)|): the K largest (row top-K),
    // or the a largest of each group of b.
    std::vector<std::vector<int>> chosen(static_cast<std::size_t>(n));
    std::vector<double> thresholds;
    double mass = 0;
    std::vector<int> order(static_cast<std::size_t>(F));
    std::vector<float> rank_row(static_cast<std::size_t>(F));
    for (std::int64_t r = 0; r < n; ++r) {
      for (int c = 0; c < F; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * F + c);
        rank_row[static_cast<std::size_t>(c)] = rule == SelectRule::gate ? G[i] : rule == SelectRule::silu ? S[i] : std::fabs(S[i]);
      }
      const float* row = rank_row.data();
      auto& pick = chosen[static_cast<std::size_t>(r)];
      if (grouped) {
        for (int g0 = 0; g0 < F; g0 += sel.group_b) {
          const int g1 = std::min(F, g0 + sel.group_b), take = std::min(sel.group_a, g1 - g0);
          std::vector<int> grp(static_cast<std::size_t>(g1 - g0));
          std::iota(grp.begin(), grp.end(), g0);
          std::partial_sort(grp.begin(), grp.begin() + take, grp.end(), [&](int a, int b) { return row[a] > row[b]; });
          pick.insert(pick.end(), grp.begin(), grp.begin() + take);
        }
      } else {
        std::iota(order.begin(), order.end(), 0);
        std::nth_element(order.begin(), order.begin() + (K - 1), order.end(), [&](int a, int b) { return row[a] > row[b]; });
        thresholds.push_back(row[order[static_cast<std::size_t>(K - 1)]]);
        pick.assign(order.begin(), order.begin() + K);
      }
      std::sort(pick.begin(), pick.end());
      double tot = 0, kept = 0;
      for (int c = 0; c < F; ++c) tot += std::fabs(S[static_cast<std::size_t>(r * F + c)]);
      for (int c : pick) kept += std::fabs(S[static_cast<std::size_t>(r * F + c)]);
      mass += tot > 0 ? kept / tot : 0;
    }
    if (!thresholds.empty()) {
      std::nth_element(thresholds.begin(), thresholds.begin() + static_cast<long>(thresholds.size() / 2), thresholds.end());
      const double t = thresholds[thresholds.size() / 2];
      // Ranked by G: one threshold in G and its SiLU. Ranked by SiLU(G) or |SiLU(G)|: the threshold is on SiLU
      // (|SiLU| keeps both tails of G: no single G threshold).
      L.threshold_pre = rule == SelectRule::gate ? t : std::nan("");
      L.threshold_post = rule == SelectRule::gate ? silu(t) : t;
    } else {
      L.threshold_pre = L.threshold_post = std::nan("");  // a:b has no single threshold
    }
    L.kept_mass = mass / static_cast<double>(n);
    // Overlap of two tokens of different sequences (same sequence when there is one).
    std::uniform_int_distribution<std::int64_t> row_of(0, n - 1);
    std::vector<float> overlaps;
    std::vector<char> mark(static_cast<std::size_t>(F), 0);
    const int pairs = 2000;
    for (int p = 0; p < pairs; ++p) {
      const std::int64_t i = row_of(rng);
      std::int64_t j = row_of(rng);
      for (int t = 0; t < 8 && batch > 1 && j / seq == i / seq; ++t) j = row_of(rng);
      if (j == i) continue;
      for (int c : chosen[static_cast<std::size_t>(i)]) mark[static_cast<std::size_t>(c)] = 1;
      int common = 0;
      for (int c : chosen[static_cast<std::size_t>(j)]) common += mark[static_cast<std::size_t>(c)];
      for (int c : chosen[static_cast<std::size_t>(i)]) mark[static_cast<std::size_t>(c)] = 0;
      overlaps.push_back(static_cast<float>(common) / static_cast<float>(K));
    }
    L.overlap = histogram(overlaps, 20, 0.0, 1.0);
    L.overlap_mean = overlaps.empty() ? 0 : std::accumulate(overlaps.begin(), overlaps.end(), 0.0) / static_cast<double>(overlaps.size());
    // Unions over B tokens, one from each of B different sequences (as in a batched decode step).
    std::uniform_int_distribution<int> pos_of(0, seq - 1);
    for (int B = 1; B <= max_batch; ++B) {
      if (B > batch) {
        L.union_mean.push_back(std::nan(""));
        continue;
      }
      double total = 0;
      const int samples = 200;
      for (int s = 0; s < samples; ++s) {
        std::vector<int> seqs(static_cast<std::size_t>(batch));
        std::iota(seqs.begin(), seqs.end(), 0);
        for (int b = 0; b < B; ++b)
          std::swap(seqs[static_cast<std::size_t>(b)], seqs[static_cast<std::size_t>(b + static_cast<int>(rng() % static_cast<std::uint64_t>(batch - b)))]);
        int distinct = 0;
        std::vector<std::int64_t> rows;
        for (int b = 0; b < B; ++b) rows.push_back(static_cast<std::int64_t>(seqs[static_cast<std::size_t>(b)]) * seq + pos_of(rng));
        for (auto r : rows)
          for (int c : chosen[static_cast<std::size_t>(r)]) {
            distinct += mark[static_cast<std::size_t>(c)] == 0;
            mark[static_cast<std::size_t>(c)] = 1;
          }
        for (auto r : rows)
          for (int c : chosen[static_cast<std::size_t>(r)]) mark[static_cast<std::size_t>(c)] = 0;
        total += distinct;
      }
      L.union_mean.push_back(total / samples);
    }
    out.layers.push_back(std::move(L));
  });
  Tensor tok = ops.empty({n}, DType::i32, workspace_tag()), tgt = ops.empty({n}, DType::i32, workspace_tag());
  ops.upload_i32(tok, tokens);
  ops.upload_i32(tgt, tokens);
  try {
    (void)model.forward(tok, tgt, batch, seq, false);
  } catch (...) {
    model.set_ffn_probe({});
    throw;
  }
  model.set_ffn_probe({});
  for (int B = 1; B <= max_batch; ++B) {
    double s = 0;
    for (const auto& L : out.layers) s += L.union_mean[static_cast<std::size_t>(B - 1)];
    out.union_mean.push_back(out.layers.empty() ? 0 : s / static_cast<double>(out.layers.size()));
    out.union_independent.push_back(F * (1.0 - std::pow(1.0 - static_cast<double>(K) / F, B)));
  }
  return out;
}

}  // namespace moc
