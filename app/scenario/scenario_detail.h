// Internal to app/scenario/scenario*.cpp: what the scenario reader (scenario_parse.cpp) and the sweep's expansion
// (scenario_expand.cpp) share -- key tables and their hints, the error helper, a raw point's helpers. Not an API.
#pragma once

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_keys.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moc::scenario_detail {

bool contains(const std::vector<std::string>& v, std::string_view s);
// "a, b, c"
std::string join(const std::vector<std::string>& v);
// A key's declaration: an axis that is not one of the study's own dimensions is a model key.
const ScenarioKey& key_spec(KeySection s, std::string_view key);
// For hints: "batch = 4".
std::string example_of(KeySection s, std::string_view key);
// The ModelConfig key an axis sets, or "" for axes that are not model keys.
std::string model_key_of_axis(std::string_view axis);
[[noreturn]] void fail(const std::string& file, SourcePos p, std::string message, std::string hint);
// "[1, 2, \"x\"]": an axis's values as the file wrote them.
std::string values_text(const std::vector<ScenarioValue>& vs);

// A point before resolution: the (axis, value) pairs that define it.
using RawPoint = std::vector<std::pair<std::string, const ScenarioValue*>>;
const ScenarioValue* find_value(const RawPoint& p, std::string_view name);
// The point's identity: its sorted "axis=value" lines.
std::string raw_key(const RawPoint& p);
// "axis=value axis=value" in sweep order, for messages.
std::string raw_text(const RawPoint& p);
// The field a ConfigError from ModelConfig::validate() is about (its messages start with the field).
std::vector<std::string> blame_candidates(const std::string& msg);
// Splits "problem; what to do" (ConfigError's convention) into message and hint.
std::pair<std::string, std::string> split_hint(const std::string& what);

}  // namespace moc::scenario_detail
