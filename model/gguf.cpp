#include "model/gguf.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "kernels/dtype.h"

namespace moc::gguf {

namespace {

// Everything a reader needs to refuse a malformed file without reading past its end: a cursor over the
// bytes, every read bounds-checked, every count checked against the bytes left before anything is allocated.
class Reader {
 public:
  Reader(const std::string& bytes, const std::string& name) : b_(bytes), name_(name) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw GgufError(name_ + ": " + what + " (at byte " + std::to_string(pos_) + " of " + std::to_string(b_.size()) +
                    ")");
  }
  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return b_.size() - pos_; }

  template <class T>
  T get(const char* what) {
    if (left() < sizeof(T)) fail(std::string("truncated: ") + what + " needs " + std::to_string(sizeof(T)) + " bytes");
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const auto n = get<std::uint64_t>(what);
    if (n > left())
      fail(std::string("truncated: ") + what + " says " + std::to_string(n) + " bytes, " + std::to_string(left()) +
           " are left");
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A count of items of at least `min_bytes` each: no more than the bytes left can hold.
  std::uint64_t count(const char* what, std::uint64_t min_bytes) {
    const auto n = get<std::uint64_t>(what);
    if (min_bytes > 0 && n > left() / min_bytes)
      fail(std::string(what) + " is " + std::to_string(n) + ", more than the " + std::to_string(left()) +
           " bytes left can hold");
    return n;
  }

 private:
  const std::string& b_;
  const std::string& name_;
  std::uint64_t pos_ = 0;
};

// The smallest encoding of a value of each type (for count checks): a string or array is at least its length.
std::uint64_t min_size(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean: return 1;
    case ValueType::u16:
    case ValueType::i16: return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32: return 4;
    case ValueType::string:
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64: return 8;
    case ValueType::array: return 12;
  }
  return 1;
}

bool known(std::uint32_t t) { return t <= static_cast<std::uint32_t>(ValueType::f64); }

Value read_value(Reader& r, ValueType t, int depth) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::u8: v.u = r.get<std::uint8_t>("a u8 value"); v.i = static_cast<std::int64_t>(v.u); break;
    case ValueType::i8: v.i = r.get<std::int8_t>("an i8 value"); break;
    case ValueType::u16: v.u = r.get<std::uint16_t>("a u16 value"); v.i = static_cast<std::int64_t>(v.u); break;
    case ValueType::i16: v.i = r.get<std::int16_t>("an i16 value"); break;
    case ValueType::u32: v.u = r.get<std::uint32_t>("a u32 value"); v.i = static_cast<std::int64_t>(v.u); break;
    case ValueType::i32: v.i = r.get<std::int32_t>("an i32 value"); break;
    case ValueType::u64: v.u = r.get<std::uint64_t>("a u64 value"); v.i = static_cast<std::int64_t>(v.u); break;
    case ValueType::i64: v.i = r.get<std::int64_t>("an i64 value"); break;
    case ValueType::f32: v.f = r.get<float>("an f32 value"); break;
    case ValueType::f64: v.f = r.get<double>("an f64 value"); break;
    case ValueType::boolean: {
      const auto x = r.get<std::uint8_t>("a bool value");
      if (x > 1) r.fail("a bool value is " + std::to_string(x) + ", not 0 or 1");
      v.b = x == 1;
      break;
    }
    case ValueType::string: v.s = r.string("a string value"); break;
    case ValueType::array: {
      if (depth >= 4) r.fail("arrays nested deeper than 4");
      const auto it = r.get<std::uint32_t>("an array's item type");
      if (!known(it)) r.fail("unknown array item type " + std::to_string(it));
      v.item_type = static_cast<ValueType>(it);
      const auto n = r.count("an array's length", min_size(v.item_type));
      v.items.reserve(n);
      for (std::uint64_t k = 0; k < n; ++k) v.items.push_back(read_value(r, v.item_type, depth + 1));
      break;
    }
  }
  return v;
}

// Bytes of `elements` values of a ggml type, 0 when mocbench does not know the type; throws when a block type's
// element count is not a whole number of blocks.
std::uint64_t tensor_bytes(Reader& r, const std::string& name, std::uint32_t type, std::uint64_t elements) {
  auto blocks = [&](std::uint64_t block, std::uint64_t size) {
    if (elements % block != 0)
      r.fail("tensor '" + name + "' of type " + tensor_type_name(type) + " has " + std::to_string(elements) +
             " values, not a whole number of " + std::to_string(block) + "-value blocks");
    return elements / block * size;
  };
  switch (static_cast<TensorType>(type)) {
    case TensorType::f32: return elements * 4;
    case TensorType::f16:
    case TensorType::bf16: return elements * 2;
    case TensorType::q8_0: return blocks(32, 34);
    case TensorType::q4_0: return blocks(32, 18);
    case TensorType::q4_1: return blocks(32, 20);
  }
  return 0;
}

TensorInfo read_tensor_info(Reader& r) {
  TensorInfo t;
  t.name = r.string("a tensor name");
  const auto nd = r.get<std::uint32_t>("a tensor's dimension count");
  if (nd == 0 || nd > 4) r.fail("tensor '" + t.name + "' has " + std::to_string(nd) + " dimensions (1 to 4 allowed)");
  t.elements = 1;
  for (std::uint32_t d = 0; d < nd; ++d) {
    const auto n = r.get<std::uint64_t>("a tensor dimension");
    if (n == 0 || n > (std::uint64_t{1} << 40) || t.elements > (std::uint64_t{1} << 50) / n)
      r.fail("tensor '" + t.name + "' has an impossible dimension " + std::to_string(n));
    t.dims.push_back(n);
    t.elements *= n;
  }
  t.type = r.get<std::uint32_t>("a tensor type");
  t.offset = r.get<std::uint64_t>("a tensor offset");
  t.bytes = tensor_bytes(r, t.name, t.type, t.elements);
  return t;
}

}  // namespace

std::int64_t Value::as_int(const std::string& key) const {
  switch (type) {
    case ValueType::u8:
    case ValueType::u16:
    case ValueType::u32:
    case ValueType::u64:
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw GgufError("metadata " + key + " is too large: " + std::to_string(u));
      return static_cast<std::int64_t>(u);
    case ValueType::i8:
    case ValueType::i16:
    case ValueType::i32:
    case ValueType::i64: return i;
    default: throw GgufError("metadata " + key + " is not an integer");
  }
}

double Value::as_number(const std::string& key) const {
  if (type == ValueType::f32 || type == ValueType::f64) return f;
  return static_cast<double>(as_int(key));
}

std::string tensor_type_name(std::uint32_t type) {
  // ggml's names for the types a published GGUF may hold (ggml.h's enum ggml_type).
  static const std::map<std::uint32_t, const char*> names = {
      {0, "F32"},    {1, "F16"},    {2, "Q4_0"},  {3, "Q4_1"},  {6, "Q5_0"},    {7, "Q5_1"},   {8, "Q8_0"},
      {9, "Q8_1"},   {10, "Q2_K"},  {11, "Q3_K"}, {12, "Q4_K"}, {13, "Q5_K"},   {14, "Q6_K"},  {15, "Q8_K"},
      {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"},
      {22, "IQ2_S"}, {23, "IQ4_XS"}, {24, "I8"},  {25, "I16"},  {26, "I32"},    {27, "I64"},   {28, "F64"},
      {29, "IQ1_M"}, {30, "BF16"},  {34, "TQ1_0"}, {35, "TQ2_0"}};
  const auto it = names.find(type);
  return it != names.end() ? it->second : "type " + std::to_string(type);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24
      const float v = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -v : v;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(std::uint16_t h) { return bf16_to_f32(h); }

File File::open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw GgufError(path + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

File File::parse(std::string bytes, const std::string& name) {
  File f;
  f.name_ = name;
  f.bytes_ = std::move(bytes);
  Reader r(f.bytes_, f.name_);
  if (r.left() < 4 || f.bytes_.compare(0, 4, "GGUF") != 0) r.fail("not a GGUF file: it does not start with \"GGUF\"");
  r.get<std::uint32_t>("the magic");
  f.version_ = r.get<std::uint32_t>("the version");
  if (f.version_ == 0x03000000u || f.version_ == 0x02000000u) r.fail("a big-endian GGUF file (not supported)");
  if (f.version_ != 2 && f.version_ != 3)
    r.fail("GGUF version " + std::to_string(f.version_) + " (versions 2 and 3 are read)");
  // Each tensor info is at least 8 (name length) + 4 + 8 + 4 + 8 bytes; each key/value 8 + 4 + 1.
  const auto n_tensors = r.count("the tensor count", 32);
  const auto n_kv = r.count("the metadata count", 13);
  for (std::uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.string("a metadata key");
    const auto t = r.get<std::uint32_t>("a metadata value type");
    if (!known(t)) r.fail("metadata " + key + " has unknown value type " + std::to_string(t));
    Value v = read_value(r, static_cast<ValueType>(t), 0);
    if (!f.meta_.emplace(key, std::move(v)).second) r.fail("metadata key " + key + " appears twice");
  }
  if (const Value* a = f.find("general.alignment")) {
    if (a->type != ValueType::u32) r.fail("general.alignment is not a u32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) r.fail("general.alignment " + std::to_string(a->u) + " is not a power of 2");
    f.alignment_ = a->u;
  }
  f.tensors_.reserve(n_tensors);
  for (std::uint64_t k = 0; k < n_tensors; ++k) f.tensors_.push_back(read_tensor_info(r));
  f.data_start_ = (r.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  const std::uint64_t data_bytes = f.bytes_.size() >= f.data_start_ ? f.bytes_.size() - f.data_start_ : 0;
  for (const auto& t : f.tensors_) {
    if (t.offset % f.alignment_ != 0)
      r.fail("tensor '" + t.name + "' starts at offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
             std::to_string(f.alignment_));
    if (t.bytes > 0 && (t.offset > data_bytes || t.bytes > data_bytes - t.offset))
      r.fail("tensor '" + t.name + "' (" + std::to_string(t.bytes) + " bytes at offset " + std::to_string(t.offset) +
             ") reaches past the end of the data (" + std::to_string(data_bytes) + " bytes): truncated or a bad offset");
  }
  for (std::size_t i = 0; i < f.tensors_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (f.tensors_[i].name == f.tensors_[j].name) r.fail("tensor '" + f.tensors_[i].name + "' appears twice");
  return f;
}

const Value* File::find(const std::string& key) const {
  const auto it = meta_.find(key);
  return it == meta_.end() ? nullptr : &it->second;
}

const TensorInfo* File::tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<float> File::dequantize(const TensorInfo& t) const {
  if (t.bytes == 0)
    throw GgufError(name_ + ": tensor '" + t.name + "' is of type " + tensor_type_name(t.type) +
                    ", which mocbench does not read (F32, F16, BF16, Q8_0, Q4_0 and Q4_1 are read)");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes_.data() + data_start_ + t.offset);
  auto u16 = [](const unsigned char* q) { return static_cast<std::uint16_t>(q[0] | (q[1] << 8)); };
  std::vector<float> out(t.elements);
  const std::uint64_t n = t.elements;
  switch (static_cast<TensorType>(t.type)) {
    case TensorType::f32: std::memcpy(out.data(), p, n * 4); break;
    case TensorType::f16:
      for (std::uint64_t i = 0; i < n; ++i) out[i] = half_to_float(u16(p + 2 * i));
      break;
    case TensorType::bf16:
      for (std::uint64_t i = 0; i < n; ++i) out[i] = bf16_to_float(u16(p + 2 * i));
      break;
    case TensorType::q8_0:  // blocks of 32: f16 scale, 32 int8
      for (std::uint64_t b = 0; b < n / 32; ++b) {
        const unsigned char* q = p + b * 34;
        const float d = half_to_float(u16(q));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * static_cast<float>(static_cast<std::int8_t>(q[2 + j]));
      }
      break;
    case TensorType::q4_0:  // blocks of 32: f16 scale, 16 bytes; value j low nibble, value j + 16 high, minus 8
      for (std::uint64_t b = 0; b < n / 32; ++b) {
        const unsigned char* q = p + b * 18;
        const float d = half_to_float(u16(q));
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * static_cast<float>((q[2 + j] & 0x0f) - 8);
          out[b * 32 + j + 16] = d * static_cast<float>((q[2 + j] >> 4) - 8);
        }
      }
      break;
    case TensorType::q4_1:  // blocks of 32: f16 scale, f16 minimum, 16 bytes of nibbles as Q4_0 (unsigned)
      for (std::uint64_t b = 0; b < n / 32; ++b) {
        const unsigned char* q = p + b * 20;
        const float d = half_to_float(u16(q)), m = half_to_float(u16(q + 2));
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * static_cast<float>(q[4 + j] & 0x0f) + m;
          out[b * 32 + j + 16] = d * static_cast<float>(q[4 + j] >> 4) + m;
        }
      }
      break;
  }
  return out;
}

}  // namespace moc::gguf
