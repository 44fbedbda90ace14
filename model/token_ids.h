// Token ids as text: whitespace-separated non-negative integers (what scripts/tokenize_gguf.py writes and
// `mocbench eval --ids / --tokens`, `generate --ids` and a scenario's `[data] tokens` read). One parser for all.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moc {

// Throws ConfigError "'WORD' (id N of WHERE) is not a token id (a non-negative integer)" for the first word that
// is not one (at most 2^31 - 1).
std::vector<std::int32_t> parse_token_ids(const std::string& text, const std::string& where);
// The file's text through parse_token_ids; throws ConfigError when it cannot be read.
std::vector<std::int32_t> read_token_ids(const std::string& path);

}  // namespace moc
