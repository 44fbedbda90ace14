#include "model/hf_checkpoint.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "model/gguf.h"  // half_to_float
#include "model/param_io.h"
#include "model/safetensors.h"

namespace moc {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- tensors

// Every tensor of the folder: model.safetensors, or the shards that model.safetensors.index.json names.
std::map<std::string, SafeTensor> read_tensors(const std::string& dir) {
  std::map<std::string, SafeTensor> out;
  auto take = [&](const std::string& file) {
    SafeTensorsFile f;
    try {
      f = read_safetensors(file);
    } catch (const SafeTensorsError& e) {
      throw ConfigError(e.what());
    }
    for (auto& t : f.tensors) out[t.name] = std::move(t);
  };
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    take(single.string());
  } else if (fs::exists(index)) {
    json j;
    try {
      j = json::parse(read_text(index.string()));
    } catch (const json::exception& e) {
      throw ConfigError(index.string() + ": not JSON (" + e.what() + ")");
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw ConfigError(index.string() + ": \"weight_map\" is missing");
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw ConfigError(index.string() + ": the shard of " + name + " is not a file name");
      shards.insert(file.get<std::string>());
    }
    for (const auto& s : shards) take((fs::path(dir) / s).string());
  } else {
    throw ConfigError(dir + ": neither model.safetensors nor model.safetensors.index.json is there");
  }
  return out;
}

std::vector<float> to_floats(const SafeTensor& t, const std::string& dir) {
  std::size_t n = 1;
  for (auto s : t.shape) n *= static_cast<std::size_t>(s);
  std::vector<float> v(n);
  if (t.dtype == "F32") {
    std::memcpy(v.data(), t.data.data(), n * 4);
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      v[i] = t.dtype == "BF16" ? bf16_to_f32(h) : gguf::half_to_float(h);
    }
  } else {
    throw ConfigError(dir + ": tensor " + t.name + " is " + t.dtype + "; mocbench reads F32, BF16 and F16");
  }
  return v;
}

using param_io::download_logical;
using param_io::transpose;
using param_io::upload_logical;

Param& param(Transformer& m, const std::string& name) { return param_io::find(m, name, "Hugging Face checkpoint"); }

// One mapping between a file tensor and a parameter: HF shape [out, in] (`matrix`) or a vector.
struct Link {
  std::string hf, ours;
  std::size_t out = 0, in = 0;  // HF's [out, in]; mocbench stores [in, out] (a vector: out = n, in = 0)
  bool embedding = false;       // [vocab, d] in both: no transpose
};

std::vector<Link> links(const ModelConfig& c) {
  const auto d = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.d_ffn),
             V = static_cast<std::size_t>(c.vocab), hd = static_cast<std::size_t>(c.head_dim()),
             kvd = static_cast<std::size_t>(c.kv_heads) * hd;
  std::vector<Link> L;
  L.push_back({"model.embed_tokens.weight", "embed", V, d, true});
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".", p = "layer" + std::to_string(l) + ".";
    L.push_back({h + "input_layernorm.weight", p + "attn_norm", d, 0});
    L.push_back({h + "self_attn.q_proj.weight", p + "wq", d, d});
    L.push_back({h + "self_attn.k_proj.weight", p + "wk", kvd, d});
    L.push_back({h + "self_attn.v_proj.weight", p + "wv", kvd, d});
    L.push_back({h + "self_attn.o_proj.weight", p + "wo", d, d});
    if (c.qk_norm) {
      L.push_back({h + "self_attn.q_norm.weight", p + "q_norm", hd, 0});
      L.push_back({h + "self_attn.k_norm.weight", p + "k_norm", hd, 0});
    }
    L.push_back({h + "post_attention_layernorm.weight", p + "ffn_norm", d, 0});
    if (c.moe()) {
      L.push_back({h + "block_sparse_moe.gate.weight", p + "router", static_cast<std::size_t>(c.experts), d});
      for (int e = 0; e < c.experts; ++e) {
        const std::string he = h + "block_sparse_moe.experts." + std::to_string(e) + ".",
                          pe = p + "expert" + std::to_string(e) + ".";
        L.push_back({he + "w1.weight", pe + "w_gate", F, d});
        L.push_back({he + "w3.weight", pe + "w_up", F, d});
        L.push_back({he + "w2.weight", pe + "w_down", d, F});
      }
    } else {
      L.push_back({h + "mlp.gate_proj.weight", p + "w_gate", F, d});
      L.push_back({h + "mlp.up_proj.weight", p + "w_up", F, d});
      L.push_back({h + "mlp.down_proj.weight", p + "w_down", d, F});
    }
  }
  L.push_back({"model.norm.weight", "final_norm", d, 0});
  L.push_back({"lm_head.weight", "lm_head", V, d});
  return L;
}

// A float as the shortest decimal that reads back as the same float (1e-05, not 9.999999747378752e-06).
double short_decimal(float f) {
  for (int digits = 6; digits <= 9; ++digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return static_cast<double>(f);
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace


void load_hf_weights(const std::string& dir, Transformer& model) {
  const ModelConfig& c = model.config();
  Ops& o = model.ops();
  auto tensors = read_tensors(dir);
  std::set<std::string> used;
  for (const Link& l : links(c)) {
    const SafeTensor* t = nullptr;
    if (auto it = tensors.find(l.hf); it != tensors.end()) t = &it->second;
    if (!t && l.ours == "lm_head") {  // tied: the head is the embedding
      auto it = tensors.find("model.embed_tokens.weight");
      if (it != tensors.end()) t = &it->second;
    }
    if (!t) throw ConfigError(dir + ": tensor " + l.hf + " is missing");
    used.insert(t->name);
    const std::vector<std::int64_t> want =
        l.in == 0 ? std::vector<std::int64_t>{static_cast<std::int64_t>(l.out)}
                  : std::vector<std::int64_t>{static_cast<std::int64_t>(l.out), static_cast<std::int64_t>(l.in)};
    if (t->shape != want)
      throw ConfigError(dir + ": tensor " + t->name + " is " + shape_text(t->shape) + ", the configuration needs " +
                        shape_text(want));
    const auto v = to_floats(*t, dir);
    Param& p = param(model, l.ours);
    if (l.in == 0) upload_logical(o, p, v, l.out, 1);
    else if (l.embedding) upload_logical(o, p, v, l.out, l.in);
    else upload_logical(o, p, transpose(v, l.out, l.in), l.in, l.out);
  }
  for (const auto& [name, t] : tensors)
    if (!used.count(name) && name.find("rotary_emb.inv_freq") == std::string::npos)
      throw ConfigError(dir + ": tensor " + name + " is not one mocbench reads (a part of the model it lacks)");
}

void save_hf_checkpoint(const std::string& dir, Transformer& model) {
  const ModelConfig& c = model.config();
  Ops& o = model.ops();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError("cannot create " + dir + ": " + ec.message());
  const bool bf16 = c.param_dtype == DType::bf16;
  std::vector<SafeTensor> out;
  for (const Link& l : links(c)) {
    Param& p = param(model, l.ours);
    std::vector<float> v;
    std::vector<std::int64_t> shape;
    if (l.in == 0) {
      v = download_logical(o, p, l.out, 1);
      shape = {static_cast<std::int64_t>(l.out)};
    } else {
      v = l.embedding ? download_logical(o, p, l.out, l.in) : transpose(download_logical(o, p, l.in, l.out), l.in, l.out);
      shape = {static_cast<std::int64_t>(l.out), static_cast<std::int64_t>(l.in)};
    }
    SafeTensor t;
    t.name = l.hf;
    t.shape = shape;
    t.dtype = bf16 ? "BF16" : "F32";
    t.data.resize(v.size() * (bf16 ? 2 : 4));
    if (bf16) {
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::uint16_t h = f32_to_bf16(v[i]);
        std::memcpy(t.data.data() + 2 * i, &h, 2);
      }
    } else {
      std::memcpy(t.data.data(), v.data(), v.size() * 4);
    }
    out.push_back(std::move(t));
  }
  write_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  json j;
  const bool mixtral = c.moe(), qwen3 = c.qk_norm;
  j["architectures"] = {mixtral ? "MixtralForCausalLM" : qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = mixtral ? "mixtral" : qwen3 ? "qwen3" : "llama";
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.d_ffn;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim();
  j["vocab_size"] = c.vocab;
  j["max_position_embeddings"] = c.seq_len;
  j["rope_theta"] = short_decimal(c.rope_theta);
  j["rms_norm_eps"] = short_decimal(c.norm_eps);
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = false;
  j["attention_bias"] = false;
  j["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  if (!mixtral) j["mlp_bias"] = false;
  if (qwen3) j["use_sliding_window"] = false;
  if (mixtral) {
    j["num_local_experts"] = c.experts;
    j["num_experts_per_tok"] = c.experts_per_token;
    j["sliding_window"] = nullptr;
  }
  if (c.ffn.kind != FfnKind::dense) j["mocbench_ffn"] = c.describe();
  const std::string cfg_path = (fs::path(dir) / "config.json").string(), tmp = cfg_path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(2) << "\n";
    if (!f.flush()) throw ConfigError("cannot write " + tmp);
  }
  fs::rename(tmp, cfg_path, ec);
  if (ec) throw ConfigError("cannot write " + cfg_path + ": " + ec.message());
}

}  // namespace moc
