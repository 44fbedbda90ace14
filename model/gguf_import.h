// A llama-architecture GGUF (model/gguf.h) as a mocbench model: its configuration from the file's metadata and
// its weights dequantized into the model's layout. GGUF stores a [out, in] matrix as ggml dims {in, out}
// (PyTorch's row-major [out, in]); mocbench's projections are [in, out], so every matrix is transposed; the
// token embedding is [vocab, d] in both. llama.cpp's converter permutes the rows of the q and k projections
// for its RoPE layout (each head's two halves interleaved); the importer undoes that, so the model runs the
// Hugging Face layout mocbench uses. A file without output.weight ties the LM head to the embedding (copied).
#pragma once
#include "model/checkpoint_config.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/transformer.h"

namespace moc {

// gguf_config(f) -- the configuration (preset "gguf", fp32, dense FFN), refusing what mocbench lacks by metadata
// key (another architecture, a missing key, a rope dimension other than the head size) -- is in
// model/checkpoint_config.h.
// Fills every parameter of `model` (built from gguf_config(f), or with a MoC FFN on top of it) from the file;
// a tensor missing or of another shape is refused with its name.
void load_gguf_weights(const gguf::File& f, Transformer& model);

}  // namespace moc
