// Presets, overrides and refusal of impossible configurations with messages that say what to change.
#include <gtest/gtest.h>

#include "model/config.h"

namespace moc {
namespace {

std::string error_of(ModelConfig c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, PresetsFollowTheSpec) {
  const auto b = preset("1b");
  EXPECT_EQ(b.hidden, 2048);
  EXPECT_EQ(b.d_ffn, 5461);
  EXPECT_EQ(b.heads, 32);
  EXPECT_EQ(b.layers, 24);
  EXPECT_EQ(b.ffn.k, 1024);
  EXPECT_EQ(b.vocab, 32000);
  EXPECT_EQ(preset("7b").d_ffn, 11008);
  EXPECT_EQ(preset("350m").d_ffn, 2736);
  EXPECT_EQ(preset("1b-gqa").kv_heads, 8);
  for (const auto& name : preset_names()) EXPECT_NO_THROW(preset(name).validate()) << name;
  EXPECT_EQ(preset("tiny").d_ffn % 2, 1) << "tiny keeps d_ffn odd like 5461";
}

TEST(Config, UnknownPresetListsTheAvailableOnes) {
  try {
    preset("2b");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("350m"), std::string::npos);
  }
}

TEST(Config, OverridesParseFfnVariantsAndFractionalK) {
  ModelConfig c = preset("1b");
  apply_override(c, "ffn", "moc_2:8");
  EXPECT_EQ(c.ffn.group_a, 2);
  EXPECT_EQ(c.ffn.group_b, 8);
  EXPECT_EQ(c.kept_channels(), 1366);
  EXPECT_EQ(c.ffn_name(), "moc_2:8");
  apply_override(c, "ffn", "moc");
  apply_override(c, "k", "0.2");
  EXPECT_EQ(c.ffn.k, 1092);
  apply_override(c, "gcp", "true");
  EXPECT_EQ(c.ffn_name(), "moc+gcp");
  apply_override(c, "kv_heads", "8");
  EXPECT_EQ(c.kv_heads, 8);
  EXPECT_THROW(apply_override(c, "hiden", "3"), ConfigError);
  EXPECT_THROW(apply_override(c, "ffn", "sparse"), ConfigError);
  EXPECT_THROW(apply_override(c, "k", "1.5"), ConfigError);
}

TEST(Config, ImpossibleValuesAreRefusedWithAHint) {
  ModelConfig c = preset("1b");
  apply_override(c, "ffn", "moc");
  c.ffn.k = 6000;
  EXPECT_NE(error_of(c).find("must not exceed d_ffn"), std::string::npos);
  c.ffn.k = 0;
  EXPECT_NE(error_of(c).find("k must be positive"), std::string::npos);
  apply_override(c, "ffn", "moc_8:2");
  EXPECT_NE(error_of(c).find("a <= b"), std::string::npos);
  apply_override(c, "ffn", "moc_0:8");
  EXPECT_NE(error_of(c).find("a > 0 and b > 0"), std::string::npos);
  apply_override(c, "ffn", "moc_2:0");
  EXPECT_NE(error_of(c).find("a > 0 and b > 0"), std::string::npos);
  ModelConfig h = preset("1b");
  h.heads = 30;
  EXPECT_NE(error_of(h).find("must divide hidden"), std::string::npos);
  ModelConfig kv = preset("1b");
  kv.kv_heads = 5;
  EXPECT_NE(error_of(kv).find("must divide heads"), std::string::npos);
  ModelConfig ok = preset("1b");
  apply_override(ok, "ffn", "moc_2:8");
  EXPECT_EQ(error_of(ok), "");
}

}  // namespace
}  // namespace moc
