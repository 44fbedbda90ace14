// Commands on published checkpoints (issue #29: GGUF files and Hugging Face folders), each optionally as
// training-free MoC (--ffn moc --k K: top-K applied to the dense checkpoint's gates): `mocbench eval CKPT` --
// loss and perplexity on given token ids, per-token log-probabilities, every position's logits (.npy) for
// outside checks; `mocbench generate CKPT` -- greedy tokens after given ids, with their log-probabilities;
// `mocbench convert CKPT OUT` -- any of them written as a Hugging Face folder transformers loads.
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "kernels/ops.h"
#include "model/activation_analysis.h"
#include "model/decoder.h"
#include "model/evaluate.h"
#include "model/gguf_import.h"
#include "model/hf_checkpoint.h"
#include "model/published.h"
#include "model/token_ids.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace moc::cli {

namespace {

struct EvalOptions {
  std::string ckpt, ids, tokens, device = "cpu", ffn, k, select, logits, format = "text", analyze, precision = "fp32";
  int window = 0;
  bool logprobs = false;
};

std::vector<std::int32_t> read_ids(const std::string& text, const std::string& where) {
  try {
    return parse_token_ids(text, where);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("eval: ") + e.what());
  }
}

// NumPy's .npy (format 1.0): little-endian float32, C order.
void write_npy(const std::string& path, const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  f.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
  f << header;
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!f.flush()) throw std::runtime_error("eval: cannot write " + path);
}

// The checkpoint as a model on the chosen backend, with the FFN overrides (training-free MoC) applied.
struct Loaded {
  std::unique_ptr<Ops> ops;
  std::unique_ptr<Transformer> model;
};
std::unique_ptr<Ops> make_ops(const std::string& device) {
  if (device == "cpu") return make_cpu_ops();
#ifdef MOCBENCH_HAVE_CUDA
  return cuda::make_cuda_ops(0);
#else
  throw ConfigError("--device cuda: this mocbench was built without the CUDA backend");
#endif
}

Loaded load_model(const std::string& ckpt, const std::string& device, const std::string& ffn, const std::string& k,
                  const std::string& select, const std::string& precision = "fp32") {
  const PublishedCheckpoint src = PublishedCheckpoint::open(ckpt);
  ModelConfig cfg = src.config();
  if (!ffn.empty()) apply_override(cfg, "ffn", ffn);
  if (!k.empty()) apply_override(cfg, "k", k);
  if (!select.empty()) apply_override(cfg, "select", select);
  // bf16: weights rounded to bf16 on load and bf16 activations, as the GPU's decode and training run.
  if (precision == "bf16") cfg.param_dtype = cfg.act_dtype = DType::bf16;
  cfg.validate();
  Loaded l;
  l.ops = make_ops(device);
  l.model = std::make_unique<Transformer>(*l.ops, cfg);
  src.load(*l.model);
  return l;
}

std::vector<std::int32_t> ids_of(const std::string& ids, const std::string& tokens) {
  if (tokens.empty()) return read_ids(ids, "--ids");
  std::ifstream f(tokens);
  if (!f) throw ConfigError("cannot read " + tokens);
  std::stringstream ss;
  ss << f.rdbuf();
  return read_ids(ss.str(), tokens);
}

// The gate analysis of the paper's premises (model/activation_analysis.h) on the ids, cut into sequences of
// `window` ids: per layer the G and SiLU(G) histograms with the top-K threshold, the kept |SiLU| mass, the
// overlap of two tokens' selections; the union of B tokens' selections against independent ones. Written as
// JSON to `path`; a summary on stdout.
void write_analysis(Transformer& model, const std::vector<std::int32_t>& ids, int window, const std::string& path) {
  const ModelConfig& c = model.config();
  if (c.ffn.kind != FfnKind::moc)
    throw ConfigError("eval --analyze: name the selection to analyse: --ffn moc --k K (and --select)");
  const int seq = window > 0 ? window : std::min<int>(c.seq_len, 512);
  const int batch = static_cast<int>(ids.size()) / seq;
  if (batch < 2) throw ConfigError("eval --analyze: needs at least two windows of " + std::to_string(seq) + " ids");
  const std::vector<std::int32_t> used(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(batch) * seq);
  const GateAnalysis ga = analyze_gates(model, used, batch, seq, std::min(4, batch));
  auto hist = [](const Histogram& h) {
    return nlohmann::ordered_json{{"lo", h.lo}, {"hi", h.hi}, {"density", h.density}};
  };
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& L : ga.layers)
    layers.push_back({{"threshold_pre", L.threshold_pre}, {"threshold_post", L.threshold_post},
                      {"kept_mass", L.kept_mass},         {"overlap_mean", L.overlap_mean},
                      {"union_mean", L.union_mean},       {"pre", hist(L.pre)},
                      {"post", hist(L.post)},             {"overlap", hist(L.overlap)}});
  const nlohmann::ordered_json j{{"model", c.describe()},  {"d_ffn", ga.d_ffn},         {"kept", ga.kept},
                                 {"tokens", ga.tokens},    {"sequences", batch},       {"seq", seq},
                                 {"union_mean", ga.union_mean}, {"union_independent", ga.union_independent},
                                 {"layers", layers}};
  std::ofstream f(path, std::ios::trunc);
  f << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!f.flush()) throw std::runtime_error("eval: cannot write " + path);
  double mass = 0, overlap = 0;
  for (const auto& L : ga.layers) mass += L.kept_mass, overlap += L.overlap_mean;
  const double nl = static_cast<double>(std::max<std::size_t>(ga.layers.size(), 1));
  std::fprintf(stderr, "analysis    %d of %d channels kept; kept |SiLU| mass %.3f, overlap of two tokens %.3f (mean over "
               "layers); union of B tokens:", ga.kept, ga.d_ffn, mass / nl, overlap / nl);
  for (std::size_t b = 0; b < ga.union_mean.size(); ++b)
    std::fprintf(stderr, " B=%zu %.0f (independent %.0f)", b + 1, ga.union_mean[b], ga.union_independent[b]);
  std::fprintf(stderr, "; written to %s\n", path.c_str());
}

int run_eval(const EvalOptions& o) {
  const std::vector<std::int32_t> ids = ids_of(o.ids, o.tokens);
  Loaded l = load_model(o.ckpt, o.device, o.ffn, o.k, o.select, o.precision);
  Transformer& model = *l.model;
  const ModelConfig& cfg = model.config();
  const EvalResult r = evaluate_ids(model, ids, o.window, o.logprobs, !o.logits.empty());
  if (!o.analyze.empty()) write_analysis(model, ids, o.window, o.analyze);
  if (!o.logits.empty()) write_npy(o.logits, r.logits, r.positions, cfg.vocab);
  if (o.format == "json") {
    nlohmann::ordered_json j{{"checkpoint", o.ckpt}, {"model", cfg.describe()}, {"device", o.device},
                             {"tokens", r.tokens},   {"windows", r.windows},    {"loss", r.loss},
                             {"perplexity", r.perplexity}};
    if (o.logprobs) j["logprobs"] = r.logprobs;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("model       %s\n", cfg.describe().c_str());
  std::printf("tokens      %lld predicted in %lld window(s)\n", static_cast<long long>(r.tokens),
              static_cast<long long>(r.windows));
  std::printf("loss        %.6f nats/token\nperplexity  %.4f\n", r.loss, r.perplexity);
  if (o.logprobs)
    for (std::size_t i = 0; i < r.logprobs.size(); ++i) std::printf("logprob %zu  %.6f\n", i + 1, r.logprobs[i]);
  return 0;
}


struct GenerateOptions {
  std::string ckpt, ids, device = "cpu", ffn, k, select, format = "text";
  int n = 16;
  float temperature = 0.0f;  // <= 0: greedy
  std::uint64_t seed = 0;
};

// The greedy choice (ties: the lowest id) and its log-probability.
std::pair<std::int32_t, double> greedy(const std::vector<float>& row) {
  const auto best = static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  return {best, token_logprob(row.data(), row.size(), best)};
}

int run_generate(const GenerateOptions& o) {
  const std::vector<std::int32_t> prompt = read_ids(o.ids, "--ids");
  if (prompt.empty()) throw ConfigError("generate: give the prompt's token ids (--ids \"1 2 3\")");
  Loaded l = load_model(o.ckpt, o.device, o.ffn, o.k, o.select);
  Transformer& model = *l.model;
  const ModelConfig& cfg = model.config();
  for (auto id : prompt)
    if (id >= cfg.vocab) throw ConfigError("generate: id " + std::to_string(id) + " is outside the vocabulary");
  const int P = static_cast<int>(prompt.size());
  if (P + o.n > cfg.seq_len) throw ConfigError("generate: the prompt and --n exceed the model's positions");
  Decoder dec(model, 1, P + o.n);
  const std::vector<float> all = l.ops->download_f32(dec.prefill(prompt, P));
  const auto V = static_cast<std::size_t>(cfg.vocab);
  std::vector<float> row(all.end() - static_cast<std::ptrdiff_t>(V), all.end());
  std::vector<std::int32_t> out;
  std::vector<double> lps;
  // Sampling: the engine's own sampler (Ops::sample, the one the decode mode runs: a counter-based draw keyed
  // by (seed, row, step)) on the step's logits; the log-probability reported is the model's (temperature 1).
  Tensor logits = l.ops->empty({1, cfg.vocab}, DType::f32, workspace_tag());
  Tensor counter = l.ops->empty({1}, DType::i32, workspace_tag());
  Tensor next = l.ops->empty({1}, DType::i32, workspace_tag());
  for (int t = 0; t < o.n; ++t) {
    std::int32_t id = greedy(row).first;
    if (o.temperature > 0.0f) {
      l.ops->upload_f32(logits, row);
      l.ops->upload_i32(counter, {t});
      l.ops->sample(logits, o.temperature, o.seed, counter, next);
      id = l.ops->download_i32(next)[0];
    }
    out.push_back(id);
    lps.push_back(token_logprob(row.data(), row.size(), id));
    if (t + 1 < o.n) row = l.ops->download_f32(dec.step({id}));
  }
  if (o.format == "json") {
    const nlohmann::ordered_json j{{"checkpoint", o.ckpt}, {"model", cfg.describe()}, {"device", o.device},
                                   {"temperature", o.temperature}, {"seed", o.seed},  {"prompt", prompt},
                                   {"ids", out},                   {"logprobs", lps}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("model   %s\n", cfg.describe().c_str());
  for (std::size_t i = 0; i < out.size(); ++i) std::printf("%3zu  %7d  logprob %.6f\n", i + 1, out[i], lps[i]);
  return 0;
}

constexpr const char* kCkptHelp =
    "Checkpoint: a GGUF file (llama architecture) or a Hugging Face folder (config.json + model.safetensors: Llama, "
    "Qwen3, Mixtral)";

struct ConvertOptions {
  std::string ckpt, out, dtype = "f32";
};

// `mocbench convert CKPT OUT`: the checkpoint as a Hugging Face folder (model/hf_checkpoint.h).
int run_convert(const ConvertOptions& o) {
  const PublishedCheckpoint src = PublishedCheckpoint::open(o.ckpt);
  ModelConfig cfg = src.config();
  auto ops = make_cpu_ops();
  Transformer model(*ops, cfg);
  src.load(model);
  if (o.dtype == "bf16") {
    cfg.param_dtype = DType::bf16;
    Transformer out(*ops, cfg);
    for (std::size_t i = 0; i < model.params().size(); ++i)
      ops->upload_f32(out.params()[i].value, ops->download_f32(model.params()[i].value));
    save_hf_checkpoint(o.out, out);
  } else {
    save_hf_checkpoint(o.out, model);
  }
  std::printf("wrote %s (config.json, model.safetensors; %s): %s\n", o.out.c_str(), o.dtype.c_str(),
              cfg.describe().c_str());
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, std::vector<Command>& out) {
  auto* c = app.add_subcommand("eval", "A checkpoint's loss and perplexity on token ids (GGUF or Hugging Face), optionally "
                                       "as training-free MoC");
  auto o = std::make_shared<EvalOptions>();
  c->add_option("CKPT", o->ckpt, kCkptHelp)->required()->check(CLI::ExistingPath);
  auto* ids = c->add_option("--ids", o->ids, "Token ids, space-separated (\"1 504 3458\")");
  c->add_option("--tokens", o->tokens, "A file of whitespace-separated token ids")->excludes(ids)->check(CLI::ExistingFile);
  c->add_option("--window", o->window, "Tokens per window (default: the model's context)")->check(CLI::NonNegativeNumber);
  c->add_option("--device", o->device, "cpu | cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  c->add_option("--ffn", o->ffn, "Run the FFN as dense (default) | moc | moc_a:b: training-free MoC on the checkpoint");
  c->add_option("--k", o->k, "MoC: channels kept per token (integer, or a fraction of d_ffn)");
  c->add_option("--select", o->select, "MoC: the ranking, gate (the paper's rule, default) | silu | abs_silu (Theorem 1's)")
      ->check(CLI::IsMember({"gate", "silu", "abs_silu"}));
  c->add_flag("--logprobs", o->logprobs, "Also print each predicted token's log-probability");
  c->add_option("--logits", o->logits, "Write every position's logits to this .npy file (float32, [positions, vocab])");
  c->add_option("--format", o->format, "text | json")->capture_default_str()->check(CLI::IsMember({"text", "json"}));
  c->add_option("--precision", o->precision, "fp32 | bf16: the weights (rounded on load) and activations")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16"}));
  c->add_option("--analyze", o->analyze,
                "Also analyse the gates on the ids (MoC's selection of --k): per layer G / SiLU(G) histograms with the "
                "top-K threshold, kept mass, overlap; unions of B tokens; written as JSON to this file");
  out.push_back({c, [o] {
                   if (o->ids.empty() && o->tokens.empty())
                     throw ConfigError("eval: give the token ids (--ids \"1 2 3\" or --tokens FILE)");
                   return run_eval(*o);
                 }});
  auto* g = app.add_subcommand("generate", "Greedy (or sampled, seeded) tokens from a checkpoint (GGUF or Hugging Face) "
                                          "after given ids, with their log-probabilities, optionally as training-free MoC");
  auto go = std::make_shared<GenerateOptions>();
  g->add_option("CKPT", go->ckpt, kCkptHelp)->required()->check(CLI::ExistingPath);
  g->add_option("--ids", go->ids, "The prompt's token ids, space-separated")->required();
  g->add_option("-n,--n", go->n, "Tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  g->add_option("--device", go->device, "cpu | cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  g->add_option("--ffn", go->ffn, "dense (default) | moc | moc_a:b: training-free MoC on the checkpoint");
  g->add_option("--k", go->k, "MoC: channels kept per token (integer, or a fraction of d_ffn)");
  g->add_option("--select", go->select, "MoC: the ranking, gate | silu | abs_silu")
      ->check(CLI::IsMember({"gate", "silu", "abs_silu"}));
  g->add_option("--temperature", go->temperature,
                 "0: greedy (ties: the lowest id); > 0: draws from softmax(logits / T) with the engine's sampler")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  g->add_option("--seed", go->seed, "The sampler's seed (with --temperature > 0: the same seed, the same tokens)")
      ->capture_default_str();
  g->add_option("--format", go->format, "text | json")->capture_default_str()->check(CLI::IsMember({"text", "json"}));
  out.push_back({g, [go] { return run_generate(*go); }});
  auto* v = app.add_subcommand("convert", "Write a checkpoint (GGUF or Hugging Face) as a Hugging Face folder that "
                                          "transformers' from_pretrained loads (config.json + model.safetensors)");
  auto vo = std::make_shared<ConvertOptions>();
  v->add_option("CKPT", vo->ckpt, kCkptHelp)->required()->check(CLI::ExistingPath);
  v->add_option("OUT", vo->out, "The folder to write (created; its config.json and model.safetensors replaced)")->required();
  v->add_option("--dtype", vo->dtype, "f32 | bf16: the stored weights")->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  out.push_back({v, [vo] { return run_convert(*vo); }});
}

}  // namespace moc::cli
