// Reading a scenario file: TOML syntax, every table's keys and values checked against the key tables
// (scenario_keys.cpp), then every backend's expansion tried so that a file is refused before any work.
#include "app/scenario/scenario.h"

#include "app/scenario/scenario_detail.h"
#include "app/scenario/scenario_keys.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>
#include <unordered_set>

namespace moc {

using namespace scenario_detail;

namespace {

// The tables of the top level (each has its own key table, app/scenario/scenario_keys.h).
const std::vector<std::string> kTopTables = {"model", "measure", "profile", "data", "axes", "exclude", "include", "overrides"};
const std::vector<std::string> kOverrideKeys = {"model", "measure", "data", "axes"};
const std::vector<std::string> kDevices = {"auto", "cpu", "cuda"};
const std::vector<std::string> kSelectRules = {"gate", "silu", "abs_silu"};
const std::vector<std::string> kTopkBackends = {"own", "raft"};
// One value left: "persistent" (the whole step as one cooperative kernel) was retired, slower than "kernels"
// at every measured point (bench/RESULTS.md); a file that still asks for it is refused with that reason.
const std::vector<std::string> kDecodeImpls = {"kernels"};
const std::vector<std::string> kPrecisions = {"bf16", "bf16-fp32master", "fp32"};
const std::vector<std::string> kDtypes = {"f32", "fp32", "bf16"};

std::vector<std::string> top_keys() {
  auto k = scenario_key_names(KeySection::top);
  k.insert(k.end(), kTopTables.begin(), kTopTables.end());
  return k;
}

// Keys [model] accepts: the preset, weights and everything apply_override understands (the key table lists
// them; a test checks it against moc::override_keys()).
std::vector<std::string> model_keys() { return scenario_key_names(KeySection::model); }

// Axis names: the study's own dimensions, then any model key (the selection rule is called
// topk_position here, as in the paper's ablation, so `select` is not a second name for it).
std::vector<std::string> axis_keys() {
  std::vector<std::string> k = scenario_key_names(KeySection::axes);
  for (auto& o : model_keys())
    if (!contains(k, o) && o != "select") k.push_back(o);
  return k;
}


std::size_t levenshtein(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The closest option to a misspelt word, or "" when nothing is close enough to be a plausible typo.
std::string nearest(std::string_view word, const std::vector<std::string>& options) {
  // Names that mean the same thing in another section.
  static const std::map<std::string, std::string, std::less<>> aliases = {{"select", "topk_position"},
                                                                          {"topk_position", "select"},
                                                                          {"ffn_decode", "ffn-decode"},
                                                                          {"ffn_train", "ffn-train"},
                                                                          {"gpu", "cuda"},
                                                                          {"batch_size", "batch"},
                                                                          {"seq_len", "seq"},
                                                                          {"seq", "seq_len"}};
  if (auto it = aliases.find(word); it != aliases.end() && contains(options, it->second)) return it->second;
  std::string best;
  std::size_t best_d = SIZE_MAX;
  for (const auto& o : options) {
    const std::size_t d = levenshtein(word, o);
    if (d < best_d) best_d = d, best = o;
  }
  if (best_d <= 2 || best_d * 3 <= word.size()) return best;
  return "";
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& options) {
  const std::string n = nearest(word, options);
  return n.empty() ? "" : "; did you mean '" + n + "'?";
}

SourcePos pos_of(const toml::source_region& r) {
  return {static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
}

std::string fnv1a_hex(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Shortest round-trip text that still reads as a float: apply_override tells a fractional k from an
// absolute one by the '.', so 1.0 must not become "1".
std::string float_text(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".ni") != std::string::npos) return s;  // has a point, or nan/inf
  auto e = s.find_first_of("eE");
  if (e == std::string::npos) return s + ".0";
  s.insert(e, ".0");
  return s;
}

// toml++ tables are ordered by key; scenarios are ordered by the file (axes order is the sweep order,
// and the first problem reported should be the first one in the file).
std::vector<std::pair<const toml::key*, const toml::node*>> ordered(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> out;
  for (auto&& [k, v] : t) out.emplace_back(&k, &v);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return out;
}

std::string describe_node(const toml::node& n) {
  if (auto s = n.as_string()) return "string \"" + s->get() + "\"";
  if (auto i = n.as_integer()) return "integer " + std::to_string(i->get());
  if (auto f = n.as_floating_point()) return "number " + float_text(f->get());
  if (auto b = n.as_boolean()) return std::string("boolean ") + (b->get() ? "true" : "false");
  if (n.is_array()) return "an array";
  if (n.is_table()) return "a table";
  return "a date/time";
}

// ffn = dense | moc | moc_a:b with 0 < a <= b.
void check_ffn(const std::string& file, const ScenarioValue& v, const std::string& in) {
  const std::string& s = v.s;
  if (s == "dense" || s == "moc") return;
  const auto colon = s.find(':');
  int a = 0, b = 0;
  bool ok = s.starts_with("moc_") && colon != std::string::npos;
  if (ok) {
    auto ra = std::from_chars(s.data() + 4, s.data() + colon, a);
    auto rb = std::from_chars(s.data() + colon + 1, s.data() + s.size(), b);
    ok = ra.ec == std::errc() && ra.ptr == s.data() + colon && rb.ec == std::errc() && rb.ptr == s.data() + s.size();
  }
  if (!ok)
    fail(file, v.pos, "unknown ffn '" + s + "'" + in + did_you_mean(s, {"dense", "moc", "moc_2:8"}),
         "ffn is dense, moc (row top-K) or moc_a:b (a kept out of every b channels), e.g. \"moc_2:8\"");
  if (a <= 0 || b <= 0)
    fail(file, v.pos, "ffn '" + s + "'" + in + ": a and b of moc_a:b must be positive",
         "a channels are kept out of every b, e.g. \"moc_2:8\"");
  if (a > b)
    fail(file, v.pos, "ffn '" + s + "'" + in + ": a > b keeps more channels than each group has",
         "a channels are kept out of every b: swap them, e.g. \"moc_" + std::to_string(b) + ":" + std::to_string(a) +
             "\"");
}

// Reads one scalar and checks it against its key's rule. `where` names the section for messages.
ScenarioValue read_value(const std::string& file, const toml::node& n, KeySection section, std::string_view key,
                         std::string_view where) {
  ScenarioValue v;
  v.pos = pos_of(n.source());
  using Rule = KeyRule;
  const Rule rule = key_spec(section, key).rule;
  // where: "[axes]", "[overrides.cpu].model", ... or "at the top level".
  const std::string k(key), in = (where.starts_with("[") ? " in " : " ") + std::string(where);
  const std::string hint = "e.g. " + example_of(section, key);
  auto wrong_type = [&](const std::string& expected) {
    fail(file, v.pos, k + in + ": expected " + expected + ", got " + describe_node(n), hint);
  };
  if (auto i = n.as_integer()) {
    v.type = ScenarioValue::Type::integer;
    v.i = i->get();
    v.f = static_cast<double>(v.i);
    v.text = std::to_string(v.i);
  } else if (auto f = n.as_floating_point()) {
    v.type = ScenarioValue::Type::floating;
    v.f = f->get();
    v.text = float_text(v.f);
  } else if (auto b = n.as_boolean()) {
    v.type = ScenarioValue::Type::boolean;
    v.b = b->get();
    v.text = v.b ? "true" : "false";
  } else if (auto s = n.as_string()) {
    v.type = ScenarioValue::Type::string;
    v.s = s->get();
    v.text = v.s;
  } else {
    wrong_type(n.is_array() ? "a single value here" : "a value");
  }
  using T = ScenarioValue::Type;
  auto one_of = [&](const std::vector<std::string>& options, const char* what) {
    if (v.type != T::string) wrong_type(std::string("a string (one of ") + join(options) + ")");
    if (!contains(options, v.s))
      fail(file, v.pos, "unknown " + std::string(what) + " '" + v.s + "'" + in + did_you_mean(v.s, options),
           std::string(what) + "s: " + join(options));
  };
  switch (rule) {
    case Rule::pos_int:
    case Rule::nonneg_int: {
      const bool pos = rule == Rule::pos_int;
      if (v.type != T::integer) wrong_type(pos ? "a positive integer" : "an integer >= 0");
      if (pos ? v.i <= 0 : v.i < 0)
        fail(file, v.pos, k + in + " must be " + (pos ? "positive" : ">= 0") + ", got " + v.text, hint);
      if (v.i > INT_MAX) fail(file, v.pos, k + in + " is too large: " + v.text, hint);
      break;
    }
    case Rule::pos_number:
      if (v.type != T::integer && v.type != T::floating) wrong_type("a positive number");
      if (!(v.f > 0) || !std::isfinite(v.f))
        fail(file, v.pos, k + in + " must be a positive number, got " + v.text, hint);
      if (v.type == T::integer) v.type = T::floating, v.text = float_text(v.f);
      break;
    case Rule::nonneg_number:
      if (v.type != T::integer && v.type != T::floating) wrong_type("a number >= 0");
      if (!(v.f >= 0) || !std::isfinite(v.f)) fail(file, v.pos, k + in + " must be a number >= 0, got " + v.text, hint);
      if (v.type == T::integer) v.type = T::floating, v.text = float_text(v.f);
      break;
    case Rule::boolean:
      if (v.type != T::boolean) wrong_type("true or false");
      break;
    case Rule::text:
      if (v.type != T::string) wrong_type("a string");
      break;
    case Rule::mode:
      one_of(scenario_modes(), "mode");
      break;
    case Rule::device:
      one_of(kDevices, "device");
      break;
    case Rule::preset:
      one_of(preset_names(), "preset");
      break;
    case Rule::select:
      one_of(kSelectRules, "selection rule");
      break;
    case Rule::topk_backend:
      one_of(kTopkBackends, "top-k backend");
      break;
    case Rule::decode_impl:
      if (v.type == T::string && v.s == "persistent")
        fail(file, v.pos,
             "decode_impl \"persistent\"" + in +
                 " was retired (slower than \"kernels\" at every measured point, bench/RESULTS.md)",
             "use \"kernels\" or remove the key");
      one_of(kDecodeImpls, "decode implementation");
      break;
    case Rule::precision:
      one_of(kPrecisions, "precision");
      break;
    case Rule::dtype:
      one_of(kDtypes, "dtype");
      break;
    case Rule::ffn:
      if (v.type != T::string) wrong_type("a string: dense, moc or moc_a:b");
      check_ffn(file, v, in);
      break;
    case Rule::k:
      if (v.type == T::integer) {
        if (v.i <= 0)
          fail(file, v.pos, "k" + in + " must be positive, got " + v.text,
               "k is the channels kept per row: an integer in [1, d_ffn] or a fraction of d_ffn in (0, 1]");
        if (v.i > INT_MAX) fail(file, v.pos, "k" + in + " is too large: " + v.text, hint);
      } else if (v.type == T::floating) {
        if (!(v.f > 0 && v.f <= 1))
          fail(file, v.pos, "k" + in + ": a fraction of d_ffn must be in (0, 1], got " + v.text,
               "write an integer for an absolute K (k = 1024) or a fraction (k = 0.2)");
      } else {
        wrong_type("an integer or a fraction of d_ffn");
      }
      break;
  }
  return v;
}

class Parser {
 public:
  Parser(std::string file, Scenario& sc) : file_(std::move(file)), sc_(sc) {}

  void parse(const toml::table& root) {
    // Exclude and override entries may only name declared axes, wherever [axes] sits in the file.
    if (auto axes = root["axes"].as_table())
      for (auto&& [k, v] : *axes) declared_.emplace_back(k.str());
    for (auto [key, node] : ordered(root)) {
      const std::string k(key->str());
      const SourcePos kp = pos_of(key->source());
      if (k == "name" || k == "description") {
        // Shown by list, show and the dashboard: no control characters (a terminal would act on them).
        const ScenarioValue v = read_value(file_, *node, KeySection::top, k, "at the top level");
        for (unsigned char ch : v.s)
          if (ch < 0x20 || ch == 0x7f)
            fail(file_, pos_of(node->source()), k + " contains a control character (code " + std::to_string(ch) + ")",
                 "write it as plain text on one line, without tabs, escapes or terminal sequences");
        (k == "name" ? sc_.name : sc_.description) = v.s;
      } else if (k == "mode") {
        sc_.mode = read_value(file_, *node, KeySection::top, k, "at the top level");
      } else if (k == "device") {
        sc_.device = read_value(file_, *node, KeySection::top, k, "at the top level").s;
      } else if (k == "model") {
        settings(table(*node, "[model]", "[model] with preset = \"1b\" below it"), "[model]", KeySection::model, sc_.model);
      } else if (k == "measure") {
        settings(table(*node, "[measure]", "[measure] with warmup = 3 below it"), "[measure]", KeySection::measure,
                 sc_.measure);
      } else if (k == "profile") {
        settings(table(*node, "[profile]", "[profile] with kernels = true below it"), "[profile]", KeySection::profile,
                 sc_.profile);
      } else if (k == "data") {
        sc_.data_pos = kp;
        settings(table(*node, "[data]", "[data] with corpus = \"python3.11-doc\" below it"), "[data]", KeySection::data,
                 sc_.data);
      } else if (k == "axes") {
        axes(table(*node, "[axes]", "[axes] with batch = [1, 2, 4] below it"), "[axes]", false, sc_.axes);
      } else if (k == "exclude") {
        for (auto* t : array_of_tables(*node, "exclude")) exclude(*t);
      } else if (k == "include") {
        for (auto* t : array_of_tables(*node, "include")) include(*t);
      } else if (k == "overrides") {
        overrides(table(*node, "[overrides]", "[overrides.cpu] with measure = { max_reps = 5 } below it"));
      } else {
        unknown(k, kp, "at the top level", top_keys());
      }
    }
    if (sc_.name.empty()) sc_.name = std::filesystem::path(file_).stem().string();
  }

 private:
  [[noreturn]] void unknown(const std::string& k, SourcePos p, const std::string& where,
                            const std::vector<std::string>& valid, const KeySection* section = nullptr) {
    if (section)
      if (const RetiredKey* r = find_retired_key(*section, k)) fail(file_, p, r->reason, r->hint);
    fail(file_, p, "unknown key '" + k + "' " + where + did_you_mean(k, valid),
         "valid keys " + where + ": " + join(valid));
  }

  const toml::table& table(const toml::node& n, const std::string& what, const std::string& example) {
    if (auto t = n.as_table()) return *t;
    fail(file_, pos_of(n.source()), what + " must be a table, got " + describe_node(n), "make it a table: " + example);
  }

  std::vector<const toml::table*> array_of_tables(const toml::node& n, const std::string& name) {
    std::vector<const toml::table*> out;
    const std::string hint =
        "write each entry as a [[" + name + "]] table, e.g.\n    [[" + name + "]]\n    ffn = \"dense\"";
    auto arr = n.as_array();
    if (!arr)
      fail(file_, pos_of(n.source()), name + " must be an array of tables ([[" + name + "]]), got " + describe_node(n),
           hint);
    for (const auto& e : *arr) {
      auto t = e.as_table();
      if (!t) fail(file_, pos_of(e.source()), name + " entries must be tables, got " + describe_node(e), hint);
      if (t->empty())
        fail(file_, pos_of(e.source()), "empty [[" + name + "]] entry",
             "give it at least one axis key, e.g. ffn = \"dense\"");
      out.push_back(t);
    }
    return out;
  }

  void settings(const toml::table& t, const std::string& where, KeySection section, std::vector<ScenarioSetting>& out) {
    const std::vector<std::string> valid = scenario_key_names(section);
    for (auto [key, node] : ordered(t)) {
      const std::string k(key->str());
      const SourcePos kp = pos_of(key->source());
      if (!contains(valid, k)) unknown(k, kp, "in " + where, valid, &section);
      out.push_back({k, read_value(file_, *node, section, k, where), kp});
    }
  }

  // [axes] (override = false) or the axes of an override section, which may only re-value declared axes.
  void axes(const toml::table& t, const std::string& where, bool override, std::vector<ScenarioAxis>& out) {
    const auto valid = axis_keys();
    for (auto [key, node] : ordered(t)) {
      const std::string k(key->str());
      const SourcePos kp = pos_of(key->source());
      if (!contains(valid, k)) unknown(k, kp, "in " + where, valid);
      if (override && !contains(declared_, k))
        fail(file_, kp, "axis '" + k + "' in " + where + " is not declared in [axes]",
             "overrides change the values of declared axes so every backend runs the same study; declare " + k +
                 " in [axes] (declared: " + (declared_.empty() ? "none" : join(declared_)) + ")");
      ScenarioAxis axis{k, {}, kp};
      if (auto arr = node->as_array()) {
        if (arr->empty())
          fail(file_, pos_of(node->source()), "axis '" + k + "' in " + where + " has no values",
               "give at least one value, e.g. " + k + " = [" + key_spec(KeySection::axes, k).example + "], or remove it");
        for (const auto& e : *arr) axis.values.push_back(read_value(file_, e, KeySection::axes, k, where));
      } else {
        axis.values.push_back(read_value(file_, *node, KeySection::axes, k, where));  // a scalar is a one-value axis
      }
      // Duplicates in linear time (an axis of 10^6 values took ~45 minutes pairwise).
      std::unordered_set<std::string_view> seen;
      seen.reserve(axis.values.size());
      for (const auto& v : axis.values)
        if (!seen.insert(v.text).second)
          fail(file_, v.pos, "axis '" + k + "' in " + where + " lists " + v.text + " twice",
               "remove the duplicate; each value gives one set of points");
      out.push_back(std::move(axis));
    }
  }

  void exclude(const toml::table& t) {
    std::vector<ScenarioAxis> entry;
    const auto valid = axis_keys();
    for (auto [key, node] : ordered(t)) {
      const std::string k(key->str());
      const SourcePos kp = pos_of(key->source());
      if (!contains(declared_, k)) {
        if (!contains(valid, k)) unknown(k, kp, "in [[exclude]]", declared_.empty() ? valid : declared_);
        fail(file_, kp, "[[exclude]] key '" + k + "' is not an axis declared in [axes]",
             "an exclude drops points of the sweep by their axis values; declared axes: " +
                 (declared_.empty() ? std::string("none") : join(declared_)));
      }
      ScenarioAxis m{k, {}, kp};
      if (auto arr = node->as_array()) {
        if (arr->empty())
          fail(file_, pos_of(node->source()), "[[exclude]] key '" + k + "' has no values",
               "give a value or a list of values");
        for (const auto& e : *arr) m.values.push_back(read_value(file_, e, KeySection::axes, k, "[[exclude]]"));
      } else {
        m.values.push_back(read_value(file_, *node, KeySection::axes, k, "[[exclude]]"));
      }
      entry.push_back(std::move(m));
    }
    sc_.exclude.push_back(std::move(entry));
  }

  void include(const toml::table& t) {
    std::vector<ScenarioSetting> entry;
    const auto valid = axis_keys();
    for (auto [key, node] : ordered(t)) {
      const std::string k(key->str());
      const SourcePos kp = pos_of(key->source());
      if (!contains(valid, k)) unknown(k, kp, "in [[include]]", valid);
      if (node->is_array())
        fail(file_, pos_of(node->source()), "[[include]] key '" + k + "' has a list; an include adds one point",
             "write one [[include]] entry per extra point with single values, e.g. batch = 8");
      entry.push_back({k, read_value(file_, *node, KeySection::axes, k, "[[include]]"), kp});
    }
    sc_.include.push_back(std::move(entry));
  }

  void overrides(const toml::table& t) {
    for (auto [key, node] : ordered(t)) {
      const std::string backend(key->str());
      const SourcePos kp = pos_of(key->source());
      if (!contains(scenario_backends(), backend))
        fail(file_, kp, "unknown backend '" + backend + "' in [overrides]" + did_you_mean(backend, scenario_backends()),
             "overrides apply per backend; backends: " + join(scenario_backends()));
      const std::string where = "[overrides." + backend + "]";
      ScenarioOverride ov{backend, kp, {}, {}, {}, {}};
      for (auto [skey, snode] : ordered(table(*node, where, where + " with measure = { max_reps = 5 } below it"))) {
        const std::string s(skey->str());
        const SourcePos sp = pos_of(skey->source());
        const std::string sub = where + "." + s;
        if (s == "model")
          settings(table(*snode, sub, "model = { preset = \"tiny\" }"), sub, KeySection::model, ov.model);
        else if (s == "measure")
          settings(table(*snode, sub, "measure = { max_reps = 5 }"), sub, KeySection::measure, ov.measure);
        else if (s == "data")
          settings(table(*snode, sub, "data = { steps = 20 }"), sub, KeySection::data, ov.data);
        else if (s == "axes")
          axes(table(*snode, sub, "axes = { batch = [1, 2] }"), sub, true, ov.axes);
        else
          unknown(s, sp, "in " + where, kOverrideKeys);
      }
      sc_.overrides.push_back(std::move(ov));
    }
  }

  std::string file_;
  Scenario& sc_;
  std::vector<std::string> declared_;
};

}  // namespace

Scenario parse_scenario(std::string_view text, const std::string& path) {
  Scenario sc;
  sc.path = path;
  sc.text = std::string(text);
  sc.hash = fnv1a_hex(text);
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(path));
  } catch (const toml::parse_error& e) {
    fail(path, pos_of(e.source()), "TOML syntax error: " + std::string(e.description()),
         "check quotes, brackets and commas at this position: strings need quotes (mode = \"decode\"), "
         "lists brackets (batch = [1, 2]), and a key may appear once per table");
  }
  Parser(path, sc).parse(root);
  // Refuse up front whatever either backend could not run, so a long sweep never dies half-way.
  for (const auto& backend : scenario_backends()) (void)sc.expand(backend);
  return sc;
}

Scenario load_scenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ScenarioError(path, 0, 0, "cannot read the scenario file",
                        "check the path; the shipped scenarios are scenarios/*.toml");
  // Read in chunks up to a cap: a device or a pipe that never ends (/dev/zero) is refused, not read until
  // memory runs out. 64 MiB is far above any study (a 10^6-value axis is ~8 MB).
  constexpr std::size_t kMaxScenarioBytes = std::size_t{64} << 20;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxScenarioBytes)
      throw ScenarioError(path, 0, 0, "the scenario file is larger than 64 MiB (is it a scenario?)",
                          "a scenario is a TOML text of a few lines to a few MB; check the path");
  }
  return parse_scenario(text, path);
}


}  // namespace moc
