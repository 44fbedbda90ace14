// Scenario keys, declared once (nvbench declares its axes once, typed): per section, each key's name, the
// rule its value must meet, an example for hints, its default and its documentation, and -- for [measure],
// [profile] and [data] -- how it applies to a point. The parser's key lists, its type checks and hints, the
// expansion that applies settings, `mocbench keys` and the key tables in scenarios/README.md all come from
// these tables; tests/test_scenario_keys.cpp checks the README against them and that every key of the three
// applied sections changes the expanded point (a documented key that does nothing -- `[measure] steps`
// once was -- fails it).
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moc {

struct ScenarioValue;
struct ScenarioPoint;

// What a value must be. Checked when the file is read, before any work.
enum class KeyRule {
  pos_int,
  nonneg_int,
  pos_number,
  nonneg_number,
  boolean,
  text,
  mode,
  device,
  preset,
  ffn,
  k,
  select,
  topk_backend,
  precision,
  dtype,
  decode_impl,
};

enum class KeySection { top, model, measure, profile, data, axes };

struct ScenarioKey {
  const char* name;
  KeyRule rule;
  const char* example;   // a value as written in TOML, for hints ("4", "\"moc_2:8\"")
  const char* fallback;  // the default as documented ("3", "(required)", "steps / 10")
  const char* doc;       // one line of documentation (a README table cell: markdown)
  // How a [measure], [profile] or [data] value applies to a point (nullptr in the other sections: model keys
  // go through moc::apply_override, axes through the expansion).
  void (*apply)(ScenarioPoint&, const ScenarioValue&) = nullptr;
};

std::span<const ScenarioKey> scenario_keys(KeySection s);
// The key of a section, or nullptr.
const ScenarioKey* find_scenario_key(KeySection s, std::string_view name);
std::vector<std::string> scenario_key_names(KeySection s);
std::string_view section_name(KeySection s);  // "top", "model", "measure", ...
// The section a name (as `mocbench keys` takes it) stands for; false when there is none.
bool parse_section(std::string_view name, KeySection* out);
inline constexpr KeySection kAllSections[] = {KeySection::top,     KeySection::model, KeySection::measure,
                                              KeySection::profile, KeySection::data,  KeySection::axes};

// A key removed from a section, refused with why and what to do instead.
struct RetiredKey {
  KeySection section;
  const char* name;
  const char* reason;
  const char* hint;
};
const RetiredKey* find_retired_key(KeySection s, std::string_view name);

// The section's key table as scenarios/README.md shows it (between <!-- keys:NAME --> and <!-- /keys -->),
// ending in a newline.
std::string key_table_markdown(KeySection s);

}  // namespace moc
