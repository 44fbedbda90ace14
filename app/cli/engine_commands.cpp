// Engine commands: smoke (train a small model, then decode), memory-model, devices, data, keys.
#include "app/cli/commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "app/harness/ceilings.h"
#include "app/harness/runner.h"
#include "app/scenario/scenario_keys.h"
#include "app/report/summary.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/data/token_data.h"
#include "model/data/tokenizer.h"
#include "model/decoder.h"
#include "model/memory_model.h"
#include "model/trainer.h"
#include "model/transformer.h"
#include "profiling/ranges.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_info.h"
#include "kernels/cuda/cuda_ops.h"
#endif

namespace moc::cli {

namespace {

void apply_overrides(ModelConfig& cfg, const std::vector<std::string>& sets) {
  for (const auto& kv : sets) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw ConfigError("--set expects key=value, got '" + kv + "'");
    apply_override(cfg, kv.substr(0, eq), kv.substr(eq + 1));
  }
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

int cmd_memory_model(const std::string& preset_name, long batch, long seq, const std::string& ffn, const std::string& k,
                     bool gcp, const std::vector<std::string>& sets) {
  ModelConfig cfg = preset(preset_name);
  apply_override(cfg, "ffn", ffn);
  if (!k.empty()) apply_override(cfg, "k", k);
  cfg.ffn.gcp = gcp;
  apply_overrides(cfg, sets);
  if (batch <= 0 || seq <= 0) throw ConfigError("batch and seq must be positive");
  cfg.validate();
  const auto paper = paper_activation_model(cfg, batch, seq, 2.0);
  ModelConfig bf = cfg;
  bf.act_dtype = DType::bf16;
  const auto engine = engine_activation_model(bf, batch, seq);
  std::printf("%s\nbatch %ld, seq %ld; bf16 activations (paper: 2 bytes per element)\n", cfg.describe().c_str(), batch,
              seq);
  if (cfg.moe())
    std::printf("FFN activation (paper Table 2): %.2f bsd per expert, x %d experts per token\n\n", paper_ffn_bsd(cfg),
                cfg.experts_per_token);
  else
    std::printf("FFN activation (paper Table 2): %.2f bsd\n\n", paper_ffn_bsd(cfg));
  // The paper's profiled table (§2: batch 64, seq 256, dense, bf16) where it applies.
  struct Measured {
    double attention, ffn, others, head, total;
  };
  const Measured* measured = nullptr;
  static constexpr Measured k350m{177e6, 400e6, 68e6, 2.16e9, 17.64e9}, k1b{336e6, 791e6, 134e6, 2.16e9, 32.4e9};
  if (batch == 64 && seq == 256 && cfg.ffn.kind == FfnKind::dense && !cfg.ffn.gcp) {
    if (cfg.preset == "350m" && cfg.layers == 24) measured = &k350m;
    if (cfg.preset == "1b" && cfg.layers == 24) measured = &k1b;
  }
  std::printf("%-22s %14s %14s %14s\n", "", "paper model", "mocbench keeps", measured ? "paper measured" : "");
  auto row = [&](const char* name, double a, double b, double m) {
    std::printf("%-22s %14s %14s %14s\n", name, gb(a).c_str(), gb(b).c_str(), measured && m > 0 ? gb(m).c_str() : "");
  };
  row("attention / layer", paper.attention, engine.attention, measured ? measured->attention : 0);
  row("ffn / layer", paper.ffn, engine.ffn, measured ? measured->ffn : 0);
  row("others / layer", paper.others_per_layer(), engine.others_per_layer(), measured ? measured->others : 0);
  row("  norm", paper.norm, engine.norm, 0);
  row("  residual", paper.residual, engine.residual, 0);
  row("LM head", paper.head, engine.head, measured ? measured->head : 0);
  row("total", paper.total(), engine.total(), measured ? measured->total : 0);
  std::printf("\nffn / attention = %.2f (paper model), %.2f (mocbench)%s\n", paper.ffn / paper.attention,
              engine.ffn / engine.attention, measured ? ", 2.3 (paper measured)" : "");
  std::printf("mocbench keeps neither the attention output projection O nor the FFN output D (no backward reads\n"
              "them; the residual stream after each add is kept instead), hence 4 bsd + log-sum-exp for attention,\n"
              "nor the RMSNorm outputs (recomputed in backward from the residual and 1/rms: only 1/rms is kept).\n");
  return 0;
}

int cmd_smoke(const std::string& preset_name, int batch, int seq, int steps, int gen, const std::vector<std::string>& sets) {
  ModelConfig cfg = preset(preset_name);
  if (cfg.ffn.kind == FfnKind::dense && preset_name.starts_with("tiny")) apply_override(cfg, "ffn", "moc");
  apply_overrides(cfg, sets);
  if (batch <= 0 || seq <= 0 || steps < 0 || gen < 0) throw ConfigError("batch, seq must be positive; steps, gen >= 0");
  cfg.seq_len = std::max(cfg.seq_len, seq);
  cfg.validate();
  auto ops = make_cpu_ops();
  HostRangeTimer timer;
  Transformer model(*ops, cfg);
  model.set_ranges(&timer);
  std::printf("mocbench %s smoke on %s: %s, %.2fM parameters\n", MOCBENCH_VERSION, ops->name().c_str(),
              cfg.describe().c_str(), static_cast<double>(model.parameter_count()) / 1e6);

  // A fixed batch of a repeating pattern: the loss must fall as the model memorizes it.
  const std::int64_t n = static_cast<std::int64_t>(batch) * seq;
  std::vector<std::int32_t> tok(static_cast<std::size_t>(n)), tgt(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    tok[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7 + i / seq) % cfg.vocab);
    tgt[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(((i + 1) * 7 + i / seq) % cfg.vocab);
  }
  Tensor tokens = ops->empty({n}, DType::i32, workspace_tag());
  Tensor targets = ops->empty({n}, DType::i32, workspace_tag());
  ops->upload_i32(tokens, tok);
  ops->upload_i32(targets, tgt);

  TrainConfig tc;
  tc.lr = 3e-3f;
  tc.warmup_steps = std::max(1, steps / 10);
  tc.total_steps = std::max(1, steps);
  Trainer trainer(model, tc);
  double first = 0, last = 0, total_ms = 0;
  for (int s = 0; s < steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = trainer.step(tokens, targets, batch, seq);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    total_ms += ms;
    if (s == 0) first = r.loss;
    last = r.loss;
    if (s == 0 || (s + 1) % std::max(1, steps / 5) == 0)
      std::printf("  step %4d  loss %.4f  grad-norm %.3f  lr %.2e  %.1f ms\n", s + 1, r.loss, r.grad_norm, r.lr, ms);
  }
  if (steps) {
    std::printf("train: loss %.4f -> %.4f, %.2f ms/step (mean of %d, batch %d x seq %d)\n", first, last,
                total_ms / steps, steps, batch, seq);
    auto peak = ops->memory().at_peak();
    std::printf("peak memory %s:", format_bytes(ops->memory().peak_total()).c_str());
    for (std::size_t c = 0; c < kMemCategories; ++c)
      if (peak.by_category[c])
        std::printf(" %s %s", std::string(category_name(static_cast<MemCategory>(c))).c_str(),
                    format_bytes(peak.by_category[c]).c_str());
    std::printf("\n");
    const auto engine = engine_activation_model(cfg, batch, seq);
    std::printf("activations at peak: measured %s, engine model %s\n",
                format_bytes(peak.category(MemCategory::activations)).c_str(),
                format_bytes(static_cast<std::int64_t>(engine.total())).c_str());
    std::printf("host time per range (all steps):\n");
    for (const auto& [name, st] : timer.stats())
      if (!name.starts_with("layer."))
        std::printf("  %-14s %9.2f ms  (%lld calls)\n", name.c_str(), static_cast<double>(st.total_ns) / 1e6,
                    static_cast<long long>(st.calls));
  }
  if (gen > 0) {
    const int prompt_len = std::min(seq, 8);
    std::vector<std::int32_t> prompt(tok.begin(), tok.begin() + prompt_len);
    Decoder dec(model, 1, prompt_len + gen, {});
    auto t0 = std::chrono::steady_clock::now();
    auto outs = dec.generate(prompt, prompt_len, gen, true);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("decode: prompt %d, %d new tokens greedy in %.2f ms:", prompt_len, gen, ms);
    for (auto t : outs[0]) std::printf(" %d", t);
    std::printf("\n");
  }
  return 0;
}

// `devices --measure`: each device's roofline ceilings measured now (and cached for the runs that follow).
void measure_devices(const std::vector<int>& gpus) {
  auto show = [](const std::string& what, const DeviceCeilings& c) {
    std::printf("  %s ceilings: copy %.0f GB/s (read + write), %s GEMM %.1f TFLOP/s\n", what.c_str(), c.copy_GBps,
                c.gemm_dtype.c_str(), c.gemm_tflops);
  };
  auto keep = [](const std::string& key, const DeviceCeilings& c) {
    std::string why;
    if (!store_ceilings(key, c, &why)) std::printf("  (not cached: %s)\n", why.c_str());
  };
  {
    auto cpu = make_cpu_ops();
    const DeviceCeilings c = measure_ceilings(*cpu);
    keep(ceilings_key("cpu", 0), c);
    show("cpu", c);
  }
#ifdef MOCBENCH_HAVE_CUDA
  for (int g : gpus) {
    auto ops = cuda::make_cuda_ops(g);
    const DeviceCeilings c = measure_ceilings(*ops);
    keep(ceilings_key("cuda", g), c);
    show("cuda:" + std::to_string(g), c);
  }
#else
  (void)gpus;
#endif
  std::printf("cached in %s\n", ceilings_cache_path().c_str());
}

int cmd_devices(bool measure) {
  std::printf("cpu: OpenBLAS fp32 reference backend (always available)\n");
  std::vector<int> gpu_ids;
#ifdef MOCBENCH_HAVE_CUDA
  std::string why;
  auto gpus = cuda::list_gpus(&why);
  if (gpus.empty()) std::printf("cuda: no GPU (%s)\n", why.c_str());
  for (const auto& g : gpus)
    std::printf("cuda:%d %s  sm_%d%d  %d SMs  %s HBM  L2 %s  SM clock %d MHz  mem clock %d MHz  bus %d bit  "
                "driver %d  runtime %d\n",
                g.index, g.name.c_str(), g.cc_major, g.cc_minor, g.sm_count,
                format_bytes(static_cast<std::int64_t>(g.total_mem_bytes)).c_str(),
                format_bytes(static_cast<std::int64_t>(g.l2_bytes)).c_str(), g.sm_clock_khz / 1000,
                g.mem_clock_khz / 1000, g.mem_bus_bits, g.driver_version, g.runtime_version);
  for (const auto& g : gpus) gpu_ids.push_back(g.index);
#else
  std::printf("cuda: not built (nvcc was not found at configure time)\n");
#endif
  if (measure) measure_devices(gpu_ids);
  return 0;
}
int cmd_data(const moc::data::DataSpec& spec, const std::string& encode) {
  moc::data::PreparedData p;
  try {
    p = moc::data::prepare_data(spec, &std::cerr);
  } catch (const moc::data::DataError& e) {
    std::fprintf(stderr, "mocbench: %s\n", e.what());
    return kExitBadInput;
  }
  std::printf("corpus       %s (%s)\n", p.corpus_name.c_str(), p.licence.empty() ? "licence not recorded" : p.licence.c_str());
  std::printf("cache        %s%s\n", p.dir.c_str(), p.from_cache ? " (cached)" : "");
  std::printf("tokenizer    %s: %d pieces (SentencePiece BPE)\n", p.tokenizer_model.c_str(), p.tokenizer_vocab);
  std::printf("training     %d documents, %lld tokens\n", p.train_docs, static_cast<long long>(p.train_token_count));
  std::printf("validation   %d documents, %lld tokens\n", p.val_docs, static_cast<long long>(p.val_token_count));
  if (!encode.empty()) {
    const auto tok = moc::data::Tokenizer::load(p.tokenizer_model);
    const auto ids = tok.encode(encode);
    std::printf("ids          ");
    for (int id : ids) std::printf("%d ", id);
    std::printf("\ndecoded      %s\n", tok.decode(ids).c_str());
  }
  return 0;
}

// `mocbench keys [SECTION]`: the scenario key tables (app/scenario/scenario_keys.h), as text or as the markdown that
// scenarios/README.md holds.
int cmd_keys(const std::string& section, const std::string& format) {
  std::vector<moc::KeySection> sections;
  if (section.empty()) {
    sections.assign(std::begin(moc::kAllSections), std::end(moc::kAllSections));
  } else {
    moc::KeySection s{};
    if (!moc::parse_section(section, &s)) {
      std::fprintf(stderr, "mocbench: no section '%s'\n  hint: sections: top, model, measure, profile, data, axes\n",
                   section.c_str());
      return kExitBadInput;
    }
    sections.push_back(s);
  }
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const moc::KeySection s = sections[i];
    const std::string head = s == moc::KeySection::top ? "top level" : "[" + std::string(moc::section_name(s)) + "]";
    if (format == "md") {
      std::printf("%s### %s\n\n%s", i ? "\n" : "", head.c_str(), moc::key_table_markdown(s).c_str());
      continue;
    }
    std::printf("%s%s\n", i ? "\n" : "", head.c_str());
    for (const auto& k : moc::scenario_keys(s)) {
      std::printf("  %-18s default: %s\n", k.name, k.fallback);
      // The documentation wrapped at word boundaries under the key.
      std::string line;
      std::istringstream words(k.doc);
      for (std::string w; words >> w;) {
        if (!line.empty() && line.size() + 1 + w.size() > 78) std::printf("    %s\n", line.c_str()), line.clear();
        line += (line.empty() ? "" : " ") + w;
      }
      if (!line.empty()) std::printf("    %s\n", line.c_str());
    }
  }
  return 0;
}


}  // namespace

void add_engine_commands(CLI::App& app, std::vector<Command>& out) {
  {
    auto* c = app.add_subcommand("smoke", "Train a small model for a few steps on the CPU, then decode");
    struct O {
      std::string preset = "tiny";
      int batch = 4, seq = 16, steps = 50, gen = 16;
      std::vector<std::string> sets;
    };
    auto o = std::make_shared<O>();
    c->add_option("--preset", o->preset, "Model preset")->capture_default_str();
    c->add_option("--batch", o->batch, "Batch size")->capture_default_str();
    c->add_option("--seq", o->seq, "Sequence length")->capture_default_str();
    c->add_option("--steps", o->steps, "Training steps")->capture_default_str();
    c->add_option("--gen", o->gen, "Tokens to generate after training")->capture_default_str();
    c->add_option("--set", o->sets, "Model override key=value (e.g. ffn=moc_2:8, k=0.2, gcp=true)");
    out.push_back({c, [o] { return cmd_smoke(o->preset, o->batch, o->seq, o->steps, o->gen, o->sets); }});
  }
  {
    auto* c = app.add_subcommand("memory-model", "Activation memory: the paper's model beside what mocbench keeps");
    struct O {
      std::string preset = "1b", ffn = "dense", k;
      long batch = 64, seq = 256;
      bool gcp = false;
      std::vector<std::string> sets;
    };
    auto o = std::make_shared<O>();
    c->add_option("--preset", o->preset, "Model preset")->capture_default_str();
    c->add_option("--batch", o->batch, "Batch size")->capture_default_str();
    c->add_option("--seq", o->seq, "Sequence length")->capture_default_str();
    c->add_option("--ffn", o->ffn, "dense | moc | moc_a:b")->capture_default_str();
    c->add_option("--k", o->k, "Kept channels (integer or fraction of d_ffn); default: the preset's K");
    c->add_flag("--gcp", o->gcp, "Gradient checkpointing of the FFN element-wise part");
    c->add_option("--set", o->sets, "Model override key=value");
    out.push_back({c, [o] { return cmd_memory_model(o->preset, o->batch, o->seq, o->ffn, o->k, o->gcp, o->sets); }});
  }
  {
    auto* c = app.add_subcommand("devices", "List the backends and GPUs mocbench can use");
    auto measure = std::make_shared<bool>(false);
    c->add_flag("--measure", *measure,
                "Also measure each device's roofline ceilings now (copy bandwidth, dense GEMM rate) and cache them "
                "for the runs that follow (each run records its device's, measuring once when none are cached)");
    out.push_back({c, [measure] { return cmd_devices(*measure); }});
  }
  {
    auto* c = app.add_subcommand("data", "Tokenize a corpus once into the token cache (what [data] training reads) "
                                         "and print its statistics; optionally encode / decode a text");
    struct O {
      data::DataSpec spec;
      std::string encode;
    };
    auto o = std::make_shared<O>();
    o->spec.corpus = "python3.11-doc";
    c->add_option("--corpus", o->spec.corpus, "A named corpus (python3.11-doc) or a directory of text files")
        ->capture_default_str();
    c->add_option("--vocab", o->spec.vocab, "Tokenizer vocabulary (the model's vocab)")->capture_default_str();
    c->add_option("--val-fraction", o->spec.val_fraction, "Documents held out for validation")->capture_default_str();
    c->add_option("--seed", o->spec.seed, "The split and the tokenizer's sampling")->capture_default_str();
    c->add_option("--cache", o->spec.cache_root, "Token cache directory (default: $MOCBENCH_DATA_CACHE or .local/data)");
    c->add_option("--encode", o->encode, "Also print the ids of this text and the text they decode to");
    out.push_back({c, [o] { return cmd_data(o->spec, o->encode); }});
  }
  {
    auto* c = app.add_subcommand("keys", "List the keys a scenario file may hold, by section: default and meaning");
    struct O {
      std::string section, format = "text";
    };
    auto o = std::make_shared<O>();
    c->add_option("SECTION", o->section, "top | model | measure | profile | data | axes (default: every section)");
    c->add_option("--format", o->format, "text | md (the tables of scenarios/README.md)")
        ->check(CLI::IsMember({"text", "md"}))
        ->capture_default_str();
    out.push_back({c, [o] { return cmd_keys(o->section, o->format); }});
  }
}

}  // namespace moc::cli
