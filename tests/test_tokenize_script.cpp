// scripts/tokenize_gguf.py (text -> a model's token ids for `mocbench eval --tokens`) on a Hugging Face folder: a
// small byte-level BPE trained here by `tokenizers` and saved as tokenizer.json; the script's ids are that
// tokenizer's encoding of each file followed by config.json's eos_token_id, cut at --max-tokens; and they
// decode back to the text. Needs Debian's python3 and the pinned `tokenizers` wheel (scripts/setup.sh unpacks it
// into .local/tokenizers-py, scripts/setup_tokenizers_py.sh); skipped, saying so, without it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/hf_checkpoint.h"
#include "tests/shell_util.h"

namespace fs = std::filesystem;
using moc::test::shell;

namespace {

class TokenizeScript : public moc::test::ScratchDirTest {
 protected:
  const std::string src = MOCBENCH_SOURCE_DIR;
  const std::string py = "PYTHONPATH=" + src + "/.local/tokenizers-py/site /usr/bin/python3";
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (shell(py + " -c 'import tokenizers'").code != 0)
      GTEST_SKIP() << "no tokenizers wheel in .local/tokenizers-py: run scripts/setup.sh";
  }
};

}  // namespace

TEST_F(TokenizeScript, AFoldersTokenizerJsonEncodesEachFileThenItsEndOfText) {
  write("a.txt", "def main():\n    return 42  # the answer\n");
  write("b.txt", "Paris is the capital of France.\n");
  const std::string model = path("model");
  fs::create_directories(model);
  write("model/config.json", R"({"eos_token_id": 0})");
  write("train.py", R"(import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(sys.argv[2:], trainers.BpeTrainer(vocab_size=300, special_tokens=["<eot>"],
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.save(sys.argv[1] + "/tokenizer.json")
)");
  const auto trained = shell(py + " " + path("train.py") + " " + model + " " + path("a.txt") + " " + path("b.txt"));
  ASSERT_EQ(trained.code, 0) << trained.out;
  const auto run = shell(py + " " + src + "/scripts/tokenize_gguf.py " + model + " " + path("ids.txt") + " " +
                         path("a.txt") + " " + path("b.txt"));
  ASSERT_EQ(run.code, 0) << run.out;
  write("check.py", R"(import sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
got = [int(x) for x in open(sys.argv[2]).read().split()]
texts = [open(p).read() for p in sys.argv[3:]]
want = tok.encode(texts[0]).ids + [0] + tok.encode(texts[1]).ids + [0]
first = got[:got.index(0)]
print(got == want, tok.decode(first) == texts[0])
)");
  const auto check =
      shell(py + " " + path("check.py") + " " + model + " " + path("ids.txt") + " " + path("a.txt") + " " + path("b.txt"));
  ASSERT_EQ(check.code, 0) << check.out;
  EXPECT_EQ(check.out.substr(0, 9), "True True") << check.out;
  const auto cut = shell(py + " " + src + "/scripts/tokenize_gguf.py " + model + " " + path("cut.txt") + " " +
                         path("a.txt") + " " + path("b.txt") + " --max-tokens 5");
  ASSERT_EQ(cut.code, 0) << cut.out;
  const auto n = shell("wc -w < " + path("cut.txt"));
  EXPECT_EQ(std::stoi(n.out), 5);
}

// Text in, text out (scripts/generate_text.sh): a folder holding a tokenizer trained here and random weights of
// that vocabulary (save_hf_checkpoint); the script tokenizes the prompt without an end-of-text id, runs
// `mocbench generate` and decodes prompt + continuation: the output starts with the prompt. --decode alone
// turns ids back into the text they encode.
TEST_F(TokenizeScript, GenerateTextTokenizesThePromptGeneratesAndDecodes) {
  write("a.txt", "Paris is the capital of France. Rome is the capital of Italy.\n");
  const std::string model = path("model");
  fs::create_directories(model);
  write("train.py", R"(import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([sys.argv[2]], trainers.BpeTrainer(vocab_size=280, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.save(sys.argv[1] + "/tokenizer.json")
print(tok.get_vocab_size())
)");
  const auto trained = shell(py + " " + path("train.py") + " " + model + " " + path("a.txt"));
  ASSERT_EQ(trained.code, 0) << trained.out;
  {
    auto ops = moc::make_cpu_ops();
    moc::ModelConfig cfg = moc::preset("tiny");
    cfg.vocab = std::stoi(trained.out);
    moc::Transformer m(*ops, cfg);
    moc::save_hf_checkpoint(model, m);
  }
  const auto dec = shell(py + " " + src + "/scripts/tokenize_gguf.py " + model + " " + path("ids.txt") + " " +
                         path("a.txt") + " --no-eos && " + py + " " + src + "/scripts/tokenize_gguf.py " + model +
                         " --decode \"$(cat " + path("ids.txt") + ")\"");
  ASSERT_EQ(dec.code, 0) << dec.out;
  EXPECT_EQ(dec.out, "Paris is the capital of France. Rome is the capital of Italy.\n");
  const auto gen = shell("MOCBENCH=" + std::string(MOCBENCH_BIN) + " " + src + "/scripts/generate_text.sh " + model +
                         " 'Paris is' -n 6");
  ASSERT_EQ(gen.code, 0) << gen.out;
  EXPECT_EQ(gen.out.rfind("Paris is", 0), 0u) << gen.out;
  EXPECT_GT(gen.out.size(), std::string("Paris is\n").size()) << "a continuation follows the prompt";
}
