#include "model/token_ids.h"

#include <fstream>
#include <sstream>

#include "model/config.h"

namespace moc {

std::vector<std::int32_t> parse_token_ids(const std::string& text, const std::string& where) {
  std::vector<std::int32_t> ids;
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size() || v < 0 || v > 0x7fffffff)
      throw ConfigError("'" + w.substr(0, 40) + "' (id " + std::to_string(ids.size()) + " of " + where +
                        ") is not a token id (a non-negative integer)");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  return ids;
}

std::vector<std::int32_t> read_token_ids(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_token_ids(ss.str(), path);
}

}  // namespace moc
