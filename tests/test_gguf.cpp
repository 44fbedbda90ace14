// The GGUF reader (model/gguf.h) on files built here byte by byte from the format's specification: the
// header, metadata of every value type, tensor infos, alignment, and each tensor type's dequantization
// against values chosen so that the expected floats are known exactly; malformed files (truncated anywhere,
// an offset past the data, an unaligned offset, a bad count, an unknown type) refused with what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "tests/test_util.h"

using namespace moc::gguf;

namespace {

// A little-endian GGUF writer for fixtures.
struct Writer {
  std::string b;
  template <class T>
  void put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    put<std::uint64_t>(s.size());
    b += s;
  }
};

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type;
  std::string data;
};

struct Meta {
  std::string key;
  std::uint32_t type;
  std::string encoded;  // the value's bytes
};

std::string u32_bytes(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

std::string build(const std::vector<Meta>& meta, const std::vector<Tensor>& tensors, std::uint64_t align = 32,
                  std::uint32_t version = 3) {
  Writer w;
  w.b = "GGUF";
  w.put<std::uint32_t>(version);
  w.put<std::uint64_t>(tensors.size());
  w.put<std::uint64_t>(meta.size());
  for (const auto& m : meta) {
    w.str(m.key);
    w.put<std::uint32_t>(m.type);
    w.b += m.encoded;
  }
  std::uint64_t off = 0;
  std::vector<std::uint64_t> offsets;
  for (const auto& t : tensors) {
    w.str(t.name);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims) w.put<std::uint64_t>(d);
    w.put<std::uint32_t>(t.type);
    w.put<std::uint64_t>(off);
    offsets.push_back(off);
    off += (t.data.size() + align - 1) / align * align;
  }
  while (w.b.size() % align) w.b.push_back('\0');
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    w.b += tensors[i].data;
    while (w.b.size() % align) w.b.push_back('\0');
  }
  return w.b;
}

std::uint16_t to_half(float f) {  // exact for the values used here (representable halves)
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  const std::uint32_t mant = (x >> 13) & 0x3ffu;
  if ((x & 0x7fffffffu) == 0) return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) | mant);
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string string_value(const std::string& s) {
  Writer w;
  w.str(s);
  return w.b;
}

}  // namespace

TEST(Gguf, HalfAndBf16ConvertExactly) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24)) << "the smallest subnormal";
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc0a0), -5.0f);
}

TEST(Gguf, MetadataOfEveryTypeAndTheAlignment) {
  Writer arr;
  arr.put<std::uint32_t>(static_cast<std::uint32_t>(ValueType::string));
  arr.put<std::uint64_t>(2);
  arr.str("a");
  arr.str("bc");
  const std::vector<Meta> meta = {
      {"general.architecture", 8, string_value("llama")},
      {"general.alignment", 4, u32_bytes(64)},
      {"llama.block_count", 4, u32_bytes(30)},
      {"x.i8", 1, std::string(1, static_cast<char>(-3))},
      {"x.f32", 6, std::string("\x00\x00\xc0\x3f", 4)},  // 1.5
      {"x.bool", 7, std::string(1, '\1')},
      {"x.i64", 11, std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8)},
      {"tokenizer.ggml.tokens", 9, arr.b},
  };
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const File f = File::parse(build(meta, {{"w", {3, 2}, 0, raw(w)}}, 64));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.find("general.architecture")->s, "llama");
  EXPECT_EQ(f.find("llama.block_count")->as_int("llama.block_count"), 30);
  EXPECT_EQ(f.find("x.i8")->as_int("x.i8"), -3);
  EXPECT_EQ(f.find("x.f32")->as_number("x.f32"), 1.5);
  EXPECT_TRUE(f.find("x.bool")->b);
  EXPECT_EQ(f.find("x.i64")->as_int("x.i64"), -1);
  const Value* tokens = f.find("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens->items.size(), 2u);
  EXPECT_EQ(tokens->items[1].s, "bc");
  EXPECT_THROW((void)f.find("general.architecture")->as_int("general.architecture"), GgufError);
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensor("w")->dims, (std::vector<std::uint64_t>{3, 2}));
  EXPECT_EQ(f.dequantize(*f.tensor("w")), w);
}

// Every type on fresh random values: F32 as stored, F16 / BF16 through exact conversions of random bit
// patterns, and the block types on random quants and scales whose products are exact in float.
TEST(Gguf, EachTensorTypeDequantizesToTheValuesItEncodes) {
  const auto seed = moc::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int blocks = 3, n = 32 * blocks;
  std::vector<float> f32(n), want16(n), wantbf(n), want8(n), want40(n), want41(n);
  std::vector<std::uint16_t> h16(n), hbf(n);
  std::string q8, q40, q41;
  std::uniform_real_distribution<float> u(-4, 4);
  for (int i = 0; i < n; ++i) {
    f32[i] = u(rng);
    const float half_exact = std::round(u(rng) * 256) / 256;  // 8 fractional bits: a half holds it
    h16[i] = to_half(half_exact);
    want16[i] = half_exact;
    const std::uint32_t top = rng() & 0xffffu;
    const std::uint16_t b = static_cast<std::uint16_t>((top & 0x7f80u) == 0x7f80u ? top & 0xbfffu : top);  // no inf/nan
    hbf[i] = b;
    std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
    std::memcpy(&wantbf[i], &bits, 4);
  }
  const float scales[] = {0.5f, -0.25f, 2.0f};
  for (int blk = 0; blk < blocks; ++blk) {
    const float d = scales[blk], m = -1.5f;
    const std::uint16_t dh = to_half(d), mh = to_half(m);
    q8.append(reinterpret_cast<const char*>(&dh), 2);
    q40.append(reinterpret_cast<const char*>(&dh), 2);
    q41.append(reinterpret_cast<const char*>(&dh), 2);
    q41.append(reinterpret_cast<const char*>(&mh), 2);
    for (int j = 0; j < 32; ++j) {
      const auto q = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
      q8.push_back(static_cast<char>(q));
      want8[blk * 32 + j] = d * q;
    }
    for (int j = 0; j < 16; ++j) {
      const int lo = static_cast<int>(rng() % 16), hi = static_cast<int>(rng() % 16);
      q40.push_back(static_cast<char>(lo | (hi << 4)));
      q41.push_back(static_cast<char>(lo | (hi << 4)));
      want40[blk * 32 + j] = d * static_cast<float>(lo - 8);
      want40[blk * 32 + j + 16] = d * static_cast<float>(hi - 8);
      want41[blk * 32 + j] = d * static_cast<float>(lo) + m;
      want41[blk * 32 + j + 16] = d * static_cast<float>(hi) + m;
    }
  }
  const File f = File::parse(build({}, {{"f32", {32, 3}, 0, raw(f32)},
                                        {"f16", {32, 3}, 1, raw(h16)},
                                        {"bf16", {96}, 30, raw(hbf)},
                                        {"q8_0", {32, 3}, 8, q8},
                                        {"q4_0", {96}, 2, q40},
                                        {"q4_1", {48, 2}, 3, q41}}));
  EXPECT_EQ(f.dequantize(*f.tensor("f32")), f32);
  EXPECT_EQ(f.dequantize(*f.tensor("f16")), want16);
  EXPECT_EQ(f.dequantize(*f.tensor("bf16")), wantbf);
  EXPECT_EQ(f.dequantize(*f.tensor("q8_0")), want8);
  EXPECT_EQ(f.dequantize(*f.tensor("q4_0")), want40);
  EXPECT_EQ(f.dequantize(*f.tensor("q4_1")), want41);
}

TEST(Gguf, AnotherTensorTypeIsRefusedByName) {
  const File f = File::parse(build({}, {{"k", {256}, 12, std::string(144, '\0')}}));
  try {
    (void)f.dequantize(*f.tensor("k"));
    ADD_FAILURE() << "read";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
  }
}

// Cut at every byte, a file is refused (never read past its end); so are bad offsets, counts and types.
TEST(Gguf, MalformedFilesAreRefusedWithWhatIsWrong) {
  const std::vector<float> w(64, 1.0f);
  const std::string good = build({{"general.architecture", 8, string_value("llama")}}, {{"w", {64}, 0, raw(w)}});
  ASSERT_NO_THROW((void)File::parse(good));
  for (std::size_t cut = 0; cut < good.size(); ++cut)
    EXPECT_THROW((void)File::parse(good.substr(0, cut)), GgufError) << "cut at " << cut;
  auto refused = [](const std::string& bytes, const std::string& says) {
    try {
      (void)File::parse(bytes);
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("GGML" + good.substr(4), "not a GGUF file");
  std::string v1 = good;
  v1[4] = 1;
  refused(v1, "GGUF version 1");
  // The tensor's offset moved past the data, then off the alignment: header 24 bytes, then the info's name
  // (8 + 1), dimension count (4), dimension (8) and type (4), then the offset.
  std::string far = build({}, {{"w", {64}, 0, raw(w)}});
  const std::size_t off_at = 24 + 9 + 4 + 8 + 4;
  std::uint64_t bad = 4096;
  std::memcpy(far.data() + off_at, &bad, 8);
  refused(far, "reaches past the end of the data");
  bad = 4;
  std::memcpy(far.data() + off_at, &bad, 8);
  refused(far, "not a multiple of the alignment");
  refused(build({{"k", 99, ""}}, {}), "unknown value type 99");
  refused(build({}, {{"q", {33}, 2, std::string(18, '\0')}}), "not a whole number of 32-value blocks");
  refused(build({}, {{"z", {0}, 0, ""}}), "impossible dimension 0");
  Writer huge;
  huge.b = "GGUF";
  huge.put<std::uint32_t>(3);
  huge.put<std::uint64_t>(std::uint64_t{1} << 60);
  huge.put<std::uint64_t>(0);
  refused(huge.b, "the tensor count is");
}
