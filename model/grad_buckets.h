// Gradient buckets for data-parallel training (issue 15, part): gradients are all-reduced in buckets of
// about `cap_bytes`, each launched as soon as its last gradient is final, so communication overlaps the rest
// of the backward pass (PyTorch DDP's scheme). A gradient is final when backward has passed its parameter:
// the LM head first, then the final norm, the layers from the last to the first, the embedding last.
// A bucket is a flat buffer: each gradient at an offset aligned to `align` bytes.
#pragma once
#include <cstddef>
#include <vector>

namespace moc {

struct GradBucket {
  std::vector<std::size_t> params;   // indices into the parameter list, in the order they become final
  std::vector<std::size_t> offsets;  // byte offset of each in the bucket's buffer
  std::size_t bytes = 0;             // the buffer's size (aligned)
};

// ready_order: parameter indices in the order backward finalizes their gradients; bytes[i]: gradient i's
// size. Buckets follow ready_order; a bucket closes when the next gradient would take it past cap_bytes (a
// gradient larger than the cap gets a bucket of its own). Every parameter is in exactly one bucket.
// Throws std::invalid_argument when ready_order is not a permutation of the parameters.
std::vector<GradBucket> plan_buckets(const std::vector<std::size_t>& ready_order, const std::vector<std::size_t>& bytes,
                                     std::size_t cap_bytes, std::size_t align = 256);

}  // namespace moc
