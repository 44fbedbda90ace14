// PublishedCheckpoint::load, apart from the configuration (published.cpp): what reads a configuration (the
// scenario parser) does not link the weight readers.
#include "model/gguf_import.h"
#include "model/hf_checkpoint.h"
#include "model/published.h"

namespace moc {

void PublishedCheckpoint::load(Transformer& model) const {
  if (file_) load_gguf_weights(*file_, model);
  else load_hf_weights(path_, model);
}

}  // namespace moc
