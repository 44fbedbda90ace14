// Moving a checkpoint's tensors into a model's parameters and back, shared by the checkpoint readers and writers
// (gguf_import.cpp, hf_checkpoint.cpp): a parameter by name, a row-major transpose, and a matrix's logical values
// against its stored shape (FFN matrices carry zero padding channels: [d, Fp] columns or [Fp, d] rows).
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "model/transformer.h"

namespace moc::param_io {

// The parameter `name`; ConfigError "<who>: the model has no parameter <name><why>" when there is none.
inline Param& find(Transformer& m, const std::string& name, const std::string& who, const std::string& why = "") {
  for (auto& p : m.params())
    if (p.name == name) return p;
  throw ConfigError(who + ": the model has no parameter " + name + why);
}

// [rows, cols] row-major -> [cols, rows].
inline std::vector<float> transpose(const std::vector<float>& w, std::size_t rows, std::size_t cols) {
  std::vector<float> t(w.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = w[r * cols + c];
  return t;
}

// Uploads logical values [rows, cols] (a vector: all of it) into p, zero in its padding.
inline void upload_logical(Ops& o, Param& p, const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  if (p.value.shape().size() == 1) {
    o.upload_f32(p.value, v);
    return;
  }
  const auto R = static_cast<std::size_t>(p.value.dim(0)), C = static_cast<std::size_t>(p.value.dim(1));
  std::vector<float> s(R * C, 0.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) s[r * C + c] = v[r * cols + c];
  o.upload_f32(p.value, s);
}

// p's logical values [rows, cols] (a vector: all of it), without its padding.
inline std::vector<float> download_logical(Ops& o, const Param& p, std::size_t rows, std::size_t cols) {
  const auto v = o.download_f32(p.value);
  if (p.value.shape().size() == 1) return v;
  const auto C = static_cast<std::size_t>(p.value.dim(1));
  std::vector<float> out(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) out[r * cols + c] = v[r * C + c];
  return out;
}

}  // namespace moc::param_io
