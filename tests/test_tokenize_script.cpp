// scripts/tokenize_gguf.py (text -> a model's token ids for `mocbench eval --tokens`) on a Hugging Face folder: a
// small byte-level BPE trained here by `tokenizers` and saved as tokenizer.json; the script's ids are that
// tokenizer's encoding of each file followed by config.json's eos_token_id, cut at --max-tokens; and they
// decode back to the text. Needs Debian's python3 and the pinned `tokenizers` wheel (scripts/setup.sh unpacks it
// into .local/tokenizers-py, scripts/setup_tokenizers_py.sh); skipped, saying so, without it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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
