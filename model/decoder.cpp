#include "model/decoder.h"

#include <stdexcept>

namespace moc {

Decoder::Decoder(Transformer& model, int batch, int max_seq, SamplingConfig sampling)
    : model_(&model), sampling_(sampling), cache_(model.make_kv_cache(batch, max_seq)) {
  model.prepare_decode();  // decode layout (selected channels are contiguous rows)
  Ops& o = model.ops();
  tokens_ = o.empty({batch}, DType::i32, workspace_tag());
  pos_ = o.empty({batch}, DType::i32, workspace_tag());
  counter_ = o.empty({1}, DType::i32, workspace_tag());
  logits_ = o.empty({batch, model.config().vocab}, DType::f32, workspace_tag());
  next_ = o.empty({batch}, DType::i32, workspace_tag());
  o.fill(counter_, 0.0f);
}

Tensor Decoder::prefill(const std::vector<std::int32_t>& prompt, int prompt_len) {
  Ops& o = model_->ops();
  const int b = cache_.batch;
  if (prompt_len <= 0 || static_cast<std::int64_t>(prompt.size()) != static_cast<std::int64_t>(b) * prompt_len)
    throw std::invalid_argument("prefill: expected " + std::to_string(b) + " x " + std::to_string(prompt_len) + " ids");
  Tensor toks = o.empty({static_cast<std::int64_t>(b) * prompt_len}, DType::i32, workspace_tag());
  o.upload_i32(toks, prompt);
  Tensor logits = model_->prefill(toks, b, prompt_len, cache_);
  o.fill(pos_, static_cast<float>(prompt_len));
  pos_host_ = prompt_len;
  return logits;
}

bool Decoder::step_ops() {
  // Greedy: the LM head's argmax goes straight into tokens_ (the embedding read them at the step's start), the next
  // step's input, as sample_ops' copy would put it there.
  const bool sampled =
      model_->decode_step(tokens_, pos_, cache_, logits_, sampling_.temperature <= 0.0f ? &tokens_ : nullptr);
  model_->ops().increment(pos_, 1);
  return sampled;
}

void Decoder::sample_ops(bool sampled) {
  if (sampled) return;  // step_ops' LM head wrote tokens_ (greedy: counter_ is never read)
  Ops& o = model_->ops();
  o.sample(logits_, sampling_.temperature, sampling_.seed, counter_, next_);
  o.copy(tokens_, next_);
  o.increment(counter_, 1);
}

const Tensor& Decoder::step(const std::vector<std::int32_t>& tokens) {
  if (pos_host_ >= cache_.max_seq) throw std::out_of_range("decode: the KV cache is full");
  model_->ops().upload_i32(tokens_, tokens);
  step_ops();
  ++pos_host_;
  return logits_;
}

std::unique_ptr<OpGraph> Decoder::capture_step() {
  return model_->ops().capture([this] { sample_ops(step_ops()); });
}

std::vector<std::vector<std::int32_t>> Decoder::generate(const std::vector<std::int32_t>& prompt, int prompt_len,
                                                         int n_new, bool use_graph) {
  Ops& o = model_->ops();
  const int b = cache_.batch;
  if (prompt_len + n_new - 1 > cache_.max_seq)
    throw std::invalid_argument("generate: prompt " + std::to_string(prompt_len) + " + " + std::to_string(n_new) +
                                " new tokens exceed the KV cache of " + std::to_string(cache_.max_seq));
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(b));
  if (n_new <= 0) return out;
  Tensor plog = prefill(prompt, prompt_len);
  for (int i = 0; i < b; ++i) {  // the first new token comes from each prompt's last position
    Tensor dst = logits_.slice0(i, i + 1);
    o.copy(dst, plog.slice0(static_cast<std::int64_t>(i) * prompt_len + prompt_len - 1,
                            static_cast<std::int64_t>(i) * prompt_len + prompt_len));
  }
  plog.reset();
  auto collect = [&] {  // (tokens_: what the step sampled, by the LM head or by sample_ops' copy)
    auto ids = o.download_i32(tokens_);
    for (int i = 0; i < b; ++i) out[static_cast<std::size_t>(i)].push_back(ids[static_cast<std::size_t>(i)]);
  };
  sample_ops();
  collect();
  // With use_graph the first step runs as it is and the graph is captured after it: a capture allocates nothing
  // (the CUDA ops' zeroed scratch -- the decode FFN's accumulator, the LM head's argmax words -- comes into being
  // on a call outside one; a captured step without it composes the slower ops).
  std::unique_ptr<OpGraph> graph;
  for (int t = 1; t < n_new; ++t) {
    if (graph) {
      graph->replay();
    } else {
      sample_ops(step_ops());
      if (use_graph) graph = capture_step();
    }
    ++pos_host_;
    collect();
  }
  return out;
}

}  // namespace moc
