// GGUF files (llama.cpp's model format), read from the format's specification
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): the header ("GGUF", version 2 or 3, tensor and
// metadata counts), the metadata key/value pairs, the tensor infos (name, dimensions -- ggml order, the fastest
// first --, ggml type, offset) and the tensor data, which starts at the first multiple of general.alignment
// (default 32) after the infos. Dequantized to float here: F32, F16, BF16, Q8_0, Q4_0 and Q4_1; any other type
// is refused by name. A malformed file (truncated, an offset outside the data, an impossible count or
// dimension, an unknown value type) is refused with what is wrong and where; nothing is read past the end.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace moc::gguf {

struct GgufError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The metadata value types of the specification (gguf_metadata_value_type).
enum class ValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

// One metadata value: integers in i (signed) or u (unsigned), floats in f, text in s, arrays in items (of one
// element type).
struct Value {
  ValueType type = ValueType::u8;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  ValueType item_type = ValueType::u8;  // arrays
  std::vector<Value> items;
  // The value as an integer (any integer type; throws GgufError naming `key` otherwise), as a float (any number).
  std::int64_t as_int(const std::string& key) const;
  double as_number(const std::string& key) const;
};

// ggml's tensor types that mocbench reads (the numbers are ggml's).
enum class TensorType : std::uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q8_0 = 8, bf16 = 30 };
std::string tensor_type_name(std::uint32_t type);  // "Q4_K", "type 99", ...

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // ggml order: dims[0] varies fastest (a [out, in] matrix is {in, out})
  std::uint32_t type = 0;           // ggml type
  std::uint64_t offset = 0;         // from the start of the data section
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;  // 0 for a type mocbench does not know (it is refused when dequantized)
};

class File {
 public:
  // Reads and checks the whole structure (not the tensor values). Throws GgufError.
  static File open(const std::string& path);
  static File parse(std::string bytes, const std::string& name = "<memory>");

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  const std::map<std::string, Value>& metadata() const { return meta_; }
  const Value* find(const std::string& key) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* tensor(const std::string& name) const;
  // The tensor's values as floats, in ggml order (dims[0] fastest). Throws GgufError for a type other than
  // F32, F16, BF16, Q8_0, Q4_0, Q4_1 (naming it).
  std::vector<float> dequantize(const TensorInfo& t) const;

 private:
  std::string name_, bytes_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32, data_start_ = 0;
  std::map<std::string, Value> meta_;
  std::vector<TensorInfo> tensors_;
};

// IEEE half and bfloat16 to float (exact).
float half_to_float(std::uint16_t h);
float bf16_to_float(std::uint16_t h);

}  // namespace moc::gguf
