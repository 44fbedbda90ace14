// Real text (issue 14): corpora, the SentencePiece tokenizer, token files and the window loader, the
// validation split, training on text (the loss falls; resuming equals uninterrupted training) and the
// analyses of trained gates. The corpus is the Python tutorial's sources from Debian's python3.11-doc
// (scripts/setup.sh installs it), copied into a scratch directory so each test trains a small tokenizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "app/harness/point_bench.h"
#include "model/activation_analysis.h"
#include "model/checkpoint.h"
#include "model/data/corpus.h"
#include "model/data/token_data.h"
#include "model/data/tokenizer.h"
#include "model/safetensors.h"
#include "model/trainer.h"
#include "shell_util.h"
#include "test_util.h"

namespace moc {
namespace {
namespace fs = std::filesystem;
using namespace moc::test;

const char* kTutorial = "/usr/share/doc/python3.11/html/_sources/tutorial";

class Data : public ScratchDirTest {
 protected:
  // The tutorial's 17 documents in <scratch>/corpus (the named corpus is too large for a unit test).
  std::string tutorial_corpus() {
    if (!fs::is_directory(kTutorial)) {
      ADD_FAILURE() << kTutorial << " is missing: install Debian's python3.11-doc (scripts/setup.sh does)";
      return "";
    }
    const fs::path dst = dir_ / "corpus";
    fs::create_directories(dst);
    for (const auto& e : fs::directory_iterator(kTutorial)) fs::copy_file(e.path(), dst / e.path().filename());
    return dst.string();
  }
  data::DataSpec spec_of(const std::string& corpus, int vocab = 512) {
    data::DataSpec s;
    s.corpus = corpus;
    s.vocab = vocab;
    s.val_fraction = 0.2;
    s.seed = 3;
    s.cache_root = path("cache");
    return s;
  }
};

TEST_F(Data, TokenizerRoundTripsEveryDocumentOfTheCorpus) {
  const std::string corpus = tutorial_corpus();
  ASSERT_FALSE(corpus.empty());
  const auto docs = data::read_corpus(data::resolve_corpus(corpus));
  ASSERT_EQ(docs.size(), 17u);
  std::vector<const data::Document*> train;
  for (std::size_t i = 0; i < docs.size(); i += 2) train.push_back(&docs[i]);  // half: the rest is unseen text
  data::TokenizerSettings ts;
  ts.vocab = 600;
  data::Tokenizer::train(train, ts, path("t.model"));
  const auto tok = data::Tokenizer::load(path("t.model"));
  EXPECT_EQ(tok.vocab_size(), 600);
  for (const auto& d : docs) {
    SCOPED_TRACE(d.name);
    const auto ids = tok.encode(d.text);
    EXPECT_LT(ids.size() * 3, d.text.size() * 2) << "BPE should compress English text at least 1.5x";
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < 600);
    EXPECT_EQ(tok.decode(ids), d.text);
  }
  // Whitespace, tabs, newlines and characters the training text never had (byte fallback) survive too.
  const std::string odd = "  two  spaces\n\n\tand a tab\r\n ünïcödé ☃ 𝔘 12345 \x01 end";
  EXPECT_EQ(tok.decode(tok.encode(odd)), odd);
  EXPECT_THROW(data::Tokenizer::train(train, {100}, path("small.model")), data::DataError);
}

TEST_F(Data, WindowsHoldConsecutiveTokensAndNextTokenTargets) {
  std::vector<std::int32_t> ids(1001);
  std::iota(ids.begin(), ids.end(), 0);
  data::write_token_file(path("t.tok"), ids, 4096, 1);
  const data::TokenFile f(path("t.tok"));
  ASSERT_EQ(f.size(), 1001);
  EXPECT_EQ(f.vocab(), 4096);
  data::WindowLoader loader(f, 10, 7);
  ASSERT_EQ(loader.windows(), 100);  // (1001 - 1) / 10: the last target is token 1000
  std::vector<std::int32_t> tok, tgt;
  loader.window(37, tok, tgt);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(tok[static_cast<std::size_t>(i)], 370 + i);
    EXPECT_EQ(tgt[static_cast<std::size_t>(i)], 371 + i);
  }
  // Batches: each window once per epoch, a new order each epoch; batch i is a function of (seed, i) only.
  std::multiset<std::int64_t> epoch0, epoch1;
  for (int b = 0; b < 25; ++b)
    for (auto w : loader.batch_windows(b, 4)) (loader.epoch_of(b, 4) == 0 ? epoch0 : epoch1).insert(w);
  for (int b = 25; b < 50; ++b)
    for (auto w : loader.batch_windows(b, 4)) epoch1.insert(w);
  EXPECT_EQ(epoch0.size(), 100u);
  EXPECT_EQ(std::set<std::int64_t>(epoch0.begin(), epoch0.end()).size(), 100u);
  EXPECT_EQ(std::set<std::int64_t>(epoch1.begin(), epoch1.end()).size(), 100u);
  EXPECT_NE(loader.batch_windows(0, 4), loader.batch_windows(25, 4));
  loader.batch(3, 4, tok, tgt);
  ASSERT_EQ(tok.size(), 40u);
  const auto w = loader.batch_windows(3, 4);
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(tok[static_cast<std::size_t>(r * 10 + i)], w[static_cast<std::size_t>(r)] * 10 + i);
      EXPECT_EQ(tgt[static_cast<std::size_t>(r * 10 + i)], w[static_cast<std::size_t>(r)] * 10 + i + 1);
    }
  // Determinism by seed: a second loader (fresh state, batches asked out of order) agrees; another seed differs.
  data::WindowLoader same(f, 10, 7), other(f, 10, 8);
  EXPECT_EQ(same.batch_windows(30, 4), loader.batch_windows(30, 4));
  EXPECT_EQ(same.batch_windows(3, 4), w);
  EXPECT_NE(other.batch_windows(3, 4), w);
  // Malformed files are refused with the file named.
  std::ofstream(path("bad.tok")) << "not a token file at all, but long enough";
  EXPECT_THROW(data::TokenFile(path("bad.tok")), data::DataError);
  fs::resize_file(path("t.tok"), fs::file_size(path("t.tok")) - 2);
  try {
    data::TokenFile truncated(path("t.tok"));
    ADD_FAILURE() << "a truncated token file was accepted";
  } catch (const data::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  // A file too short for one window is refused (with what to change), not an empty loop.
  data::write_token_file(path("short.tok"), {1, 2, 3, 4, 5}, 4096, 1);
  const data::TokenFile short_file(path("short.tok"));
  EXPECT_THROW(data::WindowLoader(short_file, 10, 1), data::DataError);
}

TEST_F(Data, ValidationDocumentsAreHeldOutWholeAndTheCacheIsKeyedByContent) {
  const std::string corpus = tutorial_corpus();
  ASSERT_FALSE(corpus.empty());
  const auto spec = spec_of(corpus);
  const auto p = data::prepare_data(spec);
  EXPECT_FALSE(p.from_cache);
  EXPECT_EQ(p.train_docs + p.val_docs, 17);
  EXPECT_EQ(p.val_docs, 3);  // round(0.2 x 17)
  const auto docs = data::read_corpus(data::resolve_corpus(corpus));
  std::set<std::string> val(p.val_doc_names.begin(), p.val_doc_names.end());
  ASSERT_EQ(val.size(), 3u);
  // The validation token file is exactly the held-out documents, each ended by EOS; the training file the
  // others: no document is in both.
  const auto tok = data::Tokenizer::load(p.tokenizer_model);
  auto split_text = [&](const std::string& file, bool want_val, std::string* expected) {
    const data::TokenFile f(file);
    std::vector<int> ids;
    int eos = 0;
    for (std::int64_t i = 0; i < f.size(); ++i) {
      ids.push_back(f[i]);
      eos += f[i] == tok.eos_id();
    }
    for (const auto& d : docs)
      if (val.count(d.name) == static_cast<std::size_t>(want_val)) *expected += d.text;
    EXPECT_EQ(eos, f.documents());
    return tok.decode(ids);  // control ids (EOS) decode to nothing
  };
  std::string want_val, want_train;
  EXPECT_EQ(split_text(p.val_tokens, true, &want_val), want_val);
  EXPECT_EQ(split_text(p.train_tokens, false, &want_train), want_train);
  EXPECT_EQ(want_val.size() + want_train.size(),
            std::accumulate(docs.begin(), docs.end(), std::size_t{0}, [](std::size_t a, const auto& d) { return a + d.text.size(); }));
  // Same corpus and settings: the cache entry is reused. Another seed: another split.
  const auto again = data::prepare_data(spec);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.key, p.key);
  EXPECT_EQ(again.val_doc_names, p.val_doc_names);
  auto reseeded = spec;
  reseeded.seed = 4;
  EXPECT_NE(data::validation_documents(17, 0.2, 3), data::validation_documents(17, 0.2, 4));
  EXPECT_NE(data::prepare_data(reseeded).key, p.key);
  // One changed byte of the corpus: a new key (no stale tokens).
  {
    std::ofstream(fs::path(corpus) / "appendix.rst.txt", std::ios::app) << "x";
  }
  EXPECT_NE(data::prepare_data(spec).key, p.key);
  // Missing corpora are refused with what to do.
  try {
    data::resolve_corpus(path("nowhere"));
    ADD_FAILURE() << "a missing corpus was accepted";
  } catch (const data::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("python3.11-doc"), std::string::npos) << e.what();
  }
}

PointSpec text_point(const std::string& corpus, const std::string& cache, const char* ffn, int steps) {
  PointSpec s;
  s.mode = "train";
  s.model = preset("tiny");
  s.model.vocab = 512;
  apply_override(s.model, "ffn", ffn);
  s.batch = 4;
  s.seq = 32;
  s.data.corpus = corpus;
  s.data.cache = cache;
  s.data.val_fraction = 0.2;
  s.data.seed = 3;
  s.data.steps = steps;
  s.data.eval_every = 10;
  s.data.eval_windows = 24;
  s.data.lr = 3e-3;
  s.data.warmup = 3;
  return s;
}

double metric_of(const PointOutcome& o, const std::string& name) {
  for (const auto& [k, v] : o.metrics)
    if (k == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return std::nan("");
}

const Series* series_of(const PointOutcome& o, const std::string& name) {
  for (const auto& s : o.series)
    if (s.name == name) return &s;
  return nullptr;
}

TEST_F(Data, ATinyModelLearnsRealTextAndItsGatesAreAnalysed) {
  const std::string corpus = tutorial_corpus();
  ASSERT_FALSE(corpus.empty());
  auto ops = make_cpu_ops();
  PointSpec s = text_point(corpus, path("cache"), "moc", 60);
  s.data.save = path("ckpt/moc.safetensors");
  const PointOutcome o = run_point(*ops, s);
  const double v0 = metric_of(o, "val_loss_initial"), v1 = metric_of(o, "val_loss");
  EXPECT_NEAR(v0, std::log(512.0), 0.3);  // an untrained model is close to uniform
  EXPECT_LT(v1, v0 - 1.0) << "validation loss " << v0 << " -> " << v1;
  EXPECT_NEAR(metric_of(o, "val_ppl"), std::exp(v1), 1e-9 * std::exp(v1));
  const Series* loss = series_of(o, "train_loss");
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->y.size(), 60u);
  EXPECT_LT(loss->y.back(), loss->y.front() - 1.0);
  const Series* ppl = series_of(o, "val_ppl");
  ASSERT_NE(ppl, nullptr);
  EXPECT_EQ(ppl->x, (std::vector<double>{0, 10, 20, 30, 40, 50, 60}));
  EXPECT_TRUE(fs::is_regular_file(path("ckpt/moc.safetensors")));
  // The analyses: one token selects K channels; more tokens select at least as many, at most B K.
  const double K = metric_of(o, "analysis_kept");
  EXPECT_EQ(K, 17);
  EXPECT_DOUBLE_EQ(metric_of(o, "union_b1"), K);
  for (int b = 2; b <= 4; ++b) {
    EXPECT_GE(metric_of(o, "union_b" + std::to_string(b)), metric_of(o, "union_b" + std::to_string(b - 1)));
    EXPECT_LE(metric_of(o, "union_b" + std::to_string(b)), std::min(85.0, b * K));
  }
  const double overlap = metric_of(o, "overlap_mean");
  EXPECT_GT(overlap, 0.0);
  EXPECT_LE(overlap, 1.0);
  for (const char* h : {"gate_pre_hist.L0", "gate_post_hist.L1", "overlap_hist.L0"}) {
    const Series* hs = series_of(o, h);
    ASSERT_NE(hs, nullptr) << h;
    EXPECT_NEAR(std::accumulate(hs->y.begin(), hs->y.end(), 0.0), 1.0, 1e-9) << h;
  }
  // The top-K threshold lies inside the pre-activation histogram's range.
  const Series* pre = series_of(o, "gate_pre_hist.L0");
  const double thr = metric_of(o, "gate_threshold_pre.L0");
  EXPECT_GT(thr, pre->x.front() - 1);
  EXPECT_LT(thr, pre->x.back() + 1);
}

TEST_F(Data, ResumingATextRunEqualsRunningItStraight) {
  const std::string corpus = tutorial_corpus();
  ASSERT_FALSE(corpus.empty());
  auto ops = make_cpu_ops();
  PointSpec straight = text_point(corpus, path("cache"), "moc_2:8", 12);
  straight.data.save = path("straight.safetensors");
  const PointOutcome a = run_point(*ops, straight);
  // The same 12-step run stopped after 5 (a job's time limit), then resumed from its checkpoint.
  PointSpec half = text_point(corpus, path("cache"), "moc_2:8", 12);
  half.data.stop_at = 5;
  half.data.save = path("half.safetensors");
  half.data.analyze = false;
  const PointOutcome h = run_point(*ops, half);
  EXPECT_EQ(series_of(h, "train_loss")->y.size(), 5u);
  PointSpec rest = text_point(corpus, path("cache"), "moc_2:8", 12);
  rest.weights = path("half.safetensors");
  rest.data.resume = true;
  rest.data.save = path("resumed.safetensors");
  const PointOutcome b = run_point(*ops, rest);
  EXPECT_EQ(metric_of(b, "start_step"), 5);
  // Step for step the same losses, the same final validation loss and bit-identical weights.
  const auto& la = series_of(a, "train_loss")->y;
  std::vector<double> lb = series_of(h, "train_loss")->y;
  for (double x : series_of(b, "train_loss")->y) lb.push_back(x);
  EXPECT_EQ(lb, la);
  EXPECT_EQ(metric_of(b, "val_loss"), metric_of(a, "val_loss"));
  EXPECT_EQ(metric_of(b, "union_b2"), metric_of(a, "union_b2"));
  const auto fa = read_safetensors(path("straight.safetensors")), fb = read_safetensors(path("resumed.safetensors"));
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (std::size_t i = 0; i < fa.tensors.size(); ++i) {
    EXPECT_EQ(fa.tensors[i].name, fb.tensors[i].name);
    EXPECT_TRUE(fa.tensors[i].data == fb.tensors[i].data) << fa.tensors[i].name;
  }
  // A checkpoint already at (or past) the end cannot be resumed.
  PointSpec done = text_point(corpus, path("cache"), "moc_2:8", 12);
  done.weights = path("straight.safetensors");
  done.data.resume = true;
  EXPECT_THROW(run_point(*ops, done), ConfigError);
}

}  // namespace
}  // namespace moc
