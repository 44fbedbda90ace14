// Text corpora for training on real text: a named corpus that a Debian package installs (scripts/setup.sh),
// or any directory of text files. A corpus is a list of documents (files, in path order); the validation
// split holds out whole documents, chosen by a seed.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace moc::data {

// A corpus that cannot be used: missing, empty, unreadable. what() says what to do.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CorpusSource {
  std::string name;     // "python3.11-doc", or the directory as given
  std::string root;     // directory searched recursively (or a single file)
  std::string suffix;   // only files whose name ends so ("" = every regular file)
  std::string package;  // the Debian package that installs it ("" for a directory)
  std::string licence;  // of the text, for the record
};

struct Document {
  std::string name;  // path relative to the corpus root
  std::string text;
};

// The named corpora mocbench knows (`[data] corpus = "<name>"`).
std::vector<CorpusSource> named_corpora();
// A name from named_corpora(), or a path to a directory / file. Throws DataError naming the package to
// install (scripts/setup.sh does) when a named corpus is absent.
CorpusSource resolve_corpus(const std::string& spec);
// Every document of the corpus, sorted by name. Empty documents are skipped. Throws DataError when there
// are none.
std::vector<Document> read_corpus(const CorpusSource& src);

// The documents held out for validation: a seeded permutation of the document indices, of which the first
// round(val_fraction * n) (at least 1 and at most n - 1 when n >= 2) are validation. Sorted indices.
std::vector<std::size_t> validation_documents(std::size_t n_docs, double val_fraction, std::uint64_t seed);

// FNV-1a 64 (cache keys).
std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull);
std::string hex16(std::uint64_t v);

// A deterministic permutation of 0..n-1 from a seed (Fisher-Yates over splitmix64: the same on every
// platform and standard library, unlike std::shuffle).
std::vector<std::int64_t> seeded_permutation(std::int64_t n, std::uint64_t seed);

}  // namespace moc::data
