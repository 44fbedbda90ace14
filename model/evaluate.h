// Evaluating a model on given token ids (issue #29's `mocbench eval`): the ids cut into windows of at most
// `window` tokens (the last one shorter), each window run as one sequence, every position but the last
// predicting the next id. Mean next-token cross-entropy over all predicted tokens, its perplexity, and on
// request each predicted token's log-probability and every position's logits.
#pragma once
#include <cstddef>
#include <cstdint>
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

}  // namespace moc
