#include "model/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <thread>
#include <unordered_map>

namespace moc::data {

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

namespace {

// Feeds SentencePiece's trainer the documents' non-empty lines (it trains on lines; a newline is a
// user-defined piece, so encoding whole documents keeps them).
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<const Document*>& docs) : docs_(docs) { advance(); }
  bool done() const override { return doc_ >= docs_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (doc_ < docs_.size()) {
      const std::string& t = docs_[doc_]->text;
      if (pos_ >= t.size()) {
        ++doc_;
        pos_ = 0;
        continue;
      }
      std::size_t end = t.find('\n', pos_);
      if (end == std::string::npos) end = t.size();
      line_.assign(t, pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
  }
  const std::vector<const Document*>& docs_;
  std::size_t doc_ = 0, pos_ = 0;
  std::string line_;
};

}  // namespace

void Tokenizer::train(const std::vector<const Document*>& docs, const TokenizerSettings& s,
                      const std::string& model_path) {
  if (s.vocab < kMinVocab)
    throw DataError("tokenizer: vocab " + std::to_string(s.vocab) + " is below " + std::to_string(kMinVocab) +
                    " (3 specials, 256 byte pieces and some merges); set [model] vocab higher");
  std::string prefix = model_path;
  if (prefix.size() > 6 && prefix.compare(prefix.size() - 6, 6, ".model") == 0) prefix.resize(prefix.size() - 6);
  const int threads = s.threads > 0 ? s.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", prefix},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(s.vocab)},
      {"character_coverage", "0.9995"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"user_defined_symbols", "\n"},
      {"input_sentence_size", std::to_string(s.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},
      {"unk_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"pad_id", "-1"},
      // Lets a small corpus train a vocabulary larger than its natural number of merges.
      {"hard_vocab_limit", "false"},
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(s.seed ^ (s.seed >> 32)));
  LineIterator lines(docs);
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines);
  if (!st.ok()) throw DataError("tokenizer: SentencePiece training failed: " + st.ToString());
}

Tokenizer Tokenizer::load(const std::string& model_path) {
  Tokenizer t;
  const auto st = t.impl_->sp.Load(model_path);
  if (!st.ok()) throw DataError("tokenizer: cannot load " + model_path + ": " + st.ToString());
  return t;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto st = impl_->sp.Encode(text, &ids);
  if (!st.ok()) throw DataError("tokenizer: encoding failed: " + st.ToString());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  const auto st = impl_->sp.Decode(ids, &out);
  if (!st.ok()) throw DataError("tokenizer: decoding failed: " + st.ToString());
  return out;
}

int Tokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
int Tokenizer::eos_id() const { return impl_->sp.eos_id(); }

}  // namespace moc::data
