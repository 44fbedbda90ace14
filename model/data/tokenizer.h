// The tokenizer: SentencePiece BPE (Debian's libsentencepiece), trained on a corpus's training documents
// with settings that round-trip any text: no normalization, whitespace kept as is, newlines a piece of their
// own, unknown characters as UTF-8 bytes (byte fallback). ids: 0 unk, 1 bos, 2 eos, then pieces and bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/data/corpus.h"

namespace moc::data {

// The smallest vocabulary the settings allow: 3 specials, 256 byte pieces, the newline and some merges.
inline constexpr int kMinVocab = 320;

struct TokenizerSettings {
  int vocab = 32000;
  std::uint64_t seed = 0;
  std::size_t max_sentences = 2'000'000;  // lines sampled for training (SentencePiece's input_sentence_size)
  int threads = 0;                        // 0: hardware concurrency
};

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Trains on the documents' lines and writes the model to model_path. Throws DataError.
  static void train(const std::vector<const Document*>& docs, const TokenizerSettings& s, const std::string& model_path);
  static Tokenizer load(const std::string& model_path);

  std::vector<int> encode(std::string_view text) const;
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int eos_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moc::data
