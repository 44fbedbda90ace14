#include "model/checkpoint_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace moc {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- GGUF metadata

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

// ---- config.json

const json& need(const json& j, const char* key, const std::string& what) {
  if (!j.contains(key) || j[key].is_null())
    throw ConfigError(what + ": \"" + key + "\" is missing; mocbench needs it to build the model");
  return j[key];
}
int need_int(const json& j, const char* key, const std::string& what) {
  const json& v = need(j, key, what);
  if (!v.is_number_integer() || v.get<long long>() <= 0)
    throw ConfigError(what + ": \"" + key + "\" must be a positive integer");
  return v.get<int>();
}
double number_or(const json& j, const char* key, double fallback, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw ConfigError(what + ": \"" + key + "\" must be a number");
  return j[key].get<double>();
}
bool flag_set(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

enum class Arch { llama, qwen3, mixtral };

Arch arch_of(const json& j, const std::string& what) {
  std::string a;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    a = j["architectures"][0].get<std::string>();
  const std::string mt = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (a == "LlamaForCausalLM" || (a.empty() && mt == "llama")) return Arch::llama;
  if (a == "Qwen3ForCausalLM" || (a.empty() && mt == "qwen3")) return Arch::qwen3;
  if (a == "MixtralForCausalLM" || (a.empty() && mt == "mixtral")) return Arch::mixtral;
  throw ConfigError(what + ": architecture '" + (a.empty() ? mt : a) +
                    "' is not read; mocbench reads LlamaForCausalLM, Qwen3ForCausalLM and MixtralForCausalLM");
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

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

ModelConfig hf_config_from_json(const std::string& json_text, const std::string& what) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw ConfigError(what + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw ConfigError(what + ": not a JSON object");
  const Arch arch = arch_of(j, what);
  // What mocbench does not run, refused by key.
  // RoPE: "rope_theta" (transformers 4), or "rope_parameters" (transformers 5: {"rope_type": "default",
  // "rope_theta": ...}; "rope_scaling" may hold the same); any rope_type but "default" is refused.
  double theta = number_or(j, "rope_theta", 10000.0, what);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const json& r = j[key];
    const std::string type = r.is_object() && r.contains("rope_type") && r["rope_type"].is_string()
                                 ? r["rope_type"].get<std::string>()
                                 : (r.is_object() && r.contains("type") && r["type"].is_string() ? r["type"].get<std::string>() : "?");
    if (type != "default")
      throw ConfigError(what + ": \"" + key + "\" is " + r.dump() + "; mocbench runs plain RoPE only (rope_type "
                        "\"default\")");
    if (r.contains("rope_theta") && r["rope_theta"].is_number()) theta = r["rope_theta"].get<double>();
  }
  if (flag_set(j, "attention_bias")) throw ConfigError(what + ": \"attention_bias\" is true; mocbench's projections have no bias");
  if (flag_set(j, "mlp_bias")) throw ConfigError(what + ": \"mlp_bias\" is true; mocbench's FFN has no bias");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw ConfigError(what + ": \"hidden_act\" is " + j["hidden_act"].dump() + "; mocbench's FFN is SwiGLU (silu)");
  if (flag_set(j, "use_sliding_window"))
    throw ConfigError(what + ": \"use_sliding_window\" is true; mocbench's attention is full causal");
  ModelConfig c;
  c.preset = "hf";
  c.hidden = need_int(j, "hidden_size", what);
  c.d_ffn = need_int(j, "intermediate_size", what);
  c.layers = need_int(j, "num_hidden_layers", what);
  c.heads = need_int(j, "num_attention_heads", what);
  c.kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                   ? need_int(j, "num_key_value_heads", what)
                   : c.heads;
  c.vocab = need_int(j, "vocab_size", what);
  c.seq_len = j.contains("max_position_embeddings") ? need_int(j, "max_position_embeddings", what) : 2048;
  c.rope_theta = static_cast<float>(theta);
  c.norm_eps = static_cast<float>(number_or(j, "rms_norm_eps", 1e-6, what));
  if (c.hidden % c.heads != 0) throw ConfigError(what + ": hidden_size is not a multiple of num_attention_heads");
  if (j.contains("head_dim") && !j["head_dim"].is_null() && need_int(j, "head_dim", what) != c.hidden / c.heads)
    throw ConfigError(what + ": \"head_dim\" is " + std::to_string(j["head_dim"].get<int>()) +
                      ", not hidden_size / num_attention_heads = " + std::to_string(c.hidden / c.heads) +
                      "; mocbench's q projection is hidden x hidden");
  if (arch == Arch::mixtral && j.contains("sliding_window") && !j["sliding_window"].is_null() &&
      j["sliding_window"].get<long long>() < c.seq_len)
    throw ConfigError(what + ": \"sliding_window\" is " + j["sliding_window"].dump() +
                      ", shorter than max_position_embeddings; mocbench's attention is full causal");
  c.qk_norm = arch == Arch::qwen3;
  if (arch == Arch::mixtral) {
    c.experts = need_int(j, "num_local_experts", what);
    c.experts_per_token = need_int(j, "num_experts_per_tok", what);
  }
  c.param_dtype = c.act_dtype = DType::f32;
  c.ffn = FfnConfig{};
  c.validate();
  return c;
}

ModelConfig hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError("cannot read " + path);
  std::stringstream text;
  text << f.rdbuf();
  return hf_config_from_json(text.str(), path);
}

}  // namespace moc
