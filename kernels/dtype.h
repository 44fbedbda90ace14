// Element types and bf16 conversion shared by every backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace moc {

enum class DType : std::uint8_t { f32, bf16, i16, i32 };

constexpr std::size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::i16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

constexpr bool is_float(DType t) { return t == DType::f32 || t == DType::bf16; }

std::string_view dtype_name(DType t);
DType parse_dtype(std::string_view name);  // "f32"/"fp32", "bf16", "i16", "i32"; throws on others

// bf16 <-> f32, round-to-nearest-even; NaN stays NaN.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace moc
