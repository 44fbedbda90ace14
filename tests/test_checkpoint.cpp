// Checkpoints (issue 14, part): the safetensors reader/writer against the format's rules (round trip, a
// hand-made file byte for byte, refusals of corrupt files with a message), and model checkpoints: weights
// round trip exactly (f32 and bf16, dense / MoC / MoE, the FFN's padding dropped and restored), F32 <->
// BF16 conversion on load, refusal of another model's checkpoint, and resuming training from a checkpoint
// equals uninterrupted training exactly (CPU).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "shell_util.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;
namespace fs = std::filesystem;

class Checkpoint : public moc::test::ScratchDirTest {};

std::vector<unsigned char> bytes_of(const std::vector<float>& v) {
  std::vector<unsigned char> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST_F(Checkpoint, SafetensorsRoundTripsAndMatchesTheFormatByteForByte) {
  std::vector<SafeTensor> ts = {{"b", "F32", {2, 3}, bytes_of({1, 2, 3, 4, 5, 6})},
                                {"a.scalar", "I32", {}, {7, 0, 0, 0}},
                                {"empty", "BF16", {0, 5}, {}}};
  write_safetensors(path("x.safetensors"), ts, {{"format", "test"}});
  const auto f = read_safetensors(path("x.safetensors"));
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.metadata.at("format"), "test");
  for (const auto& t : ts) {
    const SafeTensor* g = f.find(t.name);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(g->dtype, t.dtype);
    EXPECT_EQ(g->shape, t.shape);
    EXPECT_EQ(g->data, t.data);
  }
  // The layout itself: an 8-byte little-endian header size, a JSON header padded to 8 bytes, the buffer.
  std::ifstream in(path("x.safetensors"), std::ios::binary);
  std::vector<unsigned char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(raw[static_cast<std::size_t>(i)]) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 24 + 4);
  const std::string header(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_NE(header.find("\"b\":{\"data_offsets\":[0,24],\"dtype\":\"F32\",\"shape\":[2,3]}"), std::string::npos) << header;
  // A file written by hand from the specification reads back.
  const std::string h = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const auto w = bytes_of({0.5f, -2.0f});
  // Byte by byte: GCC 12 -O3 misreads range inserts into a small vector as out-of-bounds copies.
  std::vector<unsigned char> hand;
  for (int i = 0; i < 8; ++i) hand.push_back(i == 0 ? static_cast<unsigned char>(h.size()) : 0);
  for (char ch : h) hand.push_back(static_cast<unsigned char>(ch));
  for (unsigned char x : w) hand.push_back(x);
  const auto g = parse_safetensors(hand, "hand");
  ASSERT_EQ(g.tensors.size(), 1u);
  EXPECT_EQ(g.tensors[0].data, w);
}

TEST_F(Checkpoint, CorruptSafetensorsFilesAreRefusedWithAMessage) {
  auto file = [](const std::string& header, std::size_t buffer) {
    std::vector<unsigned char> b;
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<unsigned char>(header.size() >> (8 * i)));
    for (char ch : header) b.push_back(static_cast<unsigned char>(ch));
    b.resize(b.size() + buffer, 0);
    return b;
  };
  const std::vector<std::pair<std::vector<unsigned char>, std::string>> bad = {
      {{1, 2, 3}, "shorter than"},
      {file("{", 0), "not JSON"},
      {file("[1]", 0), "not a JSON object"},
      {file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "need 8"},
      {file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "no tensor covers"},
      {file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "hole"},
      {file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4), "overlap"},
      {file(R"({"a":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}})", 4), "unknown safetensors dtype"},
      {file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 2), "outside the data buffer"},
      {file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative"},
  };
  for (const auto& [b, needle] : bad) {
    try {
      (void)parse_safetensors(b, "bad.safetensors");
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const SafeTensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    }
  }
  std::vector<unsigned char> huge(8, 0xff);
  EXPECT_THROW((void)parse_safetensors(huge, "huge"), SafeTensorsError);
}

ModelConfig cfg_of(const char* p, const char* ffn, DType dt, std::uint64_t seed) {
  ModelConfig c = preset(p);
  apply_override(c, "ffn", ffn);
  c.param_dtype = c.act_dtype = dt;
  c.seed = seed;
  return c;
}

TEST_F(Checkpoint, WeightsRoundTripExactlyAndAnotherModelIsRefused) {
  auto ops = make_cpu_ops();
  for (const char* p : {"tiny", "tiny-moe", "tiny-qwen3"})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(p) + " " + std::string(dtype_name(dt)));
      Transformer a(*ops, cfg_of(p, "moc", dt, 3)), b(*ops, cfg_of(p, "moc", dt, 4));
      save_checkpoint(path("w.safetensors"), a);
      const auto f = read_safetensors(path("w.safetensors"));
      // Logical shapes: the FFN's padding channels (d_ffn 85 stored as 88) are not written.
      const SafeTensor* wg = f.find(std::string(p) == std::string("tiny-moe") ? "layer0.expert0.w_gate" : "layer0.w_gate");
      ASSERT_NE(wg, nullptr);
      EXPECT_EQ(wg->shape, (std::vector<std::int64_t>{a.config().hidden, a.config().d_ffn}));
      EXPECT_EQ(f.metadata.at("format"), "mocbench-checkpoint-1");
      const auto info = load_weights(path("w.safetensors"), b);
      EXPECT_FALSE(info.has_optimizer);
      for (std::size_t i = 0; i < a.params().size(); ++i)
        EXPECT_EQ(ops->download_f32(a.params()[i].value), ops->download_f32(b.params()[i].value)) << a.params()[i].name;
    }
  // F32 weights load into a bf16 model (rounded once), and a checkpoint of another shape is refused.
  Transformer f32(*ops, cfg_of("tiny", "dense", DType::f32, 5)), bf(*ops, cfg_of("tiny", "dense", DType::bf16, 6));
  save_checkpoint(path("f.safetensors"), f32);
  load_weights(path("f.safetensors"), bf);
  const auto x = ops->download_f32(f32.param("layer1.wo").value), y = ops->download_f32(bf.param("layer1.wo").value);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], bf16_to_f32(f32_to_bf16(x[i])));
  Transformer gqa(*ops, cfg_of("tiny-gqa", "dense", DType::f32, 5));
  try {
    load_weights(path("f.safetensors"), gqa);
    ADD_FAILURE() << "a checkpoint of another configuration was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
}

// Training 8 steps straight equals 4 steps, a checkpoint, a fresh model and trainer loaded from it, and 4
// more steps: bit for bit on the CPU (optimizer state and the schedule's step are restored).
TEST_F(Checkpoint, ResumingFromACheckpointEqualsUninterruptedTraining) {
  for (bool master : {false, true}) {
    SCOPED_TRACE(master ? "bf16 + fp32 master" : "fp32");
    auto ops = make_cpu_ops();
    const DType dt = master ? DType::bf16 : DType::f32;
    const ModelConfig cfg = cfg_of("tiny-moe", "moc", dt, 11);
    std::mt19937 rng(5);
    const int B = 2, S = 8;
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int i = 0; i < 8; ++i) {
      const auto ids = random_ids(rng, B * S + 1, cfg.vocab);
      Tensor tok = ops->empty({B * S}, DType::i32, workspace_tag()), tgt = ops->empty({B * S}, DType::i32, workspace_tag());
      ops->upload_i32(tok, std::vector<std::int32_t>(ids.begin(), ids.end() - 1));
      ops->upload_i32(tgt, std::vector<std::int32_t>(ids.begin() + 1, ids.end()));
      batches.emplace_back(tok, tgt);
    }
    TrainConfig tc;
    tc.warmup_steps = 2;
    tc.total_steps = 8;
    tc.fp32_master = master;
    Transformer straight(*ops, cfg);
    Trainer ts(straight, tc);
    std::vector<double> losses;
    for (int i = 0; i < 8; ++i) losses.push_back(ts.step(batches[static_cast<std::size_t>(i)].first, batches[static_cast<std::size_t>(i)].second, B, S).loss);

    Transformer first(*ops, cfg);
    Trainer t1(first, tc);
    for (int i = 0; i < 4; ++i) t1.step(batches[static_cast<std::size_t>(i)].first, batches[static_cast<std::size_t>(i)].second, B, S);
    save_checkpoint(path("r.safetensors"), first, &t1);
    ModelConfig other = cfg;
    other.seed = 99;  // different initial weights: everything must come from the checkpoint
    Transformer resumed(*ops, other);
    Trainer t2(resumed, tc);
    const auto info = load_checkpoint(path("r.safetensors"), resumed, t2);
    EXPECT_EQ(info.step, 4);
    EXPECT_EQ(t2.steps_done(), 4);
    for (int i = 4; i < 8; ++i) {
      const double l = t2.step(batches[static_cast<std::size_t>(i)].first, batches[static_cast<std::size_t>(i)].second, B, S).loss;
      EXPECT_EQ(l, losses[static_cast<std::size_t>(i)]) << "step " << i + 1;
    }
    for (std::size_t i = 0; i < straight.params().size(); ++i)
      EXPECT_EQ(ops->download_f32(straight.params()[i].value), ops->download_f32(resumed.params()[i].value))
          << straight.params()[i].name;
    // A weights-only file cannot resume.
    save_checkpoint(path("w.safetensors"), first);
    Transformer again(*ops, cfg);
    Trainer t3(again, tc);
    EXPECT_THROW(load_checkpoint(path("w.safetensors"), again, t3), std::invalid_argument);
  }
}

// Against Python's `safetensors` (the GPU machine has it): with MOCBENCH_SAFETENSORS_DIR set, writes
// mocbench.safetensors and the values it holds (mocbench.expected.json) for
// `scripts/safetensors_crosscheck.py read`, and reads python.safetensors made by `... write` when present.
TEST_F(Checkpoint, CrossCheckWithPythonSafetensors) {
  const char* dir = std::getenv("MOCBENCH_SAFETENSORS_DIR");
  if (!dir) GTEST_SKIP() << "set MOCBENCH_SAFETENSORS_DIR (see scripts/safetensors_crosscheck.py)";
  auto ops = make_cpu_ops();
  Transformer m(*ops, cfg_of("tiny-gqa", "moc", DType::bf16, 7));
  TrainConfig tc;
  tc.fp32_master = true;
  Trainer tr(m, tc);
  std::mt19937 rng(1);
  const auto ids = random_ids(rng, 2 * 8 + 1, m.config().vocab);
  Tensor tok = ops->empty({16}, DType::i32, workspace_tag()), tgt = ops->empty({16}, DType::i32, workspace_tag());
  ops->upload_i32(tok, std::vector<std::int32_t>(ids.begin(), ids.end() - 1));
  ops->upload_i32(tgt, std::vector<std::int32_t>(ids.begin() + 1, ids.end()));
  tr.step(tok, tgt, 2, 8);
  const std::string out = std::string(dir) + "/mocbench.safetensors";
  save_checkpoint(out, m, &tr);
  std::ofstream j(std::string(dir) + "/mocbench.expected.json");
  j << "{";
  bool first = true;
  for (const auto& t : read_safetensors(out).tensors) {
    const std::size_t es = safetensors_dtype_size(t.dtype), n = t.data.size() / es;
    j << (first ? "" : ",") << "\"" << t.name << "\": {\"dtype\": \"" << t.dtype << "\", \"shape\": [";
    first = false;
    for (std::size_t i = 0; i < t.shape.size(); ++i) j << (i ? "," : "") << t.shape[i];
    j << "], \"values\": [";
    for (std::size_t i = 0; i < n; ++i) {
      float v = 0;
      if (t.dtype == "F32") std::memcpy(&v, t.data.data() + 4 * i, 4);
      else if (t.dtype == "BF16") {
        std::uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * i, 2);
        v = bf16_to_f32(h);
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
      j << (i ? "," : "") << buf;
    }
    j << "]}";
  }
  j << "}\n";
  const std::string py = std::string(dir) + "/python.safetensors";
  if (!fs::exists(py)) GTEST_SKIP() << "wrote " << out << "; no " << py << " to read yet";
  const auto f = read_safetensors(py);
  EXPECT_EQ(f.metadata.at("by"), "python");
  const SafeTensor* a = f.find("a");
  const SafeTensor* b = f.find("b");
  const SafeTensor* c = f.find("c");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a->data, bytes_of({0, 1, 2, 3, 4, 5}));
  ASSERT_EQ(b->dtype, "BF16");
  const std::vector<float> bv = {1.5f, -2.25f, 3.0f};
  for (std::size_t i = 0; i < 3; ++i) {
    std::uint16_t h;
    std::memcpy(&h, b->data.data() + 2 * i, 2);
    EXPECT_EQ(bf16_to_f32(h), bv[i]);
  }
  EXPECT_EQ(c->dtype, "I32");
  EXPECT_EQ(c->data, (std::vector<unsigned char>{7, 0, 0, 0, 8, 0, 0, 0}));
}

}  // namespace
}  // namespace moc
