// Issue #29's scenario side: `mode = "eval"` over a published checkpoint ([model] weights = a Hugging Face
// folder mocbench wrote, so no Python is needed) stores per point the loss and perplexity `mocbench eval`
// computes on the same windows (dense and training-free MoC at several K, K = d_ffn giving the dense numbers),
// with the gate analysis for MoC points; the checkpoint's configuration replaces the preset, and what
// disagrees with it, or changes nothing, is refused where it is written before any work.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "app/scenario/scenario.h"
#include "db/results_db.h"
#include "model/evaluate.h"
#include "model/hf_checkpoint.h"
#include "model/published.h"
#include "shell_util.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {
namespace fs = std::filesystem;
using moc::test::shell;

// A small random Llama (GQA, an odd d_ffn) written as a Hugging Face folder, and 600 token ids.
struct Fixture {
  fs::path dir;
  ModelConfig cfg;
  std::vector<std::int32_t> ids;
  Fixture() {
    dir = fs::temp_directory_path() / ("mocbench_eval_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    cfg = preset("tiny-gqa");
    cfg.d_ffn = 45;
    cfg.vocab = 96;
    cfg.seed = 5;
    auto ops = make_cpu_ops();
    Transformer m(*ops, cfg);
    save_hf_checkpoint((dir / "hf").string(), m);
    std::mt19937 rng(11);
    std::ofstream t(dir / "ids.txt");
    for (int i = 0; i < 600; ++i) {
      ids.push_back(static_cast<std::int32_t>(rng() % 96));
      t << ids.back() << (i % 20 == 19 ? '\n' : ' ');
    }
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = dir / (name + ".toml");
    std::ofstream(p) << text;
    return p.string();
  }
  std::string weights() const { return (dir / "hf").string(); }
  std::string tokens() const { return (dir / "ids.txt").string(); }
};

std::string eval_scenario(const Fixture& f, const std::string& model_extra, const std::string& data_extra,
                          const std::string& axes) {
  return "name = \"ev\"\nmode = \"eval\"\ndevice = \"cpu\"\n[model]\nweights = \"" + f.weights() + "\"\n" + model_extra +
         "[measure]\nwarmup = 0\nmin_reps = 1\nmax_reps = 1\n[data]\ntokens = \"" + f.tokens() + "\"\n" + data_extra +
         "[axes]\n" + axes;
}

double metric(const db::PointRecord& p, const std::string& name) {
  for (const auto& [k, v] : p.metrics)
    if (k == name) return v;
  return std::nan("");
}

std::string axis(const db::PointRecord& p, const std::string& name) {
  for (const auto& [k, v] : p.axes)
    if (k == name) return v;
  return "";
}

TEST(EvalScenario, PerplexityPerPointIsEvalsOnTheSameWindowsAndKEqualToDffnIsDense) {
  const Fixture f;
  const std::string db = (f.dir / "ev.db").string();
  const std::string text =
      eval_scenario(f, "", "eval_windows = 6\n",
                    "seq = [19]\nbatch = [4]\nffn = [\"dense\", \"moc\"]\nk = [45, 20, 9]\n"
                    "[[exclude]]\nffn = \"dense\"\nk = 20\n[[exclude]]\nffn = \"dense\"\nk = 9\n");
  const auto r = shell(std::string(MOCBENCH_BIN) + " run " + f.write("ev", text) + " --db " + db + " --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto pts = store.points(store.runs().front().id);
  ASSERT_EQ(pts.size(), 4u);
  // The same windows `mocbench eval --window 20` cuts: 6 windows of 20 ids, 19 predicted each.
  const std::vector<std::int32_t> first(f.ids.begin(), f.ids.begin() + 6 * 20);
  std::map<std::string, double> ppl;
  for (const auto& p : pts) {
    ASSERT_EQ(p.status, "ok") << p.error;
    const std::string key = axis(p, "ffn") + "/" + axis(p, "k");
    ppl[key] = metric(p, "eval_ppl");
    EXPECT_DOUBLE_EQ(metric(p, "eval_tokens"), 6 * 19);
    EXPECT_DOUBLE_EQ(metric(p, "eval_windows"), 6);
    auto ops = make_cpu_ops();
    ModelConfig cfg = PublishedCheckpoint::open(f.weights()).config();
    apply_override(cfg, "ffn", axis(p, "ffn"));
    apply_override(cfg, "k", axis(p, "k"));
    cfg.seq_len = 32;  // the point's seq_len covers its windows, as the scenario raises it
    Transformer m(*ops, cfg);
    PublishedCheckpoint::open(f.weights()).load(m);
    const EvalResult want = evaluate_ids(m, first, 20, false, false);
    EXPECT_NEAR(metric(p, "eval_loss"), want.loss, 1e-5 * want.loss) << key;
    EXPECT_NEAR(ppl[key], want.perplexity, 1e-4 * want.perplexity) << key;
  }
  EXPECT_NEAR(ppl["moc/45"], ppl["dense/45"], 1e-6 * ppl["dense/45"]) << "K = d_ffn keeps every channel";
  EXPECT_NE(ppl["moc/20"], ppl["dense/45"]);
  EXPECT_NE(ppl["moc/9"], ppl["moc/20"]);
  // MoC points carry the gate analysis of their selection; dense ones do not.
  for (const auto& p : pts) {
    const bool moc = axis(p, "ffn") == "moc";
    EXPECT_EQ(std::isnan(metric(p, "union_b2")), !moc) << axis(p, "ffn");
    if (!moc) continue;
    bool hist = false;
    for (const auto& s : store.series(p.id)) hist = hist || s.name == "gate_pre_hist.L0";
    EXPECT_TRUE(hist) << "the pre-SiLU gate histogram of layer 0 is stored";
  }
  // show's eval table: perplexity, and perplexity against the dense twin.
  const auto show = shell(std::string(MOCBENCH_BIN) + " show 1 --db " + db);
  EXPECT_NE(show.out.find("eval: next-token loss and perplexity on text"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("vs dense (perplexity)"), std::string::npos) << show.out;
}

TEST(EvalScenario, ThePublishedCheckpointsConfigurationIsThePointsAndDisagreementsAreRefused) {
  const Fixture f;
  const std::string axes = "seq = [19]\nffn = [\"moc\"]\nk = [0.5]\n";
  // Accepted: the configuration comes from the checkpoint, a key that agrees with it is fine, seq_len and the
  // FFN variant are the scenario's.
  const auto pts = parse_scenario(eval_scenario(f, "hidden = " + std::to_string(f.cfg.hidden) + "\nseq_len = 64\n", "", axes),
                                  "ok.toml")
                       .expand("cpu");
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].model.hidden, f.cfg.hidden);
  EXPECT_EQ(pts[0].model.kv_heads, f.cfg.kv_heads);
  EXPECT_EQ(pts[0].model.d_ffn, 45);
  EXPECT_EQ(pts[0].model.seq_len, 64);
  EXPECT_EQ(pts[0].model.ffn.kind, FfnKind::moc);
  EXPECT_NEAR(pts[0].model.kept_channels(), 22.5, 0.5);
  auto refused = [&](const std::string& text, const std::string& message, const std::string& hint, int line) {
    try {
      (void)parse_scenario(text, "bad.toml").expand("cpu");
      ADD_FAILURE() << "accepted:\n" << text;
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(hint), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.toml:" + std::to_string(line) + ":"), std::string::npos) << e.what();
    }
  };
  refused(eval_scenario(f, "hidden = 128\n", "", axes), "hidden = 128 disagrees with the published checkpoint",
          "architecture comes from the checkpoint", 6);
  refused(eval_scenario(f, "preset = \"tiny\"\n", "", axes), "preset = tiny beside a published checkpoint",
          "drop preset", 6);
  refused(eval_scenario(f, "init_std = 0.5\n", "", axes), "init_std = 0.5 beside a published checkpoint", "drop it", 6);
  // [data] tokens: only for eval points, ids inside the vocabulary, keys that change nothing refused.
  refused(eval_scenario(f, "", "", "mode = [\"decode\"]\n"), "[data] tokens feed eval points, not decode",
          "exclude this mode's points", 11);
  refused(eval_scenario(f, "", "lr = 0.01\n", axes), "[data] lr applies to training on a corpus", "drop it", 12);
  refused(eval_scenario(f, "", "corpus = \"python3.11-doc\"\n", axes), "[data] has both corpus and tokens", "keep one",
          11);
  {
    std::ofstream(f.dir / "ids.txt", std::ios::app) << " 96\n";
    refused(eval_scenario(f, "", "", axes), "holds id 96, outside the model's 96 ids", "this model's tokenizer", 11);
  }
  // The same checkpoint decodes: a decode point of a published checkpoint runs.
  const std::string text = "name = \"dec\"\nmode = \"decode\"\ndevice = \"cpu\"\n[model]\nweights = \"" + f.weights() +
                           "\"\n[measure]\nwarmup = 0\nmin_reps = 1\nmax_reps = 1\nprompt = 4\ngenerate = 4\n";
  const auto r = shell(std::string(MOCBENCH_BIN) + " run " + f.write("dec", text) + " --db " +
                       (f.dir / "dec.db").string() + " --quiet --no-profile");
  EXPECT_EQ(r.code, 0) << r.out;
}

// `eval --precision bf16`: the weights rounded to bf16 on load and bf16 activations -- close to fp32's
// perplexity, and not the same number (the flag reaches the engine).
TEST(EvalCommand, Bf16PrecisionRoundsTheWeightsAndActivations) {
  const Fixture f;
  auto ppl = [&](const std::string& precision) {
    const auto r = shell(std::string(MOCBENCH_BIN) + " eval " + f.weights() + " --tokens " + f.tokens() +
                         " --window 16 --format json --precision " + precision);
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out)["perplexity"].get<double>();
  };
  const double p32 = ppl("fp32"), p16 = ppl("bf16");
  EXPECT_NEAR(p16, p32, 0.02 * p32);
  EXPECT_NE(p16, p32);
  EXPECT_EQ(shell(std::string(MOCBENCH_BIN) + " eval " + f.weights() + " --ids \"1 2 3\" --precision fp16").code, 2);
}

}  // namespace
}  // namespace moc
#endif
