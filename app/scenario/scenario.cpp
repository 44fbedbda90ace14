// Scenarios: the error type, the modes and backends, what the reader and the expansion share
// (scenario_detail.h), a point's description. Reading a file: scenario_parse.cpp; its sweep: scenario_expand.cpp.
#include "app/scenario/scenario.h"

#include "app/scenario/scenario_detail.h"
#include "app/scenario/scenario_keys.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace moc {

ScenarioError::ScenarioError(std::string file_, int line_, int col_, std::string message_, std::string hint_)
    : std::runtime_error([&] {
        // (appended piece by piece: `w += ":" + std::to_string(n)` draws GCC 12's false -Wrestrict here)
        std::string w = file_;
        if (line_ > 0) w.append(":").append(std::to_string(line_));
        if (line_ > 0 && col_ > 0) w.append(":").append(std::to_string(col_));
        w.append(": ").append(message_);
        if (!hint_.empty()) w.append("\n  hint: ").append(hint_);
        return w;
      }()),
      file(std::move(file_)),
      line(line_),
      col(col_),
      message(std::move(message_)),
      hint(std::move(hint_)) {}

std::vector<std::string> scenario_modes() { return {"train", "decode", "eval", "ffn-train", "ffn-decode", "topk"}; }
std::vector<std::string> scenario_backends() { return {"cpu", "cuda"}; }

namespace scenario_detail {

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

const ScenarioKey& key_spec(KeySection s, std::string_view key) {
  const ScenarioKey* k = find_scenario_key(s, key);
  if (!k && s == KeySection::axes) k = find_scenario_key(KeySection::model, key);
  if (!k) throw std::logic_error("scenario key '" + std::string(key) + "' has no declaration in scenario_keys.cpp");
  return *k;
}

std::string example_of(KeySection s, std::string_view key) {
  return std::string(key) + " = " + key_spec(s, key).example;
}

std::string model_key_of_axis(std::string_view axis) {
  if (axis == "topk_position") return "select";
  if (axis == "preset") return "";
  for (auto& o : override_keys())
    if (o == axis) return o;
  return "";
}

[[noreturn]] void fail(const std::string& file, SourcePos p, std::string message, std::string hint) {
  throw ScenarioError(file, p.line, p.col, std::move(message), std::move(hint));
}

std::string values_text(const std::vector<ScenarioValue>& vs) {
  std::string s = "[";
  for (std::size_t i = 0; i < vs.size(); ++i) {
    if (i) s += ", ";
    s += vs[i].type == ScenarioValue::Type::string ? "\"" + vs[i].text + "\"" : vs[i].text;
  }
  return s + "]";
}

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

std::pair<std::string, std::string> split_hint(const std::string& what) {
  const auto semi = what.find("; ");
  if (semi == std::string::npos) return {what, ""};
  return {what.substr(0, semi), what.substr(semi + 2)};
}

}  // namespace scenario_detail

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

}  // namespace moc
