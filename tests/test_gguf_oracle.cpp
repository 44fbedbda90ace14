// Issue #29's oracle without torch: a small llama GGUF written by llama.cpp's own `gguf` Python package (its
// writer and quantizers: Q8_0, Q4_0, Q4_1, F16, BF16 and F32 tensors, GQA, q/k rows permuted as llama.cpp's
// converter permutes them, the LM head tied to the embedding), evaluated by `mocbench eval` on fresh random
// ids and by an independent float64 NumPy forward fed by the gguf package's dequantizer in llama.cpp's own
// layout (tests/oracle/). Loss and every logit must agree to fp32 accuracy. Needs Debian's python3 with numpy
// and the pinned gguf wheel (scripts/setup.sh installs both); skipped, saying so, without them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/shell_util.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using moc::test::shell;

namespace {

// Each test: Debian's python3 with numpy and the gguf wheel (else skipped, saying so) and a tiny GGUF written
// by the gguf package (tests/oracle/make_tiny_gguf.py) with the given seed.
class GgufOracle : public moc::test::ScratchDirTest {
 protected:
  const std::string src = MOCBENCH_SOURCE_DIR;
  const std::string py = "PYTHONPATH=" + src + "/.local/gguf-py/site /usr/bin/python3";
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (!fs::exists(src + "/.local/gguf-py/site/gguf") || shell(py + " -c 'import numpy, gguf'").code != 0)
      GTEST_SKIP() << "no Debian python3 with numpy and the gguf wheel: run scripts/setup.sh";
  }
  // The file, or "" (a test failure said why) when it could not be written.
  std::string tiny_gguf(std::uint32_t seed) {
    const std::string file = path("tiny.gguf");
    const auto made = shell(py + " " + src + "/tests/oracle/make_tiny_gguf.py " + file + " " + std::to_string(seed));
    EXPECT_EQ(made.code, 0) << made.out;
    return made.code == 0 ? file : "";
  }
};

}  // namespace

TEST_F(GgufOracle, MocbenchEvalMatchesTheNumpyForwardOnTheGgufPackagesFile) {
  const auto seed = moc::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string file = tiny_gguf(seed), mine = path("mocbench.npy"), ref = path("numpy.npy");
  if (file.empty()) return;
  std::mt19937 rng(seed);
  std::string ids;
  for (int i = 0; i < 40; ++i) {  // ids of the file's vocabulary (160)
    if (i) ids += ' ';
    ids += std::to_string(rng() % 160);
  }
  const auto ours = shell(std::string(MOCBENCH_BIN) + " eval " + file + " --ids '" + ids + "' --format json --logits " + mine);
  ASSERT_EQ(ours.code, 0) << ours.out;
  const auto theirs = shell(py + " " + src + "/tests/oracle/llama_gguf_ref.py " + file + " " + ids + " --logits " + ref);
  ASSERT_EQ(theirs.code, 0) << theirs.out;
  const double loss = nlohmann::json::parse(ours.out)["loss"].get<double>(), want = std::stod(theirs.out);
  EXPECT_NEAR(loss, want, 1e-5 * want);
  const auto cmp = shell(py + " -c \"import numpy as np; a = np.load('" + mine + "').astype(np.float64); b = np.load('" +
                         ref + "'); print(a.shape == b.shape, float(np.abs(a - b).max() / np.abs(b).max()))\"");
  ASSERT_EQ(cmp.code, 0) << cmp.out;
  EXPECT_EQ(cmp.out.substr(0, 4), "True") << "logits of every position: " << cmp.out;
  EXPECT_LT(std::stod(cmp.out.substr(5)), 1e-5) << "largest logit difference, relative to the largest logit";
}

// `mocbench generate` (the decode path: prefill, then one step at a time through the KV cache) picks the same
// greedy tokens as the NumPy forward run again over the whole sequence for each token, where the best and
// second-best logits are apart enough for fp32 to order them the same (here: by more than 1e-3).
TEST_F(GgufOracle, GenerateMatchesTheNumpyGreedyTokens) {
  const auto seed = moc::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string file = tiny_gguf(seed);
  if (file.empty()) return;
  std::mt19937 rng(seed);
  std::string ids;
  for (int i = 0; i < 6; ++i) {
    if (i) ids += ' ';
    ids += std::to_string(rng() % 160);
  }
  const auto ours = shell(std::string(MOCBENCH_BIN) + " generate " + file + " --ids '" + ids + "' -n 12 --format json");
  ASSERT_EQ(ours.code, 0) << ours.out;
  const auto theirs = shell(py + " " + src + "/tests/oracle/llama_gguf_ref.py " + file + " " + ids + " --greedy 12");
  ASSERT_EQ(theirs.code, 0) << theirs.out;
  std::istringstream in(theirs.out);
  std::vector<std::int64_t> want(12);
  for (auto& x : want) in >> x;
  double gap = 0;
  in >> gap;
  const auto got = nlohmann::json::parse(ours.out)["ids"].get<std::vector<std::int64_t>>();
  if (gap <= 1e-3) GTEST_SKIP() << "two logits within " << gap << ": fp32 may order them either way";
  EXPECT_EQ(got, want);
}

// eval --analyze: the gate analysis of a checkpoint at MoC's K, written as JSON: a layer per block, each
// histogram a distribution, B = 1's union the K channels one token keeps; a dense run is refused (no K).
TEST_F(GgufOracle, EvalAnalyzeWritesTheGateAnalysisAtTheSelectionsK) {
  const std::string file = tiny_gguf(7), out = path("analysis.json");
  if (file.empty()) return;
  std::string ids;
  for (int i = 0; i < 100; ++i) ids += std::to_string(i) + ' ';
  const std::string eval = std::string(MOCBENCH_BIN) + " eval " + file + " --ids '" + ids + "' --window 25";
  const auto dense = shell(eval + " --analyze " + out);
  EXPECT_EQ(dense.code, 2) << dense.out;
  EXPECT_NE(dense.out.find("--ffn moc --k K"), std::string::npos) << dense.out;
  const auto r = shell(eval + " --ffn moc --k 24 --analyze " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(out);
  const auto a = nlohmann::json::parse(f);
  EXPECT_EQ(a["kept"], 24);
  EXPECT_EQ(a["d_ffn"], 96);
  EXPECT_EQ(a["sequences"], 4);
  ASSERT_EQ(a["layers"].size(), 2u);
  ASSERT_EQ(a["union_mean"].size(), 4u);
  EXPECT_NEAR(a["union_mean"][0].get<double>(), 24.0, 1e-9);
  for (const auto& L : a["layers"]) {
    double sum = 0;
    for (double d : L["post"]["density"]) sum += d;
    EXPECT_NEAR(sum, 1.0, 1e-9);
    EXPECT_GE(L["overlap_mean"].get<double>(), 0.0);
    EXPECT_LE(L["overlap_mean"].get<double>(), 1.0);
  }
}
