#include "model/data/corpus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace moc::data {

namespace fs = std::filesystem;

std::vector<CorpusSource> named_corpora() {
  return {
      // The reStructuredText sources of the Python 3.11 documentation (tutorial, library reference, HOWTOs,
      // language reference): ~11 MB of English prose with code, under the PSF licence.
      {"python3.11-doc", "/usr/share/doc/python3.11/html/_sources", ".txt", "python3.11-doc",
       "PSF-2.0 (Python Software Foundation License)"},
  };
}

CorpusSource resolve_corpus(const std::string& spec) {
  for (const auto& c : named_corpora()) {
    if (c.name != spec) continue;
    std::error_code ec;
    if (!fs::is_directory(c.root, ec))
      throw DataError("corpus '" + spec + "': " + c.root + " is missing; install the Debian package " + c.package +
                      " (scripts/setup.sh does)");
    return c;
  }
  std::error_code ec;
  if (fs::is_directory(spec, ec) || fs::is_regular_file(spec, ec)) return {spec, spec, "", "", ""};
  std::string names;
  for (const auto& c : named_corpora()) names += (names.empty() ? "" : ", ") + c.name;
  throw DataError("corpus '" + spec + "' is neither a known corpus (" + names + ") nor a directory or file");
}

namespace {
std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw DataError("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

std::vector<Document> read_corpus(const CorpusSource& src) {
  std::vector<Document> docs;
  std::error_code ec;
  if (fs::is_regular_file(src.root, ec)) {
    docs.push_back({fs::path(src.root).filename().string(), read_file(src.root)});
  } else {
    for (auto it = fs::recursive_directory_iterator(src.root, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      const std::string name = fs::relative(it->path(), src.root).generic_string();
      if (!src.suffix.empty() && (name.size() < src.suffix.size() ||
                                  name.compare(name.size() - src.suffix.size(), src.suffix.size(), src.suffix) != 0))
        continue;
      Document d{name, read_file(it->path())};
      if (!d.text.empty()) docs.push_back(std::move(d));
    }
    if (ec) throw DataError("corpus '" + src.name + "': cannot list " + src.root + ": " + ec.message());
  }
  std::sort(docs.begin(), docs.end(), [](const Document& a, const Document& b) { return a.name < b.name; });
  docs.erase(std::remove_if(docs.begin(), docs.end(), [](const Document& d) { return d.text.empty(); }), docs.end());
  if (docs.empty()) throw DataError("corpus '" + src.name + "': no non-empty documents under " + src.root);
  return docs;
}

std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

namespace {
std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<std::int64_t> seeded_permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  std::uint64_t s = seed;
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(splitmix64(s) % static_cast<std::uint64_t>(i + 1));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

std::vector<std::size_t> validation_documents(std::size_t n_docs, double val_fraction, std::uint64_t seed) {
  if (n_docs < 2 || val_fraction <= 0) return {};
  auto n_val = static_cast<std::size_t>(std::llround(val_fraction * static_cast<double>(n_docs)));
  n_val = std::clamp<std::size_t>(n_val, 1, n_docs - 1);
  const auto perm = seeded_permutation(static_cast<std::int64_t>(n_docs), seed ^ 0x76616c6964617465ull);
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n_val; ++i) out.push_back(static_cast<std::size_t>(perm[i]));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace moc::data
