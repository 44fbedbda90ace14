#include "app/scenario/scenario.h"

#include "app/scenario/scenario_keys.h"

#include "model/data/corpus.h"
#include "model/published.h"
#include "model/token_ids.h"
#include "model/data/tokenizer.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdio>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <unordered_set>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace moc {

ScenarioError::ScenarioError(std::string file_, int line_, int col_, std::string message_, std::string hint_)
    : std::runtime_error([&] {
        std::string w = file_;
        if (line_ > 0) w += ":" + std::to_string(line_);
        if (line_ > 0 && col_ > 0) w += ":" + std::to_string(col_);
        w += ": " + message_;
        if (!hint_.empty()) w += "\n  hint: " + hint_;
        return w;
      }()),
      file(std::move(file_)),
      line(line_),
      col(col_),
      message(std::move(message_)),
      hint(std::move(hint_)) {}

std::vector<std::string> scenario_modes() { return {"train", "decode", "eval", "ffn-train", "ffn-decode", "topk"}; }
std::vector<std::string> scenario_backends() { return {"cpu", "cuda"}; }

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
// Model keys applied after every other model key, in this order: a fractional k needs the final d_ffn,
// and ffn resets the a:b grouping that k does not touch.
const std::vector<std::string> kLateModelKeys = {"ffn", "k", "gcp", "select"};

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::vector<std::string> top_keys() {
  auto k = scenario_key_names(KeySection::top);
  k.insert(k.end(), kTopTables.begin(), kTopTables.end());
  return k;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
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

// A key's declaration: an axis that is not one of the study's own dimensions is a model key.
const ScenarioKey& key_spec(KeySection s, std::string_view key) {
  const ScenarioKey* k = find_scenario_key(s, key);
  if (!k && s == KeySection::axes) k = find_scenario_key(KeySection::model, key);
  if (!k) throw std::logic_error("scenario key '" + std::string(key) + "' has no declaration in scenario_keys.cpp");
  return *k;
}

// For hints: "batch = 4".
std::string example_of(KeySection s, std::string_view key) {
  return std::string(key) + " = " + key_spec(s, key).example;
}

// The ModelConfig key an axis sets, or "" for axes that are not model keys.
std::string model_key_of_axis(std::string_view axis) {
  if (axis == "topk_position") return "select";
  if (axis == "preset") return "";
  for (auto& o : override_keys())
    if (o == axis) return o;
  return "";
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

[[noreturn]] void fail(const std::string& file, SourcePos p, std::string message, std::string hint) {
  throw ScenarioError(file, p.line, p.col, std::move(message), std::move(hint));
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

std::string values_text(const std::vector<ScenarioValue>& vs) {
  std::string s = "[";
  for (std::size_t i = 0; i < vs.size(); ++i) {
    if (i) s += ", ";
    s += vs[i].type == ScenarioValue::Type::string ? "\"" + vs[i].text + "\"" : vs[i].text;
  }
  return s + "]";
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

// A point before resolution: the (axis, value) pairs that define it.
using RawPoint = std::vector<std::pair<std::string, const ScenarioValue*>>;

const ScenarioValue* find_value(const RawPoint& p, std::string_view name) {
  for (const auto& [n, v] : p)
    if (n == name) return v;
  return nullptr;
}

std::string raw_key(const RawPoint& p) {
  std::vector<std::string> parts;
  for (const auto& [n, v] : p) parts.push_back(n + "=" + v->text);
  std::sort(parts.begin(), parts.end());
  std::string k;
  for (auto& s : parts) k += s + "\n";
  return k;
}

std::string raw_text(const RawPoint& p) {
  std::string s;
  for (const auto& [n, v] : p) s += (s.empty() ? "" : " ") + n + "=" + v->text;
  return s;
}

// The field a ConfigError from ModelConfig::validate() is about (its messages start with the field).
std::vector<std::string> blame_candidates(const std::string& msg) {
  if (msg.starts_with("moc a:b")) return {"ffn"};
  if (msg.starts_with("head_dim")) return {"heads", "hidden"};
  if (msg.starts_with("kv_heads")) return {"kv_heads", "heads"};
  if (msg.starts_with("heads")) return {"heads", "hidden"};
  if (msg.starts_with("k ") || msg.starts_with("k:")) return {"k", "d_ffn", "ffn"};
  if (msg.starts_with("d_ffn") && msg.find("65536") != std::string::npos) return {"d_ffn", "ffn"};
  const auto end = msg.find_first_of(" :(");
  return {msg.substr(0, end)};
}

// Splits "problem; what to do" (ConfigError's convention) into message and hint.
std::pair<std::string, std::string> split_hint(const std::string& what) {
  const auto semi = what.find("; ");
  if (semi == std::string::npos) return {what, ""};
  return {what.substr(0, semi), what.substr(semi + 2)};
}

}  // namespace

const std::string* ScenarioPoint::axis(std::string_view name) const {
  for (const auto& [n, v] : axes)
    if (n == name) return &v;
  return nullptr;
}

std::string ScenarioPoint::describe() const {
  std::ostringstream o;
  o << "#" << index << " " << mode;
  for (const auto& [n, v] : axes)
    if (n != "mode") o << " " << n << "=" << v;
  o << " | " << model.describe() << (weights.empty() ? "" : " weights " + weights) << " | batch " << batch;
  if (mode == "decode")
    o << " prompt " << measure.prompt << " generate " << measure.generate;
  else if (mode != "ffn-decode")
    o << " seq " << seq;
  o << " | " << precision;
  if (mode == "topk" || model.ffn.kind == FfnKind::moc) o << " topk " << topk_backend;
  if (mode == "decode" || mode == "ffn-decode") o << " | " << decode_impl;
  return o.str();
}

std::vector<std::string> Scenario::axis_names() const {
  std::vector<std::string> out;
  for (const auto& a : axes) out.push_back(a.name);
  return out;
}

namespace {

// Scenario::expand in stages: this backend's view of the tables, the settings every point starts from, the
// raw points of the sweep, then each point resolved and checked.
class Expander {
 public:
  Expander(const Scenario& sc, const std::string& backend, std::vector<AppliedOverride>* applied)
      : sc_(sc), path_(sc.path), backend_(backend), applied_(applied) {}

  std::vector<ScenarioPoint> run() {
    merge_overrides();
    apply_settings();
    bound_sweep();
    const std::vector<RawPoint> raw = raw_points();
    for (const auto& s : mdl_)
      if (s.key == "preset") preset_setting_ = &s;
    std::vector<ScenarioPoint> points;
    for (std::size_t idx = 0; idx < raw.size(); ++idx) points.push_back(resolve(idx, raw[idx]));
    check_data_keys_used(points);
    return points;
  }

 private:
  // The model keys a point sets (file order, last write wins) and their values.
  using ModelKeys = std::vector<std::pair<std::string, const ScenarioValue*>>;

  // One point being resolved: its raw values, the text that names it in messages, where to point.
  struct At {
    const RawPoint& rp;
    std::string context;
    SourcePos here;
    const ScenarioValue* preset = nullptr;
    ModelKeys keys;
    SourcePos model_pos(const std::string& key) const {
      for (const auto& [k, v] : keys)
        if (k == key) return v->pos;
      return preset->pos;
    }
  };

  void report(const char* section, const std::string& key, const std::string& value) {
    if (applied_) applied_->push_back({section, key, value});
  }

  // This backend's view of the tables: override settings replace same-named ones in place.
  void merge_overrides() {
    ax_ = sc_.axes;
    mdl_ = sc_.model, meas_ = sc_.measure, dat_ = sc_.data;
    auto merge = [](std::vector<ScenarioSetting>& into, const ScenarioSetting& s) {
      for (auto& x : into)
        if (x.key == s.key) return void(x = s);
      into.push_back(s);
    };
    for (const auto& ov : sc_.overrides) {
      if (ov.backend != backend_) continue;
      for (const auto& s : ov.model) merge(mdl_, s), report("model", s.key, s.value.text);
      for (const auto& s : ov.data) merge(dat_, s), report("data", s.key, s.value.text);
      for (const auto& s : ov.measure) {
        // Moved to the end rather than replaced in place: the order tells which of min_reps/max_reps to blame.
        meas_.erase(std::remove_if(meas_.begin(), meas_.end(), [&](const auto& x) { return x.key == s.key; }),
                    meas_.end());
        meas_.push_back(s);
        report("measure", s.key, s.value.text);
      }
      for (const auto& a : ov.axes) {
        for (auto& x : ax_)
          if (x.name == a.name) x.values = a.values;
        report("axes", a.name, values_text(a.values));
      }
    }
  }

  // [measure], [profile] and [data] settings apply through their key table (app/scenario/scenario_keys.h) to a base
  // point that every point starts from.
  void apply_settings() {
    auto apply_setting = [&](KeySection sec, const ScenarioSetting& s) { key_spec(sec, s.key).apply(base_, s.value); };
    for (const auto& ps : sc_.profile) apply_setting(KeySection::profile, ps);
    const ScenarioSetting *min_set = nullptr, *max_set = nullptr;
    std::size_t min_at = 0, max_at = 0;
    for (std::size_t i = 0; i < meas_.size(); ++i) {
      const auto& s = meas_[i];
      apply_setting(KeySection::measure, s);
      if (s.key == "min_reps") min_set = &s, min_at = i;
      if (s.key == "max_reps") max_set = &s, max_at = i;
    }
    const Measurement& m = base_.measure;
    if (m.min_reps > m.max_reps) {
      // Blame whichever of the two was written last (an override, when one made them clash).
      const ScenarioSetting* blame = !max_set || (min_set && min_at > max_at) ? min_set : max_set;
      const SourcePos p = blame ? blame->value.pos : SourcePos{};
      fail(path_, p,
           "min_reps (" + std::to_string(m.min_reps) + ") exceeds max_reps (" + std::to_string(m.max_reps) +
               ") for backend " + backend_,
           "raise max_reps or lower min_reps (defaults: min_reps 5, max_reps 100)");
    }

    // [data] (this backend's view): one TextData for every point, placeholders filled in per point.
    for (const auto& st : dat_) {
      const auto& v = st.value;
      // Bounds the key rules do not state (a fraction below 1, a ratio at most 1).
      if (st.key == "val_fraction" && v.f >= 1)
        fail(path_, v.pos, "val_fraction must be below 1, got " + v.text, "e.g. val_fraction = 0.05");
      if (st.key == "min_lr_ratio" && v.f > 1)
        fail(path_, v.pos, "min_lr_ratio must be at most 1, got " + v.text, "e.g. min_lr_ratio = 0.1");
      apply_setting(KeySection::data, st);
      if (st.key == "corpus") corpus_value_ = &v;
      if (st.key == "tokens") tokens_value_ = &v;
      if (st.key == "save") save_value_ = &v;
    }
    if (corpus_value_ && tokens_value_)
      fail(path_, tokens_value_->pos, "[data] has both corpus and tokens",
           "corpus is text mocbench tokenizes itself (training, and eval of checkpoints trained here); tokens are "
           "ids a published checkpoint's own tokenizer wrote (eval points): keep one");
    if (!dat_.empty() && !corpus_value_ && !tokens_value_)
      fail(path_, sc_.data_pos, "[data] has no corpus",
           "name the text to train on: corpus = \"python3.11-doc\" (Debian's python3.11-doc, installed by "
           "scripts/setup.sh) or a directory of text files; or, for eval points, tokens = \"ids.txt\"");
    if (tokens_value_) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(base_.data.tokens, ec))
        fail(path_, tokens_value_->pos, "[data] tokens: no file '" + base_.data.tokens + "'",
             base_.data.tokens.find(".local/smollm2/") != std::string::npos
                 ? "scripts/setup_real_model.sh fetches SmolLM2 and writes these ids; run from the repository root "
                   "(a relative path is taken from the current directory)"
                 : "a file of whitespace-separated token ids (scripts/tokenize_gguf.py MODEL OUT.txt TEXT writes one "
                   "with the model's own tokenizer); a relative path is taken from the current directory");
    }
    if (corpus_value_) {
      try {
        (void)data::resolve_corpus(base_.data.corpus);
      } catch (const data::DataError& e) {
        fail(path_, corpus_value_->pos, std::string("[data] ") + e.what(),
             "run scripts/setup.sh, or give a directory of text files");
      }
    }
  }

  // The sweep's size is bounded before anything is built: a few long axes in a 1 KiB file would otherwise
  // ask for billions of points (and the memory to hold them) before the run could refuse them.
  void bound_sweep() const {
    double product = 1;  // a double: no overflow, exact far beyond any count worth printing
    const ScenarioAxis* longest = nullptr;
    for (const auto& a : ax_) {
      product *= static_cast<double>(a.values.size());
      if (!longest || a.values.size() > longest->values.size()) longest = &a;
    }
    if (product <= static_cast<double>(kMaxSweepPoints)) return;
    char count[64];
    std::snprintf(count, sizeof count, "%.0f", product);
    fail(path_, longest->pos,
         std::string("the sweep has ") + count + " points for backend " + backend_ +
             " (the product of the axes' lengths, before [[exclude]]); at most " + std::to_string(kMaxSweepPoints) +
             " are allowed",
         "shorten the axes (the longest, '" + longest->name + "', has " + std::to_string(longest->values.size()) +
             " values) or split the study into several scenarios");
  }

  bool excluded(const RawPoint& p) const {
    for (const auto& ex : sc_.exclude) {
      bool all = true;
      for (const auto& cond : ex) {
        const ScenarioValue* v = find_value(p, cond.name);
        all = all && v && std::any_of(cond.values.begin(), cond.values.end(), [&](const ScenarioValue& c) {
                return c.text == v->text;
              });
      }
      if (all) return true;
    }
    return false;
  }

  // The cartesian product (first axis slowest) less the excludes, then the includes; duplicates dropped.
  std::vector<RawPoint> raw_points() const {
    std::vector<RawPoint> raw;
    std::vector<std::size_t> at(ax_.size(), 0);
    for (;;) {
      RawPoint p;
      for (std::size_t i = 0; i < ax_.size(); ++i) p.emplace_back(ax_[i].name, &ax_[i].values[at[i]]);
      if (!excluded(p)) raw.push_back(std::move(p));
      std::size_t i = ax_.size();
      while (i > 0 && ++at[i - 1] == ax_[i - 1].values.size()) at[--i] = 0;
      if (i == 0) break;
    }
    // Includes: the declared axes at their first value, overwritten by the entry, then its other keys.
    for (const auto& inc : sc_.include) {
      RawPoint p;
      for (const auto& a : ax_) p.emplace_back(a.name, &a.values.front());
      for (const auto& s : inc) {
        auto it = std::find_if(p.begin(), p.end(), [&](const auto& x) { return x.first == s.key; });
        if (it != p.end())
          it->second = &s.value;
        else
          p.emplace_back(s.key, &s.value);
      }
      raw.push_back(std::move(p));
    }
    std::set<std::string> seen;
    std::vector<RawPoint> unique;
    for (auto& p : raw)
      if (seen.insert(raw_key(p)).second) unique.push_back(std::move(p));
    return unique;
  }

  ScenarioPoint resolve(std::size_t idx, const RawPoint& rp) {
    ScenarioPoint pt;
    pt.index = static_cast<int>(idx);
    for (const auto& [n, v] : rp) pt.axes.emplace_back(n, v->text);
    // Where to point for a problem no single key of this point owns: the point's first value.
    At at{rp, " (backend " + backend_ + ", point #" + std::to_string(idx) + (rp.empty() ? "" : ": " + raw_text(rp)) + ")",
          !rp.empty() ? rp.front().second->pos : SourcePos{1, 1}, nullptr, {}};
    if (const ScenarioValue* v = find_value(rp, "mode"))
      pt.mode = v->text;
    else if (sc_.mode)
      pt.mode = sc_.mode->text;
    else
      fail(path_, at.here, "no mode" + at.context,
           "set mode = \"decode\" at the top level or sweep [axes] mode = [...]; modes: " + join(scenario_modes()));
    resolve_model(pt, at);
    pt.measure = base_.measure;
    pt.profile_kernels = base_.profile_kernels;
    pt.profile_steps = base_.profile_steps;
    if (const ScenarioValue* v = find_value(rp, "batch")) pt.batch = static_cast<int>(v->i);
    pt.seq = pt.model.seq_len;
    if (const ScenarioValue* v = find_value(rp, "seq")) pt.seq = static_cast<int>(v->i);
    fit_and_validate(pt, at);
    if (const ScenarioValue* v = find_value(rp, "topk_backend")) pt.topk_backend = v->text;
    if (const ScenarioValue* v = find_value(rp, "decode_impl")) pt.decode_impl = v->text;
    pt.precision = backend_ == "cpu" ? "fp32" : "bf16";
    if (const ScenarioValue* v = find_value(rp, "precision")) pt.precision = v->text;
    // What the engine cannot run is refused here, before any point runs.
    resolve_weights_and_data(pt, at);
    resolve_parallel(pt, at);
    if (pt.model.moe() && pt.mode != "train")
      fail(path_, at.model_pos("experts"),
           "a mixture-of-experts model (" + std::to_string(pt.model.experts) + " experts) runs in mode train only, not " +
               pt.mode + at.context,
           "the router groups tokens per expert on the host, which the decode step's captured graph cannot do; "
           "use mode = \"train\", or experts = 0 (a dense-FFN model) for " + pt.mode);
    return pt;
  }

  // The preset (the point's axis, else [model]), then [model] keys (with this backend's overrides), then the
  // point's own model axes; shape keys before kLateModelKeys.
  void resolve_model(ScenarioPoint& pt, At& at) {
    at.preset = find_value(at.rp, "preset");
    if (!at.preset && preset_setting_) at.preset = &preset_setting_->value;
    const ScenarioValue* published = published_weights(at);
    if (published) {
      // A published checkpoint (GGUF, Hugging Face) brings its configuration: no preset, and the keys that
      // shape the network must agree with it (checked below); the FFN variant, dtypes and seq_len are choices.
      if (at.preset)
        fail(path_, at.preset->pos,
             "preset = " + at.preset->text + " beside a published checkpoint ([model] weights = " + published->text +
                 ")" + at.context,
             "drop preset: the configuration comes from the checkpoint");
      pt.model = published_config(*published);
      at.preset = published;  // problems with the base configuration point at the checkpoint
    } else {
      if (!at.preset)
        fail(path_, at.here, "no model preset" + at.context,
             "set [model] preset = \"1b\" or sweep [axes] preset = [...]; presets: " + join(preset_names()) +
                 "; or [model] weights = a GGUF file or Hugging Face folder, whose configuration is used");
      try {
        pt.model = preset(at.preset->text);
      } catch (const ConfigError& e) {
        fail(path_, at.preset->pos, e.what(), "presets: " + join(preset_names()));
      }
    }
    auto set_key = [&](const std::string& k, const ScenarioValue* v) {
      for (auto& x : at.keys)
        if (x.first == k) return void(x.second = v);
      at.keys.emplace_back(k, v);
    };
    for (const auto& s : mdl_)
      if (s.key != "weights" && s.key != "preset") set_key(s.key, &s.value);
    for (const auto& [n, v] : at.rp)
      if (auto mk = model_key_of_axis(n); !mk.empty()) set_key(mk, v);
    auto apply = [&](const std::string& k, const ScenarioValue* v) {
      if (published) check_agrees(pt.model, k, *v, *published, at);
      try {
        apply_override(pt.model, k, v->text);
      } catch (const ConfigError& e) {
        auto [msg, hint] = split_hint(e.what());
        fail(path_, v->pos, msg + at.context, hint.empty() ? "e.g. " + example_of(KeySection::model, k) : hint);
      }
    };
    for (const auto& [k, v] : at.keys)
      if (!contains(kLateModelKeys, k)) apply(k, v);
    for (const auto& late : kLateModelKeys)
      for (const auto& [k, v] : at.keys)
        if (k == late) apply(k, v);
  }

  // [data] keys that change nothing for this scenario's points are refused: training's keys without a train
  // point, and the corpus's (split, cache) beside tokens.
  void check_data_keys_used(const std::vector<ScenarioPoint>& points) const {
    static const std::vector<std::string> training = {"steps", "stop_at", "eval_every", "lr", "warmup", "min_lr_ratio",
                                                      "weight_decay", "save", "resume"};
    static const std::vector<std::string> corpus_only = {"val_fraction", "cache"};
    const bool trains = std::any_of(points.begin(), points.end(),
                                    [](const ScenarioPoint& p) { return p.mode == "train" && p.data.active(); });
    for (const auto& st : dat_) {
      if (tokens_value_ && (contains(training, st.key) || contains(corpus_only, st.key)))
        fail(path_, st.value.pos, "[data] " + st.key + " applies to training on a corpus; with tokens it changes nothing",
             "drop it (tokens feed eval points: tokens, eval_windows, analyze and seed apply)");
      if (!trains && contains(training, st.key))
        fail(path_, st.value.pos, "[data] " + st.key + " applies to train points; this scenario has none",
             "drop it, or add train points");
    }
  }

  // [data] tokens, read once (model/token_ids.h): how many ids and the largest; a file that is not ids is
  // refused where tokens is written.
  struct TokenFileFacts {
    std::size_t count = 0;
    long long max_id = -1;
  };
  const TokenFileFacts& token_file_facts() {
    if (token_facts_) return *token_facts_;
    TokenFileFacts f;
    try {
      const std::vector<std::int32_t> ids = read_token_ids(base_.data.tokens);
      f.count = ids.size();
      for (auto id : ids) f.max_id = std::max<long long>(f.max_id, id);
    } catch (const ConfigError& e) {
      fail(path_, tokens_value_->pos, std::string("[data] tokens: ") + e.what(),
           "the file holds whitespace-separated non-negative integers (scripts/tokenize_gguf.py writes them)");
    }
    return *(token_facts_ = f);
  }

  // The point's weights (its axis, else [model]) when they name a published checkpoint: a literal path to a
  // GGUF file or a Hugging Face folder (a path with placeholders names mocbench checkpoints a run writes).
  const ScenarioValue* published_weights(const At& at) const {
    const ScenarioValue* w = find_value(at.rp, "weights");
    if (!w)
      for (const auto& s : mdl_)
        if (s.key == "weights") w = &s.value;
    if (!w || w->s.empty() || w->s == "random" || w->s.find('{') != std::string::npos) return nullptr;
    return is_published_checkpoint(w->s) ? w : nullptr;
  }

  // The checkpoint's configuration, read once per file (a GGUF's metadata, a folder's config.json).
  ModelConfig published_config(const ScenarioValue& w) {
    if (const auto it = published_.find(w.s); it != published_.end()) return it->second;
    try {
      return published_.emplace(w.s, PublishedCheckpoint::open(w.s).config()).first->second;
    } catch (const ConfigError& e) {
      auto [msg, hint] = split_hint(e.what());
      fail(path_, w.pos, "[model] weights: " + msg,
           hint.empty() ? "a GGUF file (llama architecture) or a Hugging Face folder mocbench reads (Llama, Qwen3, "
                          "Mixtral)" : hint);
    }
  }

  // A key that shapes the network must agree with the published checkpoint's value; init_std has no effect on
  // loaded weights. The FFN variant (ffn, k, gcp, select), dtypes, seq_len and seed are the scenario's.
  void check_agrees(const ModelConfig& cfg, const std::string& k, const ScenarioValue& v, const ScenarioValue& w,
                    const At& at) const {
    static const std::vector<std::string> chosen = {"seq_len", "seed", "param_dtype", "act_dtype", "ffn", "k", "gcp",
                                                    "select"};
    if (contains(chosen, k)) return;
    if (k == "init_std")
      fail(path_, v.pos, "init_std = " + v.text + " beside a published checkpoint" + at.context,
           "drop it: the weights come from " + w.s + ", not from a random initialisation");
    ModelConfig changed = cfg;
    try {
      apply_override(changed, k, v.text);
    } catch (const ConfigError&) {
      return;  // an invalid value: apply() says why
    }
    const std::string was = cfg.describe() + " " + std::to_string(cfg.rope_theta) + " " + std::to_string(cfg.norm_eps) +
                            " " + std::to_string(cfg.qk_norm) + " " + std::to_string(cfg.experts_per_token);
    const std::string now = changed.describe() + " " + std::to_string(changed.rope_theta) + " " +
                            std::to_string(changed.norm_eps) + " " + std::to_string(changed.qk_norm) + " " +
                            std::to_string(changed.experts_per_token);
    if (was != now || changed.vocab != cfg.vocab || changed.kv_heads != cfg.kv_heads)
      fail(path_, v.pos,
           k + " = " + v.text + " disagrees with the published checkpoint " + w.s + " (" + cfg.describe() + ")" +
               at.context,
           "drop it: a published checkpoint's architecture comes from the checkpoint; the scenario chooses ffn, k, "
           "gcp, select, seq_len and the dtypes");
  }

  // The model must hold every position the point runs through (as `mocbench smoke` does); then validated,
  // a problem blamed on the key that set the field.
  void fit_and_validate(ScenarioPoint& pt, const At& at) const {
    const Measurement& m = base_.measure;
    const long need = pt.mode == "decode" ? static_cast<long>(m.prompt) + m.generate : pt.seq;
    if (need > INT_MAX) fail(path_, at.here, "prompt + generate is too large" + at.context, "lower prompt or generate");
    pt.model.seq_len = std::max(pt.model.seq_len, static_cast<int>(need));
    try {
      pt.model.validate();
    } catch (const ConfigError& e) {
      auto [msg, hint] = split_hint(e.what());
      SourcePos p = at.preset->pos;
      bool found = false;
      for (const auto& field : blame_candidates(msg)) {
        for (const auto& [k, v] : at.keys)
          if (k == field && !found) p = v->pos, found = true;
      }
      fail(path_, p, msg + at.context, hint.empty() ? "change this value or the model keys it depends on" : hint);
    }
  }

  // {name} in weights and [data] save: the point's value of axis `name` (or of preset, batch, seq, mode,
  // precision when they are not swept).
  std::string fill(const ScenarioPoint& pt, const At& at, const ScenarioValue& v, const char* what) const {
    std::string out;
    for (std::size_t i = 0; i < v.s.size(); ++i) {
      if (v.s[i] != '{') {
        out += v.s[i];
        continue;
      }
      const auto close = v.s.find('}', i);
      if (close == std::string::npos)
        fail(path_, v.pos, std::string(what) + ": '{' without '}'", "placeholders look like {ffn}");
      const std::string key = v.s.substr(i + 1, close - i - 1);
      if (const ScenarioValue* av = find_value(at.rp, key)) out += av->text;
      else if (key == "preset") out += at.preset->text;
      else if (key == "mode") out += pt.mode;
      else if (key == "batch") out += std::to_string(pt.batch);
      else if (key == "seq") out += std::to_string(pt.seq);
      else if (key == "precision") out += pt.precision;
      else
        fail(path_, v.pos, std::string(what) + ": unknown placeholder {" + key + "}" + at.context,
             "use an axis of the scenario (" + join(sc_.axis_names()) + ") or preset, mode, batch, seq, precision");
      i = close;
    }
    return out;
  }

  void resolve_weights_and_data(ScenarioPoint& pt, const At& at) {
    const ScenarioValue* weights = nullptr;
    for (const auto& s : mdl_)
      if (s.key == "weights") weights = &s.value;
    if (const ScenarioValue* v = find_value(at.rp, "weights")) weights = v;  // a weights axis: per point
    if (weights && (weights->s.empty() || weights->s == "random")) weights = nullptr;
    if (weights) {
      if (pt.mode != "train" && pt.mode != "decode" && pt.mode != "eval")
        fail(path_, weights->pos, "[model] weights apply to train, decode and eval points, not " + pt.mode + at.context,
             "drop weights for this mode, or exclude its points");
      pt.weights = fill(pt, at, *weights, "[model] weights");
      // A path with placeholders usually names checkpoints another scenario writes ([data] save): it is
      // checked when a run starts, before any point, rather than whenever the scenario is read.
      pt.weights_deferred = weights->s.find('{') != std::string::npos;
      std::error_code ec;
      if (!pt.weights_deferred && !std::filesystem::is_regular_file(pt.weights, ec) && !is_published_checkpoint(pt.weights))
        fail(path_, weights->pos, "[model] weights: no file '" + pt.weights + "'",
             pt.weights.find(".local/smollm2/") != std::string::npos
                 ? "scripts/setup_real_model.sh fetches SmolLM2 (~93 MB) and writes the held-out ids; run from the "
                   "repository root (a relative path is taken from the current directory)"
                 : "a safetensors checkpoint (mocbench's save_checkpoint, or [data] save), a GGUF file or a Hugging "
                   "Face folder (config.json + model.safetensors); a relative path is taken from the current "
                   "directory");
    }
    if (tokens_value_) {
      if (pt.mode != "eval")
        fail(path_, tokens_value_->pos, "[data] tokens feed eval points, not " + pt.mode + at.context,
             "train and decode on text take corpus; exclude this mode's points or drop tokens");
      pt.data = base_.data;
      const TokenFileFacts& f = token_file_facts();
      if (f.max_id >= pt.model.vocab)
        fail(path_, tokens_value_->pos,
             "[data] tokens: " + pt.data.tokens + " holds id " + std::to_string(f.max_id) + ", outside the model's " +
                 std::to_string(pt.model.vocab) + " ids" + at.context,
             "tokenize the text with this model's tokenizer (scripts/tokenize_gguf.py MODEL OUT.txt TEXT)");
      if (static_cast<long long>(f.count) < static_cast<long long>(pt.seq) + 1)
        fail(path_, tokens_value_->pos,
             "[data] tokens: " + pt.data.tokens + " holds " + std::to_string(f.count) + " ids, not one window of seq + 1 = " +
                 std::to_string(pt.seq + 1) + at.context,
             "lower seq, or give more text");
      return;
    }
    if (!corpus_value_) return;
    if (pt.mode != "train" && pt.mode != "decode" && pt.mode != "eval")
      fail(path_, sc_.data_pos, "[data] applies to train, decode and eval points, not " + pt.mode + at.context,
           "drop [data], or exclude this mode's points");
    if (pt.model.vocab < data::kMinVocab)
      fail(path_, at.model_pos("vocab"),
           "[data] trains a tokenizer of the model's vocabulary, " + std::to_string(pt.model.vocab) +
               " ids; it needs at least " + std::to_string(data::kMinVocab) + at.context,
           "set [model] vocab = 512 (or more) for small models");
    pt.data = base_.data;
    if (pt.data.resume && pt.mode == "train" && pt.weights.empty())
      fail(path_, sc_.data_pos, "[data] resume = true needs [model] weights: the checkpoint to continue" + at.context,
           "set [model] weights = \"ckpt.safetensors\" (a checkpoint [data] save wrote), or drop resume");
    if (save_value_) {
      if (pt.mode != "train")
        fail(path_, save_value_->pos,
             "[data] save writes a checkpoint after training; a " + pt.mode + " point has none" + at.context,
             "exclude non-train points or drop save");
      pt.data.save = fill(pt, at, *save_value_, "[data] save");
    }
  }

  void resolve_parallel(ScenarioPoint& pt, const At& at) const {
    if (const ScenarioValue* v = find_value(at.rp, "gpus")) {
      pt.gpus = static_cast<int>(v->i);
      if (pt.gpus > 1 && pt.mode != "train")
        fail(path_, v->pos, "gpus = " + v->text + ": data parallelism is for train points, not " + pt.mode + at.context,
             "use gpus = 1 for this mode, or exclude its points");
      if (pt.gpus > 1 && pt.data.active())
        fail(path_, v->pos, "gpus = " + v->text + ": training on [data] text runs on one GPU (data-parallel text "
             "training is not built)" + at.context, "use gpus = 1 with [data], or drop [data] to measure throughput");
    }
    for (const char* key : {"zero1", "comm_overlap"})
      if (const ScenarioValue* v = find_value(at.rp, key)) {
        (std::string(key) == "zero1" ? pt.zero1 : pt.comm_overlap) = v->b;
        if (pt.gpus == 1 && (std::string(key) == "zero1" ? v->b : !v->b))
          fail(path_, v->pos, std::string(key) + " = " + v->text + " applies to data-parallel points (gpus > 1); this one "
               "has gpus = 1" + at.context, "exclude it: [[exclude]] gpus = 1, " + std::string(key) + " = " + v->text);
      }
  }

  const Scenario& sc_;
  const std::string& path_;
  const std::string& backend_;
  std::vector<AppliedOverride>* applied_;
  std::vector<ScenarioAxis> ax_;
  std::vector<ScenarioSetting> mdl_, meas_, dat_;
  ScenarioPoint base_;
  const ScenarioValue *corpus_value_ = nullptr, *tokens_value_ = nullptr, *save_value_ = nullptr;
  std::map<std::string, ModelConfig> published_;  // published checkpoints' configurations by path
  std::optional<TokenFileFacts> token_facts_;
  const ScenarioSetting* preset_setting_ = nullptr;
};

}  // namespace

std::vector<ScenarioPoint> Scenario::expand(const std::string& backend, std::vector<AppliedOverride>* applied) const {
  if (!contains(scenario_backends(), backend))
    throw ScenarioError(path, 0, 0, "unknown backend '" + backend + "'", "backends: " + join(scenario_backends()));
  if (applied) applied->clear();
  return Expander(*this, backend, applied).run();
}

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
