// Hugging Face checkpoint folders (model/hf_checkpoint.h) without Python: config.json's edge cases (tied and
// untied heads, GQA, Qwen3's q/k norms, Mixtral's experts; what mocbench lacks refused by key), and a model
// written as a folder and read back (every parameter equal; odd d_ffn, whose padding channels are not written;
// BF16 storage). The agreement with an independent forward is test_hf_oracle.cpp's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/hf_checkpoint.h"
#include "model/safetensors.h"
#include "tests/shell_util.h"
#include "tests/test_util.h"

namespace moc {
namespace {

using json = nlohmann::json;

json llama_json() {
  return json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
              {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"vocab_size", 160}, {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}, {"hidden_act", "silu"},
              {"tie_word_embeddings", false}, {"rope_scaling", nullptr}};
}

// The message of the ConfigError that hf_config_from_json throws, or "" when it accepts the text.
std::string refusal(const json& j) {
  try {
    hf_config_from_json(j.dump(), "config.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, LlamaQwen3AndMixtralMapOntoTheModelConfig) {
  const ModelConfig c = hf_config_from_json(llama_json().dump(), "config.json");
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.d_ffn, 96);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.vocab, 160);
  EXPECT_EQ(c.seq_len, 64);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.moe());
  json q = llama_json();
  q["architectures"] = {"Qwen3ForCausalLM"};
  q["head_dim"] = 16;
  EXPECT_TRUE(hf_config_from_json(q.dump(), "q").qk_norm);
  json m = llama_json();
  m["architectures"] = {"MixtralForCausalLM"};
  m["num_local_experts"] = 8;
  m["num_experts_per_tok"] = 2;
  m["sliding_window"] = nullptr;
  const ModelConfig mc = hf_config_from_json(m.dump(), "m");
  EXPECT_EQ(mc.experts, 8);
  EXPECT_EQ(mc.experts_per_token, 2);
  json v5 = llama_json();  // transformers 5 writes the RoPE base inside rope_parameters
  v5.erase("rope_theta");
  v5["rope_parameters"] = json{{"rope_type", "default"}, {"rope_theta", 1e6}};
  EXPECT_FLOAT_EQ(hf_config_from_json(v5.dump(), "v5").rope_theta, 1e6f);
  json mha = llama_json();
  mha.erase("num_key_value_heads");
  EXPECT_EQ(hf_config_from_json(mha.dump(), "mha").kv_heads, 4) << "no num_key_value_heads: one KV head per head";
}

TEST(HfConfig, WhatMocbenchLacksIsRefusedNamingTheKey) {
  json j = llama_json();
  j["rope_scaling"] = json{{"type", "linear"}, {"factor", 2.0}};
  EXPECT_NE(refusal(j).find("rope_scaling"), std::string::npos) << refusal(j);
  j = llama_json();
  j["rope_parameters"] = json{{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  EXPECT_NE(refusal(j).find("rope_parameters"), std::string::npos) << refusal(j);
  j = llama_json();
  j["attention_bias"] = true;
  EXPECT_NE(refusal(j).find("attention_bias"), std::string::npos);
  j = llama_json();
  j["mlp_bias"] = true;
  EXPECT_NE(refusal(j).find("mlp_bias"), std::string::npos);
  j = llama_json();
  j["hidden_act"] = "gelu";
  EXPECT_NE(refusal(j).find("hidden_act"), std::string::npos);
  j = llama_json();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 128;  // Qwen3's usual head_dim != hidden / heads
  EXPECT_NE(refusal(j).find("head_dim"), std::string::npos);
  j = llama_json();
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  EXPECT_NE(refusal(j).find("GPT2LMHeadModel"), std::string::npos);
  j = llama_json();
  j.erase("intermediate_size");
  EXPECT_NE(refusal(j).find("intermediate_size"), std::string::npos);
  j = llama_json();
  j["architectures"] = {"MixtralForCausalLM"};
  j["num_local_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["sliding_window"] = 16;
  EXPECT_NE(refusal(j).find("sliding_window"), std::string::npos);
  EXPECT_NE(refusal(json::array()).find("not a JSON object"), std::string::npos);
}

class HfFolder : public test::ScratchDirTest {};

// Every parameter of a random model, written and read back: equal (f32), or equal after bf16 rounding.
void expect_round_trip(const ModelConfig& cfg, const std::string& dir) {
  auto ops = make_cpu_ops();
  Transformer a(*ops, cfg);
  save_hf_checkpoint(dir, a);
  ASSERT_TRUE(is_hf_folder(dir));
  ModelConfig back = hf_config(dir);
  EXPECT_EQ(back.hidden, cfg.hidden);
  EXPECT_EQ(back.d_ffn, cfg.d_ffn);
  EXPECT_EQ(back.qk_norm, cfg.qk_norm);
  EXPECT_EQ(back.experts, cfg.experts);
  back.param_dtype = cfg.param_dtype;
  Transformer b(*ops, back);
  load_hf_weights(dir, b);
  ASSERT_EQ(a.params().size(), b.params().size());
  for (std::size_t i = 0; i < a.params().size(); ++i)
    EXPECT_EQ(ops->download_f32(a.params()[i].value), ops->download_f32(b.params()[i].value)) << a.params()[i].name;
}

TEST_F(HfFolder, AModelWrittenAndReadBackHasEveryParameterEqual) {
  ModelConfig c = preset("tiny");
  c.d_ffn = 85;  // odd: stored padded to 88 columns; the file holds 85
  c.kv_heads = c.heads / 2;
  expect_round_trip(c, path("llama"));
  const json cfg = json::parse(std::ifstream(path("llama/config.json")));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["intermediate_size"], 85);
  c.qk_norm = true;
  expect_round_trip(c, path("qwen3"));
  c.qk_norm = false;
  c.experts = 3;
  c.experts_per_token = 2;
  expect_round_trip(c, path("mixtral"));
  c.experts = 0;
  c.param_dtype = DType::bf16;
  expect_round_trip(c, path("bf16"));
}

// A sharded folder (model.safetensors.index.json naming two shards, as save_pretrained writes large models)
// reads as the single file does; a shard the index names but the folder lacks is refused.
TEST_F(HfFolder, AShardedFolderReadsAsTheSingleFile) {
  auto ops = make_cpu_ops();
  const ModelConfig c = preset("tiny");
  Transformer a(*ops, c);
  save_hf_checkpoint(path("m"), a);
  SafeTensorsFile f = read_safetensors(path("m/model.safetensors"));
  std::vector<SafeTensor> one(f.tensors.begin(), f.tensors.begin() + f.tensors.size() / 2),
      two(f.tensors.begin() + f.tensors.size() / 2, f.tensors.end());
  write_safetensors(path("m/model-00001-of-00002.safetensors"), one);
  write_safetensors(path("m/model-00002-of-00002.safetensors"), two);
  json index{{"metadata", json::object()}, {"weight_map", json::object()}};
  for (const auto& t : one) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : two) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  std::filesystem::remove(path("m/model.safetensors"));
  write("m/model.safetensors.index.json", index.dump());
  Transformer b(*ops, hf_config(path("m")));
  load_hf_weights(path("m"), b);
  for (std::size_t i = 0; i < a.params().size(); ++i)
    EXPECT_EQ(ops->download_f32(a.params()[i].value), ops->download_f32(b.params()[i].value)) << a.params()[i].name;
  std::filesystem::remove(path("m/model-00002-of-00002.safetensors"));
  Transformer d(*ops, hf_config(path("m")));
  EXPECT_THROW(load_hf_weights(path("m"), d), ConfigError);
}

TEST_F(HfFolder, ATiedHeadIsTheEmbeddingAndAStrayTensorIsRefused) {
  auto ops = make_cpu_ops();
  const ModelConfig c = preset("tiny");
  Transformer a(*ops, c);
  save_hf_checkpoint(path("m"), a);
  // Drop lm_head.weight (a tied checkpoint): the head becomes the embedding, transposed.
  {
    SafeTensorsFile f = read_safetensors(path("m/model.safetensors"));
    std::vector<SafeTensor> kept;
    for (auto& t : f.tensors)
      if (t.name != "lm_head.weight") kept.push_back(t);
    write_safetensors(path("m/model.safetensors"), kept);
  }
  Transformer b(*ops, hf_config(path("m")));
  load_hf_weights(path("m"), b);
  const auto emb = ops->download_f32(b.params().front().value), head = ops->download_f32(b.params().back().value);
  ASSERT_EQ(b.params().back().name, "lm_head");
  const auto V = static_cast<std::size_t>(c.vocab), d = static_cast<std::size_t>(c.hidden);
  for (std::size_t v = 0; v < V; v += 37)
    for (std::size_t i = 0; i < d; i += 5) EXPECT_EQ(head[i * V + v], emb[v * d + i]);
  // A tensor mocbench would not use (a bias) is refused by name.
  {
    SafeTensorsFile f = read_safetensors(path("m/model.safetensors"));
    SafeTensor bias{"model.layers.0.self_attn.q_proj.bias", "F32", {c.hidden}, std::vector<unsigned char>(4 * c.hidden)};
    f.tensors.push_back(bias);
    write_safetensors(path("m/model.safetensors"), f.tensors);
  }
  Transformer d2(*ops, hf_config(path("m")));
  try {
    load_hf_weights(path("m"), d2);
    ADD_FAILURE() << "a bias tensor was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("q_proj.bias"), std::string::npos) << e.what();
  }
}

// `mocbench generate --temperature T --seed S` on a folder: the engine's sampler, so the same seed gives the same
// tokens and another seed other tokens; temperature 0 is the greedy default; log-probabilities are <= 0.
TEST_F(HfFolder, GenerateSamplesTheSameTokensForTheSameSeed) {
  auto ops = make_cpu_ops();
  ModelConfig c = preset("tiny");
  c.init_std = 0.5f;  // logits far from uniform, so that greedy and a draw can be told apart
  Transformer m(*ops, c);
  save_hf_checkpoint(path("m"), m);
  auto gen = [&](const std::string& extra) {
    const auto r = test::shell(std::string(MOCBENCH_BIN) + " generate " + path("m") + " --ids '1 2 3' -n 12 --format json " + extra);
    EXPECT_EQ(r.code, 0) << r.out;
    return r.code == 0 ? json::parse(r.out) : json::object();
  };
  const json a = gen("--temperature 1 --seed 7"), b = gen("--temperature 1 --seed 7"), other = gen("--temperature 1 --seed 8");
  ASSERT_TRUE(a.contains("ids"));
  EXPECT_EQ(a["ids"], b["ids"]);
  EXPECT_NE(a["ids"], other["ids"]) << "12 draws from a " << c.vocab << "-token vocabulary, two seeds";
  for (const auto& lp : a["logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
  EXPECT_EQ(gen("--temperature 0")["ids"], gen("")["ids"]);
  const auto bad = test::shell(std::string(MOCBENCH_BIN) + " generate " + path("m") + " --ids '1 2' --temperature -1");
  EXPECT_EQ(bad.code, 2) << bad.out;
}

}  // namespace
}  // namespace moc
