// libFuzzer target: the scenario parser (issue #16). Any bytes are either refused with a ScenarioError whose
// message names the file (what `mocbench run` prints as file:line:col), or accepted as a scenario that
// expands for both backends into valid, consecutively numbered points. Anything else -- another exception,
// a crash, a hang, a leak, an ASan or UBSan report -- is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "app/scenario/scenario.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_scenario: %s\n", what.c_str());
  std::abort();  // libFuzzer saves the input as a crash
}

constexpr const char* kPath = "fuzz.toml";
// FUZZ_VERBOSE=1 prints what became of each input (to check the seeds: `FUZZ_VERBOSE=1 fuzz_scenario FILE...`).
const bool kVerbose = std::getenv("FUZZ_VERBOSE") != nullptr;
// FUZZ_NO_SKIP=1 feeds through every input skipped below (replays tests/fuzz/crashes/).
const bool kNoSkip = std::getenv("FUZZ_NO_SKIP") != nullptr;

void check_expansion(const moc::Scenario& sc, const std::string& backend) {
  std::vector<moc::AppliedOverride> applied;
  std::vector<moc::ScenarioPoint> points;
  try {
    points = sc.expand(backend, &applied);
  } catch (const moc::ScenarioError& e) {
    // parse_scenario promises that both expansions were checked before it returned.
    finding("an accepted scenario does not expand for backend " + backend + ": " + e.what());
  }
  // No point at all is allowed (every point excluded): the format does not forbid it, `run` records an empty run.
  if (kVerbose) std::fprintf(stderr, "accepted: %zu points for %s\n", points.size(), backend.c_str());
  for (std::size_t i = 0; i < points.size(); ++i) {
    const moc::ScenarioPoint& p = points[i];
    if (p.index != static_cast<int>(i)) finding("points are not numbered 0..n-1 for backend " + backend);
    if (p.batch <= 0 || p.seq <= 0) finding("point " + std::to_string(i) + " has a batch or seq <= 0");
    (void)p.describe();  // the --dry-run line reads every resolved field
  }
}

// toml++ 3.3.0 (Debian 12's) reaches TOML_UNREACHABLE (__builtin_unreachable) in
// impl::is_non_ascii_horizontal_whitespace for most code points of U+00A1..U+0499, U+2D6E..U+3167 and
// U+FB26..U+FEFE where it asks "whitespace?" (e.g. a file that is just U+FDBF, or 'mode = "topk"' then a bare 'é'):
// undefined behaviour in the library, not in mocbench -- upstream marzer/tomlplusplus#190 and #295, fixed
// by #305 after 3.4.0 (tests/fuzz/README.md, tests/fuzz/crashes/). GCC's -O3 build happens to return
// "not whitespace" there (a clean TOML syntax error). Inputs holding such a code point are skipped, so
// that the fuzzer looks past it; every other UBSan report stays fatal.
bool tomlpp_unreachable_on(char32_t c) {
  if (c < 0xA0 || c > 0xFEFF) return false;
  const std::uint64_t child = (static_cast<std::uint64_t>(c) - 0xA0) / 0x3FA;
  if ((1ull << child) & 0x7FFFFFFFFFFFF75Eull) return false;
  if (c == 0xA0 || c == 0x3000 || c == 0xFEFF) return false;
  return child != 5 && child != 7;
}

// Decodes leniently (an ill-formed sequence is stepped over byte by byte): toml++ stops at the first one,
// so every code point it classifies is decoded here too.
bool holds_tomlpp_unreachable_code_point(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (n <= 1 || i + n > s.size()) {
      ++i;
      continue;
    }
    char32_t c = b & (0xFF >> (n + 1));
    bool ok = true;
    for (std::size_t j = 1; j < n && ok; ++j) {
      const auto cb = static_cast<unsigned char>(s[i + j]);
      ok = (cb & 0xC0) == 0x80;
      c = (c << 6) | (cb & 0x3F);
    }
    if (!ok) {
      ++i;
      continue;
    }
    if (tomlpp_unreachable_on(c)) return true;
    i += n;
  }
  return false;
}

// Speed, not safety: a sweep the parser accepts (up to moc::kMaxSweepPoints, 10,000 points) costs up to ~2 s per
// input under ASan (parse_scenario and this harness each expand it for both backends), so inputs whose product
// of axis lengths (overrides included) lies between this and that bound are skipped. Larger ones go through:
// the parser must refuse them before building them (tests/fuzz/seeds/scenario/sweep-640000-points.toml).
constexpr double kSkipSweepsOver = 2000;

double largest_sweep(std::string_view text) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(kPath));
  } catch (const toml::parse_error&) {
    return 0;  // the parser under test refuses it
  }
  const auto length = [](const toml::node& n) -> double {
    const toml::array* a = n.as_array();
    return a ? static_cast<double>(a->size()) : 1.0;
  };
  const toml::table* axes = root["axes"].as_table();
  if (!axes) return 1;
  double largest = 0;
  for (const char* backend : {"cpu", "cuda"}) {
    const toml::table* over = root["overrides"][backend]["axes"].as_table();
    double product = 1;
    for (auto&& [key, values] : *axes) {
      const toml::node* replaced = over ? over->get(key.str()) : nullptr;
      product *= length(replaced ? *replaced : values);
    }
    largest = std::max(largest, product);
  }
  return largest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
#if TOML_LIB_MAJOR == 3 && TOML_LIB_MINOR <= 4
  if (!kNoSkip && holds_tomlpp_unreachable_code_point(text)) {
    if (kVerbose)
      std::fprintf(stderr, "skipped: a code point toml++ %d.%d mishandles\n", TOML_LIB_MAJOR, TOML_LIB_MINOR);
    return -1;  // not added to the corpus
  }
#endif
  if (const double points = largest_sweep(text);
      !kNoSkip && points > kSkipSweepsOver && points <= static_cast<double>(moc::kMaxSweepPoints)) {
    if (kVerbose) std::fprintf(stderr, "skipped: %.0f points, a slow input\n", points);
    return -1;
  }
  moc::Scenario sc;
  try {
    sc = moc::parse_scenario(text, kPath);
  } catch (const moc::ScenarioError& e) {
    // A clean refusal: a message, and the file it is about, as file:line:col.
    if (e.message.empty()) finding("a ScenarioError without a message");
    if (e.file != kPath || std::string_view(e.what()).substr(0, e.file.size()) != kPath)
      finding(std::string("a ScenarioError that does not start with the file name: ") + e.what());
    if (e.line < 0 || e.col < 0) finding(std::string("a ScenarioError with a negative position: ") + e.what());
    if (kVerbose) std::fprintf(stderr, "refused: %s\n", e.what());
    return 0;
  }
  // Anything else thrown by parse_scenario escapes: libFuzzer reports it as a crash (uncaught exception).
  if (sc.text != text) finding("the stored scenario text differs from the input");
  for (const std::string& backend : moc::scenario_backends()) check_expansion(sc, backend);
  return 0;
}
