// The activation-memory model (paper §2, Table 2; SPEC §3).
#include <gtest/gtest.h>

#include "model/memory_model.h"

namespace moc {
namespace {

ModelConfig eight_thirds(const std::string& ffn, bool gcp) {
  ModelConfig c = preset("60m");
  c.hidden = 960;
  c.d_ffn = 2560;  // exactly 8d/3
  apply_override(c, "ffn", ffn);
  c.ffn.k = 512;   // exactly 20% kept
  c.ffn.gcp = gcp;
  return c;
}

TEST(MemoryModel, FfnVariantsGiveThePapersBsdMultiples) {
  EXPECT_NEAR(paper_ffn_bsd(eight_thirds("dense", false)), 11.67, 0.005);
  EXPECT_NEAR(paper_ffn_bsd(eight_thirds("dense", true)), 6.33, 0.005);
  EXPECT_NEAR(paper_ffn_bsd(eight_thirds("moc", false)), 3.67, 0.005);
  EXPECT_NEAR(paper_ffn_bsd(eight_thirds("moc", true)), 2.6, 0.005);
}

TEST(MemoryModel, LayerBreakdownFollowsSection2) {
  const auto c = eight_thirds("dense", false);
  const auto r = paper_activation_model(c, 2, 3, 1.0);
  const double bsd = 2.0 * 3 * 960;
  EXPECT_DOUBLE_EQ(r.attention, 5 * bsd);
  EXPECT_DOUBLE_EQ(r.norm, 2 * bsd);
  EXPECT_DOUBLE_EQ(r.residual, 2 * bsd);
  EXPECT_NEAR(r.ffn / bsd, 11.67, 0.005);
}

TEST(MemoryModel, Llama350mBatch64SitsBesideThePapersMeasuredTable) {
  // Paper §2 table (350M, batch 64, seq 256, bf16): attention 177M, FFN 400M, others 68M per layer,
  // LM head 2.16G, total 17.64G; FFN/attention about 2.3.
  const auto r = paper_activation_model(preset("350m"), 64, 256, 2.0);
  EXPECT_NEAR(r.attention / 177e6, 1.0, 0.06);
  EXPECT_NEAR(r.ffn / 400e6, 1.0, 0.03);
  EXPECT_NEAR(r.head / 2.16e9, 1.0, 0.03);
  EXPECT_NEAR(r.ffn / r.attention, 2.3, 0.1);
  EXPECT_NEAR(r.total() / 17.64e9, 1.0, 0.08);
  // The paper's "others" (68M) is half of its own 4bsd formula (134M); we keep the formula.
  EXPECT_NEAR(r.others_per_layer() / 134.2e6, 1.0, 0.01);
}

TEST(MemoryModel, MocCutsTheEngineFootprintAsTable2Says) {
  ModelConfig dense = preset("1b"), moc = preset("1b");
  dense.act_dtype = moc.act_dtype = DType::bf16;
  apply_override(moc, "ffn", "moc");
  moc.ffn.gcp = true;
  const auto a = engine_activation_model(dense, 64, 256), b = engine_activation_model(moc, 64, 256);
  // Dense keeps 4 bs d_ffn values (stored with the padded 5464 columns the GEMMs need); MoC+GCP keeps
  // 3 bs K (2 values + 1 index) at K = 1024 of 5461.
  EXPECT_EQ(dense.ffn_cols(), 5464);
  EXPECT_DOUBLE_EQ(a.ffn, 4.0 * 64 * 256 * 5464 * 2);
  EXPECT_DOUBLE_EQ(b.ffn, 3.0 * 64 * 256 * 1024 * 2);
  EXPECT_NEAR(b.ffn / a.ffn, 3.0 * 1024 / (4.0 * 5464), 1e-12);
  // The logits of the LM head (1 GB in bf16 here) do not shrink, so the whole model saves less.
  EXPECT_LT(b.total(), 0.6 * a.total());
}

}  // namespace
}  // namespace moc
