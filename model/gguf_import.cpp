#include "model/gguf_import.h"

#include <string>
#include <vector>

#include "model/param_io.h"

namespace moc {

namespace {

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
