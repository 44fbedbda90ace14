#include "model/data/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "model/data/tokenizer.h"

namespace moc::data {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'M', 'O', 'C', 'T', 'O', 'K', 'v', '1'};
constexpr std::size_t kHeader = 32;
// Bumped whenever the tokenizer settings or the file layout change: old cache entries are then not reused.
constexpr const char* kFormat = "mocbench-data-3";

void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_');
  while (!out.empty() && (out.front() == '_' || out.front() == '.')) out.erase(out.begin());
  if (out.size() > 40) out = out.substr(out.size() - 40);
  return out.empty() ? "corpus" : out;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out.flush()) throw DataError("cannot write " + p.string());
}

}  // namespace

std::string default_cache_root() {
  if (const char* e = std::getenv("MOCBENCH_DATA_CACHE"); e != nullptr && *e) return e;
  return ".local/data";
}

void write_token_file(const std::string& path, const std::vector<std::int32_t>& tokens, int vocab, int documents) {
  const int width = vocab <= 65536 ? 2 : 4;
  std::string head(kMagic, 8);
  put_u32(head, static_cast<std::uint32_t>(width));
  put_u32(head, static_cast<std::uint32_t>(vocab));
  put_u64(head, tokens.size());
  put_u64(head, static_cast<std::uint64_t>(documents));
  std::string body(tokens.size() * static_cast<std::size_t>(width), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<std::uint32_t>(tokens[i]);
    if (tokens[i] < 0 || v >= static_cast<std::uint32_t>(vocab))
      throw DataError(path + ": token " + std::to_string(tokens[i]) + " outside the vocabulary of " + std::to_string(vocab));
    for (int b = 0; b < width; ++b) body[i * static_cast<std::size_t>(width) + static_cast<std::size_t>(b)] =
        static_cast<char>((v >> (8 * b)) & 0xff);
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
    if (!out.flush()) throw DataError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw DataError("cannot rename " + tmp + " to " + path + ": " + ec.message());
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path + ": cannot open the token file: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeader)) {
    ::close(fd);
    throw DataError(path + ": not a token file (shorter than its 32-byte header)");
  }
  map_bytes_ = static_cast<std::size_t>(st.st_size);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw DataError(path + ": cannot map the token file: " + std::strerror(errno));
  }
  const auto* p = static_cast<const unsigned char*>(map_);
  auto fail = [&](const std::string& why) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw DataError(path + ": " + why);
  };
  if (std::memcmp(p, kMagic, 8) != 0) fail("not a token file (no MOCTOKv1 magic)");
  width_ = static_cast<int>(get_le(p + 8, 4));
  vocab_ = static_cast<int>(get_le(p + 12, 4));
  count_ = static_cast<std::int64_t>(get_le(p + 16, 8));
  docs_ = static_cast<int>(get_le(p + 24, 8));
  if (width_ != 2 && width_ != 4) fail("token width " + std::to_string(width_) + " is neither 2 nor 4");
  if (count_ < 0 || kHeader + static_cast<std::size_t>(count_) * static_cast<std::size_t>(width_) != map_bytes_)
    fail("the header's " + std::to_string(count_) + " tokens do not match the file's size (truncated?)");
  data_ = p + kHeader;
  ::madvise(map_, map_bytes_, MADV_RANDOM);
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

WindowLoader::WindowLoader(const TokenFile& file, int seq, std::uint64_t seed)
    : file_(&file), seq_(seq), seed_(seed), windows_(seq > 0 ? (file.size() - 1) / seq : 0) {
  if (seq <= 0) throw DataError("window loader: seq must be positive");
  if (windows_ <= 0)
    throw DataError(file.path() + ": " + std::to_string(file.size()) + " tokens hold no window of " +
                    std::to_string(seq + 1) + "; use a shorter seq or a larger corpus");
}

const std::vector<std::int64_t>& WindowLoader::order(std::int64_t epoch) {
  if (epoch != cached_epoch_) {
    perm_ = seeded_permutation(windows_, seed_ * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(epoch) + 1);
    cached_epoch_ = epoch;
  }
  return perm_;
}

std::vector<std::int64_t> WindowLoader::batch_windows(std::int64_t index, int batch) {
  std::vector<std::int64_t> out;
  for (int r = 0; r < batch; ++r) {
    const std::int64_t p = index * batch + r;
    out.push_back(order(p / windows_)[static_cast<std::size_t>(p % windows_)]);
  }
  return out;
}

void WindowLoader::window(std::int64_t w, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) const {
  const std::int64_t start = w * seq_;
  for (int i = 0; i < seq_; ++i) {
    tokens.push_back((*file_)[start + i]);
    targets.push_back((*file_)[start + i + 1]);
  }
}

void WindowLoader::batch(std::int64_t index, int batch, std::vector<std::int32_t>& tokens,
                         std::vector<std::int32_t>& targets) {
  tokens.clear();
  targets.clear();
  for (std::int64_t w : batch_windows(index, batch)) window(w, tokens, targets);
}

PreparedData prepare_data(const DataSpec& spec, std::ostream* log) {
  const CorpusSource src = resolve_corpus(spec.corpus);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const std::vector<Document> docs = read_corpus(src);
  std::uint64_t h = fnv1a(kFormat, std::strlen(kFormat));
  for (const auto& d : docs) {
    h = fnv1a(d.name.data(), d.name.size(), h);
    h = fnv1a("\0", 1, h);
    h = fnv1a(d.text.data(), d.text.size(), h);
  }
  std::ostringstream settings;
  settings << "vocab=" << spec.vocab << ";val=" << spec.val_fraction << ";seed=" << spec.seed;
  h = fnv1a(settings.str().data(), settings.str().size(), h);

  PreparedData out;
  out.key = hex16(h);
  out.corpus_name = src.name;
  out.licence = src.licence;
  const fs::path root = spec.cache_root.empty() ? default_cache_root() : spec.cache_root;
  const std::string label = src.package.empty() ? fs::path(src.root).lexically_normal().filename().string() : src.name;
  const fs::path dir = root / (sanitize(label) + "-v" + std::to_string(spec.vocab) + "-" + out.key);
  out.dir = dir.string();
  out.tokenizer_model = (dir / "tokenizer.model").string();
  out.train_tokens = (dir / "train.tok").string();
  out.val_tokens = (dir / "val.tok").string();

  const auto val_idx = validation_documents(docs.size(), spec.val_fraction, spec.seed);
  std::vector<char> is_val(docs.size(), 0);
  for (auto i : val_idx) is_val[i] = 1;
  std::vector<const Document*> train_docs, val_docs;
  for (std::size_t i = 0; i < docs.size(); ++i) (is_val[i] ? val_docs : train_docs).push_back(&docs[i]);
  out.train_docs = static_cast<int>(train_docs.size());
  out.val_docs = static_cast<int>(val_docs.size());
  for (const auto* d : val_docs) out.val_doc_names.push_back(d->name);

  std::error_code ec;
  if (!fs::exists(dir / "meta.json", ec)) {
    fs::create_directories(root, ec);
    const fs::path tmp = root / (dir.filename().string() + ".tmp." + std::to_string(::getpid()));
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) throw DataError("cannot create " + tmp.string() + ": " + ec.message());
    if (log) *log << "data: training a " << spec.vocab << "-piece BPE tokenizer on " << train_docs.size()
                  << " documents of " << src.name << " ...\n" << std::flush;
    TokenizerSettings ts;
    ts.vocab = spec.vocab;
    ts.seed = spec.seed;
    Tokenizer::train(train_docs, ts, (tmp / "tokenizer.model").string());
    const Tokenizer tok = Tokenizer::load((tmp / "tokenizer.model").string());
    auto encode = [&](const std::vector<const Document*>& ds, const fs::path& path) {
      std::vector<std::int32_t> ids;
      for (const auto* d : ds) {
        for (int id : tok.encode(d->text)) ids.push_back(id);
        ids.push_back(tok.eos_id());
      }
      write_token_file(path.string(), ids, spec.vocab, static_cast<int>(ds.size()));
      return static_cast<std::int64_t>(ids.size());
    };
    const auto n_train = encode(train_docs, tmp / "train.tok");
    const auto n_val = encode(val_docs, tmp / "val.tok");
    const nlohmann::ordered_json meta{{"format", kFormat},
                                      {"corpus", src.name},
                                      {"root", src.root},
                                      {"licence", src.licence},
                                      {"vocab", spec.vocab},
                                      {"tokenizer_pieces", tok.vocab_size()},
                                      {"val_fraction", spec.val_fraction},
                                      {"seed", spec.seed},
                                      {"train_docs", train_docs.size()},
                                      {"val_docs", val_docs.size()},
                                      {"train_tokens", n_train},
                                      {"val_tokens", n_val}};
    write_text(tmp / "meta.json", meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    fs::rename(tmp, dir, ec);
    if (ec) {  // another process made the same entry meanwhile: use theirs
      fs::remove_all(tmp, ec);
      if (!fs::exists(dir / "meta.json")) throw DataError("cannot create the data cache entry " + dir.string());
    }
    if (log) *log << "data: " << n_train << " training and " << n_val << " validation tokens in " << dir.string()
                  << " (" << static_cast<int>(seconds()) << " s)\n" << std::flush;
  } else {
    out.from_cache = true;
  }
  const TokenFile tr(out.train_tokens), va(out.val_tokens);
  out.train_token_count = tr.size();
  out.val_token_count = va.size();
  out.tokenizer_vocab = Tokenizer::load(out.tokenizer_model).vocab_size();
  return out;
}

}  // namespace moc::data
