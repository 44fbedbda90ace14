// Helpers shared by the CPU backend's translation units: fp32 views of f32/bf16 tensors.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace moc::cpu {

// Read-only fp32 view; bf16 tensors are converted into a private buffer.
class F32In {
 public:
  explicit F32In(const Tensor& t);
  const float* get() const { return p_; }
  float operator[](std::int64_t i) const { return p_[i]; }

 private:
  const float* p_ = nullptr;
  std::vector<float> buf_;
};

// Writable fp32 view; a bf16 tensor is loaded (if asked) and written back, rounded, on destruction.
class F32Out {
 public:
  F32Out(Tensor& t, bool load_existing);
  ~F32Out();
  F32Out(const F32Out&) = delete;
  F32Out& operator=(const F32Out&) = delete;
  float* get() { return p_; }
  float& operator[](std::int64_t i) { return p_[i]; }

 private:
  Tensor* t_;
  float* p_ = nullptr;
  std::vector<float> buf_;
};

inline const std::uint16_t* idx_ptr(const Tensor& idx) {
  if (idx.dtype() != DType::i16) throw std::invalid_argument("channel indices must be i16");
  return idx.data<std::uint16_t>();
}

inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x * sigmoid(x); }  // same rounding as the backward recompute

}  // namespace moc::cpu
