// Checkpoints in the safetensors format (model/safetensors.h): a model's weights under their parameter names
// ("embed", "layer0.wq", "layer3.expert1.w_down", ...) in their logical shapes (the FFN's zero padding
// channels are not written: w_gate / w_up are [d, d_ffn], w_down [d_ffn, d]) and dtypes (F32 or BF16), and,
// for resuming, the optimizer's state ("optim.m.<name>", "optim.v.<name>", "optim.master.<name>") and the
// step count. Metadata records the format, the model's description and the step. Loading checks every name
// and shape and converts F32 <-> BF16; anything missing or extra is refused with its name.
#pragma once
#include <map>
#include <string>

#include "model/trainer.h"
#include "model/transformer.h"

namespace moc {

struct CheckpointInfo {
  std::map<std::string, std::string> metadata;
  int step = 0;             // optimizer steps taken (0 for weights saved without a trainer)
  bool has_optimizer = false;
};

// The model must be in its training layout (not prepare_decode'd). With a trainer, its state is saved too.
void save_checkpoint(const std::string& path, Transformer& model, const Trainer* trainer = nullptr);
// Weights only (the optimizer's tensors in the file are ignored). Call before prepare_decode. A published
// checkpoint (a GGUF file or a Hugging Face folder: model/published.h) is loaded too (no metadata returned).
CheckpointInfo load_weights(const std::string& path, Transformer& model);
// Weights, the optimizer's state and its step count: training resumes where it was saved.
CheckpointInfo load_checkpoint(const std::string& path, Transformer& model, Trainer& trainer);

}  // namespace moc
