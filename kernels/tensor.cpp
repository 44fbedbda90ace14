#include "kernels/tensor.h"

#include <sstream>
#include <stdexcept>

namespace moc {

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (std::size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << ']';
  return o.str();
}

static std::int64_t product(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Tensor Tensor::empty(Allocator& alloc, DeviceKind dev, const Shape& shape, DType dt, const MemTag& tag) {
  for (auto d : shape)
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dt;
  t.device_ = dev;
  t.storage_ = std::make_shared<Storage>(&alloc, static_cast<std::size_t>(product(shape)) * dtype_bytes(dt), tag);
  return t;
}

std::int64_t Tensor::numel() const { return product(shape_); }

Tensor Tensor::reshape(const Shape& s) const {
  if (product(s) != numel())
    throw std::invalid_argument("reshape " + shape_str(shape_) + " -> " + shape_str(s) + " changes element count");
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice0(std::int64_t begin, std::int64_t end) const {
  if (rank() == 0 || begin < 0 || end > shape_[0] || begin > end)
    throw std::out_of_range("slice0 [" + std::to_string(begin) + "," + std::to_string(end) + ") of " + shape_str(shape_));
  Tensor t = *this;
  std::int64_t row = numel() / shape_[0];
  t.offset_bytes_ += static_cast<std::size_t>(begin * row) * dtype_bytes(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i16: return "i16";
    case DType::i32: return "i32";
  }
  return "?";
}

DType parse_dtype(std::string_view n) {
  if (n == "f32" || n == "fp32" || n == "float32") return DType::f32;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "i16" || n == "int16") return DType::i16;
  if (n == "i32" || n == "int32") return DType::i32;
  throw std::invalid_argument("unknown dtype '" + std::string(n) + "' (use f32, bf16, i16 or i32)");
}

}  // namespace moc
