// What a model's FFN gates do on real tokens (paper §3, Figure 3): per layer, histograms of the gate's
// pre-activation G = x W_gate and of SiLU(G) with the top-K threshold marked, how much two tokens'
// selected channels overlap, and how many distinct channels B tokens of B different sequences select
// together (the union a batched decode step must read: paper §5). Channels are ranked as the model's MoC
// selection ranks them (`select`: G, the paper's rule; SiLU(G); |SiLU(G)|, Theorem 1's; for a:b, the a largest
// of each group of b); a dense model is analysed by G at its preset's K.
#pragma once
#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace moc {

struct Histogram {
  double lo = 0, hi = 0;        // bin i covers [lo + i w, lo + (i + 1) w), w = (hi - lo) / bins
  std::vector<double> density;  // fraction of values per bin (sums to 1 with the clipped tails in the end bins)
  double centre(std::size_t i) const { return lo + (static_cast<double>(i) + 0.5) * (hi - lo) / static_cast<double>(density.size()); }
};

struct LayerGateStats {
  Histogram pre, post;           // G and SiLU(G) over every (token, channel)
  double threshold_pre = 0;      // the median over tokens of the K-th largest G (row top-K, ranked by G; else NaN)
  double threshold_post = 0;     // SiLU of it; ranked by SiLU(G) or |SiLU(G)|: the median K-th largest of that
  double kept_mass = 0;          // share of sum |SiLU(G)| in the selected channels, mean over tokens
  Histogram overlap;             // |sel(i) & sel(j)| / K for random pairs of tokens of different sequences, [0, 1]
  double overlap_mean = 0;
  std::vector<double> union_mean;  // [B - 1]: mean distinct channels selected by B tokens of B sequences
};

struct GateAnalysis {
  int d_ffn = 0, kept = 0;  // channels, and channels selected per token
  int tokens = 0;
  std::vector<LayerGateStats> layers;
  // Per B (1..max_batch): the mean over layers of union_mean, and what B independent uniform selections
  // would give, d_ffn (1 - (1 - K/d_ffn)^B) (random weights come close to it).
  std::vector<double> union_mean, union_independent;
};

// Runs the model forward (training layout, nothing kept) over `batch` sequences of `seq` tokens and
// analyses every layer's gate. Not for mixture-of-experts models. max_batch: unions for B = 1..max_batch.
GateAnalysis analyze_gates(Transformer& model, const std::vector<std::int32_t>& tokens, int batch, int seq,
                           int max_batch = 4, std::uint64_t seed = 1, int bins = 80);

}  // namespace moc
