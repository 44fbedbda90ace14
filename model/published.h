// Published checkpoints (issue #29): a GGUF file (llama architecture) or a Hugging Face folder (config.json +
// safetensors), as one thing the CLI (`eval`, `generate`, `convert`) and scenarios (`[model] weights`) open:
// the configuration comes from the checkpoint, then its weights fill a model built from that configuration
// (or from it with a MoC FFN on top: training-free MoC). mocbench's own safetensors checkpoints
// (model/checkpoint.h) are not published ones: they carry no configuration.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "model/config.h"
#include "model/gguf.h"
#include "model/transformer.h"

namespace moc {

// Whether `path` names a published checkpoint: a folder holding config.json, or a file starting with GGUF's
// magic. Reads at most four bytes.
bool is_published_checkpoint(const std::string& path);

class PublishedCheckpoint {
 public:
  // Throws ConfigError saying what `path` is not (a folder without config.json, a file that is not GGUF, a
  // malformed GGUF with what is wrong).
  static PublishedCheckpoint open(const std::string& path);
  const std::string& path() const { return path_; }
  bool hugging_face() const { return !file_; }
  // fp32 parameters; the FFN as the checkpoint has it (dense, or Mixtral's experts).
  ModelConfig config() const;
  // Every parameter of `model` (built from config(), FFN variant and dtypes aside).
  void load(Transformer& model) const;

 private:
  std::string path_;
  std::shared_ptr<const gguf::File> file_;  // null for a Hugging Face folder
};

}  // namespace moc
