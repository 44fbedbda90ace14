// A published checkpoint's configuration, without its weights (model/published.h): from a Hugging Face folder's
// config.json, or a GGUF file's metadata. What mocbench does not run is refused with the key and the reason.
// Plain C++ on the configuration (no Ops, no Transformer): the scenario parser reads configurations through it.
#pragma once
#include <string>

#include "model/config.h"
#include "model/gguf.h"

namespace moc {

// Whether `path` is a folder holding config.json.
bool is_hf_folder(const std::string& path);

// The configuration (fp32, dense FFN or Mixtral's experts) from config.json's text; `what` names the source in
// messages. Throws ConfigError naming the key.
ModelConfig hf_config_from_json(const std::string& json_text, const std::string& what);
ModelConfig hf_config(const std::string& dir);

// The configuration (fp32, dense FFN) from a GGUF's llama.* metadata. Throws ConfigError naming the key.
ModelConfig gguf_config(const gguf::File& f);

}  // namespace moc
