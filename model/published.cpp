#include "model/published.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/checkpoint_config.h"

namespace moc {

bool is_published_checkpoint(const std::string& path) {
  if (is_hf_folder(path)) return true;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  return f.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

PublishedCheckpoint PublishedCheckpoint::open(const std::string& path) {
  PublishedCheckpoint c;
  c.path_ = path;
  if (is_hf_folder(path)) return c;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + " is a folder without config.json; a Hugging Face checkpoint folder holds config.json "
                      "and model.safetensors (or its index)");
  try {
    c.file_ = std::make_shared<const gguf::File>(gguf::File::open(path));
  } catch (const gguf::GgufError& e) {
    throw ConfigError(std::string(e.what()) + " (a checkpoint is a GGUF file or a Hugging Face folder with config.json)");
  }
  return c;
}

ModelConfig PublishedCheckpoint::config() const { return file_ ? gguf_config(*file_) : hf_config(path_); }

}  // namespace moc
