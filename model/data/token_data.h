// A corpus made ready for training: its documents split into training and validation (whole documents, by
// seed), a tokenizer trained on the training documents, and both splits encoded once into token files
// (each document followed by the end-of-sequence id). Everything is cached under a directory keyed by a
// hash of the corpus's bytes and the settings, so the second run of a scenario starts at once and every
// run of one key sees the same tokens.
//
// Token file: "MOCTOKv1", u32 bytes per token (2 or 4), u32 vocabulary, u64 tokens, u64 documents (all
// little-endian), then the tokens. Read through a memory map (TokenFile).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "model/data/corpus.h"

namespace moc::data {

struct DataSpec {
  std::string corpus;          // a named corpus or a path (resolve_corpus)
  int vocab = 32000;           // the tokenizer's vocabulary: the model's
  double val_fraction = 0.05;  // documents held out for validation
  std::uint64_t seed = 0;      // the split and the tokenizer's sampling
  std::string cache_root;      // "": $MOCBENCH_DATA_CACHE, else .local/data under the working directory
};

struct PreparedData {
  std::string dir;              // the cache directory of this key
  std::string key;              // 16 hex digits
  std::string tokenizer_model;  // SentencePiece model file
  std::string train_tokens, val_tokens;
  std::string corpus_name, licence;
  std::int64_t train_token_count = 0, val_token_count = 0;
  int train_docs = 0, val_docs = 0;
  std::vector<std::string> val_doc_names;
  int tokenizer_vocab = 0;      // pieces the tokenizer has (<= DataSpec::vocab)
  bool from_cache = false;
};

std::string default_cache_root();
// Builds (or finds) the cache entry. log, when given, gets one line per step that does work.
PreparedData prepare_data(const DataSpec& spec, std::ostream* log = nullptr);

// Writes a token file (atomically: a temporary then a rename).
void write_token_file(const std::string& path, const std::vector<std::int32_t>& tokens, int vocab, int documents);

// A token file, memory-mapped.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);  // throws DataError for a missing or malformed file
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  std::int64_t size() const { return count_; }
  int vocab() const { return vocab_; }
  int documents() const { return docs_; }
  std::int32_t operator[](std::int64_t i) const {
    return width_ == 2 ? static_cast<std::int32_t>(static_cast<const std::uint16_t*>(data_)[i])
                       : static_cast<std::int32_t>(static_cast<const std::uint32_t*>(data_)[i]);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const void* data_ = nullptr;
  std::int64_t count_ = 0;
  int width_ = 2, vocab_ = 0, docs_ = 0;
};

// Batches of seq-token windows from a token file, with next-token targets. Windows are the file cut into
// consecutive pieces of seq + 1 tokens overlapping by one (window w: tokens [w*seq, w*seq + seq], input the
// first seq, targets the last seq). Training batches walk a seeded permutation of the windows, a new one
// each epoch; batch i is a pure function of (file, seq, seed, i), so a resumed run continues the same
// sequence. Validation reads windows in order.
class WindowLoader {
 public:
  WindowLoader(const TokenFile& file, int seq, std::uint64_t seed);
  std::int64_t windows() const { return windows_; }
  int seq() const { return seq_; }
  // The training batch number `index` (0-based): batch windows, tokens and targets [batch * seq] each.
  void batch(std::int64_t index, int batch, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets);
  // Which windows batch `index` holds (tests).
  std::vector<std::int64_t> batch_windows(std::int64_t index, int batch);
  // Window w in order (validation), appended.
  void window(std::int64_t w, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) const;
  std::int64_t epoch_of(std::int64_t index, int batch) const { return index * batch / windows_; }

 private:
  const std::vector<std::int64_t>& order(std::int64_t epoch);
  const TokenFile* file_;
  int seq_;
  std::uint64_t seed_;
  std::int64_t windows_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::int64_t> perm_;
};

}  // namespace moc::data
