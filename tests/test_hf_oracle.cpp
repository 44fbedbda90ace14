// Issue #29's oracle for Hugging Face folders, without torch: random Llama (tied head), Qwen3 and Mixtral folders
// written by tests/oracle/make_tiny_hf.py (NumPy, save_pretrained's layout), evaluated by `mocbench eval` and
// by an independent float64 NumPy forward with transformers' semantics (tests/oracle/llama_hf_ref.py: x W^T,
// rotate_half RoPE, Qwen3's q/k norms, Mixtral's router); and mocbench's own writer checked the same way: a
// GGUF converted by `mocbench convert` gives the NumPy HF forward the logits the NumPy GGUF forward gives the
// original file (both references independent of mocbench). Needs Debian's python3 with numpy (the GGUF part:
// and the gguf wheel); skipped, saying so, without them.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/shell_util.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using moc::test::shell;

namespace {

class HfOracle : public moc::test::ScratchDirTest {
 protected:
  const std::string src = MOCBENCH_SOURCE_DIR;
  const std::string py = "PYTHONPATH=" + src + "/.local/gguf-py/site /usr/bin/python3";
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (shell(py + " -c 'import numpy'").code != 0) GTEST_SKIP() << "no Debian python3 with numpy: run scripts/setup.sh";
  }
  std::string ids(std::mt19937& rng, int n) const {
    std::string s;
    for (int i = 0; i < n; ++i) {  // ids of the fixtures' vocabulary (160)
      if (i) s.push_back(' ');
      s.append(std::to_string(rng() % 160));
    }
    return s;
  }
  // Largest |a - b| over the largest |b|, and whether the shapes agree, of two .npy files.
  std::pair<bool, double> compare(const std::string& a, const std::string& b) const {
    const auto r = shell(py + " -c \"import numpy as np; a = np.load('" + a + "').astype(np.float64); b = np.load('" + b +
                         "').astype(np.float64); print(a.shape == b.shape, float(np.abs(a - b).max() / np.abs(b).max()))\"");
    EXPECT_EQ(r.code, 0) << r.out;
    if (r.code != 0) return {false, 1.0};
    return {r.out.substr(0, 4) == "True", std::stod(r.out.substr(5))};
  }
};

}  // namespace

TEST_F(HfOracle, MocbenchEvalMatchesTheNumpyForwardOnLlamaQwen3AndMixtralFolders) {
  const auto seed = moc::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (std::string arch : {"llama", "qwen3", "mixtral"}) {
    SCOPED_TRACE(arch);
    const std::string dir = path(arch), mine = path(arch + ".mocbench.npy"), ref = path(arch + ".numpy.npy");
    const auto made = shell(py + " " + src + "/tests/oracle/make_tiny_hf.py " + dir + " " + arch + " " +
                            std::to_string(rng()) + (arch == "llama" ? " --tied" : ""));
    ASSERT_EQ(made.code, 0) << made.out;
    const std::string tokens = ids(rng, 24);
    const auto ours =
        shell(std::string(MOCBENCH_BIN) + " eval " + dir + " --ids '" + tokens + "' --format json --logits " + mine);
    ASSERT_EQ(ours.code, 0) << ours.out;
    const auto theirs = shell(py + " " + src + "/tests/oracle/llama_hf_ref.py " + dir + " " + tokens + " --logits " + ref);
    ASSERT_EQ(theirs.code, 0) << theirs.out;
    const double loss = nlohmann::json::parse(ours.out)["loss"].get<double>(), want = std::stod(theirs.out);
    EXPECT_NEAR(loss, want, 1e-5 * want);
    const auto [same_shape, rel] = compare(mine, ref);
    EXPECT_TRUE(same_shape);
    EXPECT_LT(rel, 1e-5) << "largest logit difference, relative to the largest logit";
  }
}

TEST_F(HfOracle, AFolderMocbenchWritesGivesTheNumpyHfForwardTheGgufForwardsLogits) {
  if (!fs::exists(src + "/.local/gguf-py/site/gguf") || shell(py + " -c 'import gguf'").code != 0)
    GTEST_SKIP() << "no gguf wheel: run scripts/setup.sh";
  const auto seed = moc::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string file = path("tiny.gguf"), dir = path("hf"), a = path("gguf.npy"), b = path("hf.npy");
  const auto made = shell(py + " " + src + "/tests/oracle/make_tiny_gguf.py " + file + " " + std::to_string(seed));
  ASSERT_EQ(made.code, 0) << made.out;
  const auto conv = shell(std::string(MOCBENCH_BIN) + " convert " + file + " " + dir);
  ASSERT_EQ(conv.code, 0) << conv.out;
  const std::string tokens = ids(rng, 24);
  ASSERT_EQ(shell(py + " " + src + "/tests/oracle/llama_gguf_ref.py " + file + " " + tokens + " --logits " + a).code, 0);
  ASSERT_EQ(shell(py + " " + src + "/tests/oracle/llama_hf_ref.py " + dir + " " + tokens + " --logits " + b).code, 0);
  const auto [same_shape, rel] = compare(b, a);
  EXPECT_TRUE(same_shape);
  EXPECT_LT(rel, 1e-6) << "the folder's weights are the GGUF's (f32, transposed, q/k un-permuted)";
  // And as bf16: within bf16 rounding of the weights.
  ASSERT_EQ(shell(std::string(MOCBENCH_BIN) + " convert " + file + " " + dir + "16 --dtype bf16").code, 0);
  ASSERT_EQ(shell(py + " " + src + "/tests/oracle/llama_hf_ref.py " + dir + "16 " + tokens + " --logits " + b).code, 0);
  const auto [same16, rel16] = compare(b, a);
  EXPECT_TRUE(same16);
  EXPECT_LT(rel16, 3e-2);
}

TEST_F(HfOracle, EvalOnABadFolderExitsTwoNamingTheProblem) {
  const std::string dir = path("bad");
  ASSERT_EQ(shell(py + " " + src + "/tests/oracle/make_tiny_hf.py " + dir + " llama 1").code, 0);
  write("bad/config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 160, "rope_scaling": {"type": "yarn"}})");
  const auto r = shell(std::string(MOCBENCH_BIN) + " eval " + dir + " --ids '1 2 3'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("rope_scaling"), std::string::npos) << r.out;
  fs::remove(path("bad/config.json"));
  const auto none = shell(std::string(MOCBENCH_BIN) + " eval " + dir + " --ids '1 2 3'");
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_NE(none.out.find("without config.json"), std::string::npos) << none.out;
}
