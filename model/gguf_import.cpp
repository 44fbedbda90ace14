#include "model/gguf_import.h"

#include <string>
#include <vector>

#include "model/param_io.h"

namespace moc {

namespace {

std::int64_t meta_int(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (!v) throw ConfigError("GGUF: metadata " + key + " is missing; mocbench needs it to build the model");
  try {
    return v->as_int(key);
  } catch (const gguf::GgufError& e) {
    throw ConfigError(std::string("GGUF: ") + e.what());
  }
}

double meta_number(const gguf::File& f, const std::string& key, double fallback) {
  const gguf::Value* v = f.find(key);
  return v ? v->as_number(key) : fallback;
}

// The tensor's values with its ggml dims checked: {ne0, ne1} = {in, out} for a matrix, {n} for a vector.
std::vector<float> values(const gguf::File& f, const std::string& name, std::vector<std::uint64_t> dims) {
  const gguf::TensorInfo* t = f.tensor(name);
  if (!t) throw ConfigError("GGUF: tensor " + name + " is missing");
  if (t->dims != dims) {
    std::string want, got;
    for (auto d : dims) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (auto d : t->dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
    throw ConfigError("GGUF: tensor " + name + " has ggml dims {" + got + "}, the configuration needs {" + want + "}");
  }
  return f.dequantize(*t);
}

// Undoes llama.cpp's q/k row permutation: within each head of hd rows, GGUF row 2i + j holds Hugging Face row
// j * hd / 2 + i (j = 0, 1).
std::vector<float> unpermute_rows(const std::vector<float>& w, std::size_t heads, std::size_t hd, std::size_t in) {
  std::vector<float> out(w.size());
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < hd / 2; ++i)
      for (std::size_t j = 0; j < 2; ++j) {
        const std::size_t from = h * hd + 2 * i + j, to = h * hd + j * (hd / 2) + i;
        std::copy(w.begin() + static_cast<std::ptrdiff_t>(from * in), w.begin() + static_cast<std::ptrdiff_t>((from + 1) * in),
                  out.begin() + static_cast<std::ptrdiff_t>(to * in));
      }
  return out;
}

Param& param(Transformer& m, const std::string& name) {
  return param_io::find(m, name, "GGUF", " (a configuration mocbench does not import)");
}

// [out, in] row-major (ggml {in, out}) to mocbench's [in, out].
std::vector<float> transpose(const std::vector<float>& w, std::size_t out, std::size_t in) {
  return param_io::transpose(w, out, in);
}

}  // namespace

ModelConfig gguf_config(const gguf::File& f) {
  const gguf::Value* arch = f.find("general.architecture");
  if (!arch || arch->type != gguf::ValueType::string) throw ConfigError("GGUF: general.architecture is missing");
  if (arch->s != "llama")
    throw ConfigError("GGUF: general.architecture is '" + arch->s + "'; mocbench imports llama (and its relatives "
                      "written as llama, e.g. SmolLM2)");
  ModelConfig c;
  c.preset = "gguf";
  c.hidden = static_cast<int>(meta_int(f, "llama.embedding_length"));
  c.d_ffn = static_cast<int>(meta_int(f, "llama.feed_forward_length"));
  c.heads = static_cast<int>(meta_int(f, "llama.attention.head_count"));
  c.kv_heads = f.find("llama.attention.head_count_kv") ? static_cast<int>(meta_int(f, "llama.attention.head_count_kv"))
                                                        : c.heads;
  c.layers = static_cast<int>(meta_int(f, "llama.block_count"));
  c.seq_len = static_cast<int>(meta_int(f, "llama.context_length"));
  c.rope_theta = static_cast<float>(meta_number(f, "llama.rope.freq_base", 10000.0));
  c.norm_eps = static_cast<float>(meta_number(f, "llama.attention.layer_norm_rms_epsilon", 1e-5));
  if (f.find("llama.vocab_size")) {
    c.vocab = static_cast<int>(meta_int(f, "llama.vocab_size"));
  } else if (const gguf::TensorInfo* e = f.tensor("token_embd.weight"); e && e->dims.size() == 2) {
    c.vocab = static_cast<int>(e->dims[1]);
  } else {
    throw ConfigError("GGUF: llama.vocab_size is missing and token_embd.weight does not say it");
  }
  if (c.heads > 0 && f.find("llama.rope.dimension_count") &&
      meta_int(f, "llama.rope.dimension_count") != c.hidden / c.heads)
    throw ConfigError("GGUF: llama.rope.dimension_count is " + std::to_string(meta_int(f, "llama.rope.dimension_count")) +
                      ", not the head size " + std::to_string(c.hidden / c.heads) + ": partial RoPE is not built");
  c.param_dtype = c.act_dtype = DType::f32;
  c.ffn = FfnConfig{};
  c.validate();
  return c;
}

void load_gguf_weights(const gguf::File& f, Transformer& model) {
  const ModelConfig& c = model.config();
  Ops& o = model.ops();
  const auto d = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.d_ffn),
             V = static_cast<std::size_t>(c.vocab), hd = static_cast<std::size_t>(c.head_dim()),
             kvd = static_cast<std::size_t>(c.kv_heads) * hd;
  const auto embed = values(f, "token_embd.weight", {d, V});
  o.upload_f32(param(model, "embed").value, embed);
  o.upload_f32(param(model, "final_norm").value, values(f, "output_norm.weight", {d}));
  // The LM head: output.weight, or the embedding (tied), both [vocab, d] rows: mocbench's head is [d, vocab].
  o.upload_f32(param(model, "lm_head").value,
               transpose(f.tensor("output.weight") ? values(f, "output.weight", {d, V}) : embed, V, d));
  for (int l = 0; l < c.layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".", p = "layer" + std::to_string(l) + ".";
    o.upload_f32(param(model, p + "attn_norm").value, values(f, g + "attn_norm.weight", {d}));
    o.upload_f32(param(model, p + "ffn_norm").value, values(f, g + "ffn_norm.weight", {d}));
    const auto q = unpermute_rows(values(f, g + "attn_q.weight", {d, d}), static_cast<std::size_t>(c.heads), hd, d);
    const auto k = unpermute_rows(values(f, g + "attn_k.weight", {d, kvd}), static_cast<std::size_t>(c.kv_heads), hd, d);
    o.upload_f32(param(model, p + "wq").value, transpose(q, d, d));
    o.upload_f32(param(model, p + "wk").value, transpose(k, kvd, d));
    o.upload_f32(param(model, p + "wv").value, transpose(values(f, g + "attn_v.weight", {d, kvd}), kvd, d));
    o.upload_f32(param(model, p + "wo").value, transpose(values(f, g + "attn_output.weight", {d, d}), d, d));
    param_io::upload_logical(o, param(model, p + "w_gate"), transpose(values(f, g + "ffn_gate.weight", {d, F}), F, d), d, F);
    param_io::upload_logical(o, param(model, p + "w_up"), transpose(values(f, g + "ffn_up.weight", {d, F}), F, d), d, F);
    param_io::upload_logical(o, param(model, p + "w_down"), transpose(values(f, g + "ffn_down.weight", {F, d}), d, F), F, d);
  }
}

}  // namespace moc
