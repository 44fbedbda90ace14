// Evaluating a model on given token ids (issue #29's `mocbench eval`): the ids cut into windows of at most
// `window` tokens (the last one shorter), each window run as one sequence, every position but the last
// predicting the next id. Mean next-token cross-entropy over all predicted tokens, its perplexity, and on
// request each predicted token's log-probability and every position's logits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/transformer.h"

namespace moc {

struct EvalResult {
  double loss = 0;        // mean over the predicted tokens (nats)
  double perplexity = 0;  // exp(loss)
  std::int64_t tokens = 0, windows = 0;
  std::vector<double> logprobs;  // per predicted token, in order (when asked)
  std::vector<float> logits;     // [positions, vocab] of every window's positions, in order (when asked)
  std::int64_t positions = 0;
};

// log softmax(row)[id] over a row of `vocab` logits, in double.
double token_logprob(const float* row, std::size_t vocab, std::int32_t id);

// ids: at least 2; window >= 2 (0: the model's seq_len). Throws ConfigError for ids outside the vocabulary.
EvalResult evaluate_ids(Transformer& model, const std::vector<std::int32_t>& ids, int window, bool want_logprobs,
                        bool want_logits);

// Windows a loss is averaged over: window(w, inputs, targets) appends window w's `seq` input ids and the `seq`
// ids they predict.
using WindowFn = std::function<void(std::int64_t w, std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets)>;
// The mean next-token loss (nats) over windows [0, windows), `batch` windows per forward (the last forward
// fewer), every predicted token weighing the same; check() runs before each forward (it may throw to stop).
// What text training validates with and what `eval` points time.
double mean_window_loss(Transformer& model, std::int64_t windows, int batch, int seq, const WindowFn& window,
                        const std::function<void()>& check = {});

// Windows of given ids, as evaluate_ids cuts them with window = seq + 1: window w is ids[w (seq + 1),
// (w + 1) (seq + 1)), its first seq ids the inputs and its last seq the targets. id_windows: how many whole
// windows the ids hold.
std::int64_t id_windows(std::size_t ids, int seq);
void id_window(const std::vector<std::int32_t>& ids, int seq, std::int64_t w, std::vector<std::int32_t>& inputs,
               std::vector<std::int32_t>& targets);

}  // namespace moc
