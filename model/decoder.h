// Autoregressive decoding: prefill the prompt into a KV cache, then one token per sequence per step.
// The step reads tokens, positions and the sampling counter from tensors, so it is captured once as
// an OpGraph (a CUDA graph on the GPU) and replayed.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/transformer.h"

namespace moc {

struct SamplingConfig {
  float temperature = 0.0f;  // <= 0: greedy (ties: lowest token id)
  std::uint64_t seed = 0;
};

class Decoder {
 public:
  // Switches the model to the decode layout (Transformer::prepare_decode): it is inference-only after.
  Decoder(Transformer& model, int batch, int max_seq, SamplingConfig sampling = {});

  // prompt: batch rows of prompt_len ids, row-major. Returns the prompt logits [batch*prompt_len, vocab].
  Tensor prefill(const std::vector<std::int32_t>& prompt, int prompt_len);
  // Feeds one token per sequence at the current position; returns logits [batch, vocab].
  const Tensor& step(const std::vector<std::int32_t>& tokens);
  // Prefill, then generate n_new tokens per sequence (the first from the prompt's last logits).
  std::vector<std::vector<std::int32_t>> generate(const std::vector<std::int32_t>& prompt, int prompt_len, int n_new,
                                                  bool use_graph = true);
  int position() const { return pos_host_; }
  int max_seq() const { return cache_.max_seq; }
  // One step (decode the current tokens, sample the next ones, feed them back) captured as a graph;
  // replaying it advances position by one: call advance() after each replay to keep the host mirror.
  std::unique_ptr<OpGraph> capture_step();
  void advance() { ++pos_host_; }

 private:
  // Decode step on tokens_ at pos_, then advance pos_; greedy: tokens_ <- argmax(logits_) with the LM head where the
  // model can (returns whether it did).
  bool step_ops();
  // next_ <- sample(logits_); tokens_ <- next_; counter_++ -- nothing when `sampled` (step_ops did it).
  void sample_ops(bool sampled = false);

  Transformer* model_;
  SamplingConfig sampling_;
  KvCache cache_;
  Tensor tokens_, pos_, counter_, logits_, next_;
  int pos_host_ = 0;  // host mirror of pos_ for bounds checks
};

}  // namespace moc
