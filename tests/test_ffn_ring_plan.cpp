// The decode FFN ring kernels' shared-memory layouts and launch plans (kernels/cuda/ffn_decode_ring_plan.h), on the
// CPU: what the launch asks for is what the kernel carves, fits the device, and at the 1b layer is what the
// measurements in bench/ were made with.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/ffn_decode_ring_plan.h"

namespace moc::cuda::ffn {
namespace {

constexpr std::size_t kOptin = 232448;  // H100 / H200: 227 KB of shared memory a block
constexpr int kSms = 132;
constexpr int kD = 2048, kF = 5461;  // the 1b model's FFN layer

// The pieces come in order, none past the total (their sizes and alignment: the tests below).
void expect_packed(const std::vector<std::size_t>& offsets, std::size_t total) {
  for (std::size_t i = 1; i < offsets.size(); ++i) EXPECT_LE(offsets[i - 1], offsets[i]) << "piece " << i;
  EXPECT_LE(offsets.back(), total);
}

// The way out's receive area (clusters of 2): [rp][d / 2] fp32 that st.async fills 16 bytes at a time, each thread's
// 8 columns at 8-column steps of each row (16-aligned rows where d % 16 == 0), then its mbarrier (8-aligned), before
// `next`.
void expect_receive_area(std::size_t rx, std::size_t rxbar, std::size_t next, int rp, int d) {
  EXPECT_EQ(rx % 16, 0u);
  EXPECT_EQ(rxbar % 8, 0u);
  EXPECT_GE(rxbar - rx, static_cast<std::size_t>(rp) * (d / 2) * 4) << "rp " << rp << " d " << d;
  EXPECT_GE(next - rxbar, 8u);
}

TEST(FfnRingPlan, LayoutsPackTheirPiecesInOrderAndAlign) {
  for (int d : {64, 136, 2048}) {
    for (int nmax : {1, 7, 42}) {
      const auto m = ring_dense_smem(3, d, 2, nmax);
      expect_packed({3 * kRingSlotBytes, m.xs, m.gu, m.rx, m.rxbar, m.bars, m.misc, m.red}, m.total);
      EXPECT_EQ(m.xs, 3u * kRingSlotBytes);
      EXPECT_EQ(m.bars % 16, 0u);
      expect_receive_area(m.rx, m.rxbar, m.bars, 2, d);
      EXPECT_EQ(m.total, m.red + kRingConsumerWarps * kRingMaxRows * 4);
      for (int kmax : {0, 5}) {
        const auto a = ring_ab_smem(2, d, 1, nmax, kmax);
        expect_packed({a.kept, a.xs, a.gv, a.zs, a.list, a.on, a.rx, a.rxbar, a.bars, a.misc, a.red}, a.total);
        expect_receive_area(a.rx, a.rxbar, a.bars, 1, d);
        EXPECT_EQ(a.xs - a.kept, static_cast<std::size_t>(kmax) * 4 * d) << "[kmax][2][d] bf16";
        EXPECT_EQ(a.misc - a.bars, static_cast<std::size_t>(2 * kRingMaxSlots + kmax) * 8);
        for (std::size_t o : {a.xs, a.gv, a.zs, a.list, a.on, a.bars}) EXPECT_EQ(o % 16, 0u);
      }
      for (int kcap : {0, 15}) {
        const auto t = ring_topk_smem(3, d, nmax, kcap, 9);
        expect_packed({t.kept, t.xs, t.gv, t.zs, t.ks, t.cand, t.list, t.drow, t.state, t.rx, t.rxbar, t.bars, t.misc,
                       t.info, t.red, t.wtot},
                      t.total);
        expect_receive_area(t.rx, t.rxbar, t.bars, 1, d);
        EXPECT_EQ(t.xs - t.kept, static_cast<std::size_t>(kcap) * 4 * d);
        EXPECT_EQ(t.misc - t.bars, static_cast<std::size_t>(2 * kRingMaxSlots + kcap + 9) * 8);
        for (std::size_t o : {t.xs, t.gv, t.zs, t.ks, t.cand, t.list, t.drow, t.state, t.bars}) EXPECT_EQ(o % 16, 0u);
        EXPECT_GE(t.drow - t.list, static_cast<std::size_t>(nmax) * 4);
        EXPECT_GE(t.state - t.drow, static_cast<std::size_t>(nmax) * 8) << "a pointer per entry";
      }
    }
  }
}

TEST(FfnRingPlan, TheOneBLayerGetsThePlansItWasMeasuredWith) {
  // Dense: 4 slots, a block per 42 channels.
  const RingDensePlan dn = ring_dense_plan(kD, kF, 1, kSms, 4, kOptin);
  EXPECT_TRUE(dn.ok());
  EXPECT_EQ(dn.nb, 132);
  EXPECT_EQ(dn.nmax, 42);
  EXPECT_EQ(dn.S, 4);
  EXPECT_LE(dn.smem, kOptin);
  // 2:8 at one row: 683 groups, 6 a block, 2 kept channels a group; 2 slots. At two rows a group keeps up to 4: the
  // kept area alone takes 192 KB a block, no two slots fit beside it, and the gate and up/down kernels run instead
  // (bench/RESULTS.md, eighteenth session).
  const RingAbPlan ab = ring_ab_plan(kD, kF, 1, 2, 8, 1, kSms, 2, kOptin);
  EXPECT_TRUE(ab.ok());
  EXPECT_EQ(ab.cpg, 8);
  EXPECT_EQ(ab.nb, 132);
  EXPECT_EQ(ab.nmax, 48);
  EXPECT_EQ(ab.kmax, 12);
  EXPECT_EQ(ab.S, 2);
  EXPECT_EQ(ab.smem, ring_ab_smem(2, kD, 1, 48, 12).total);
  EXPECT_LE(ab.smem, kOptin);
  const RingAbPlan ab2 = ring_ab_plan(kD, kF, 2, 2, 8, 2, kSms, 2, kOptin);
  EXPECT_EQ(ab2.kmax, 24);
  EXPECT_EQ(ab2.S, 0);
  EXPECT_FALSE(ab2.ok());
  // Top-K: 3 slots of 8 W_gate rows, the key array in the ring then 9 kept channels' rows past it, 15 in the kept
  // area (bench/micro/NOTES.md, twenty-third session).
  const RingTopkPlan tk = ring_topk_plan(kD, kF, kSms, 3, kOptin);
  EXPECT_TRUE(tk.ok());
  EXPECT_EQ(tk.cpg, 8);
  EXPECT_EQ(tk.nmax, 42);
  EXPECT_EQ(tk.S, 3);
  EXPECT_EQ(tk.xoff, (kF + 3) / 4 * 16);
  EXPECT_EQ(tk.xcap, 9);
  EXPECT_EQ(tk.kcap, 15);
  EXPECT_EQ(tk.smem, ring_topk_smem(3, kD, 42, 15, 9).total);
  EXPECT_LE(tk.smem, kOptin);
  EXPECT_GT(tk.smem + static_cast<std::size_t>(kD) * 4 + 8, kOptin) << "one more kept row would not fit";
  // The launch leaves room beside each block for one block of the next kernel (kRingTopkLeave): one kept slot fewer,
  // and the SM (228 KB; the top-K block's 1 KB of static shared memory and the 1 KB the runtime reserves a block) holds
  // the batch-1 QKV block beside it: 2 d bytes of x (its norm weight staged in x's place), ~1.3 KB static (ptxas),
  // 1 KB reserved.
  const RingTopkPlan tl = ring_topk_plan(kD, kF, kSms, 3, kOptin, kRingTopkLeave);
  EXPECT_TRUE(tl.ok());
  EXPECT_EQ(tl.kcap, 14);
  EXPECT_EQ(tl.xcap, 9);
  EXPECT_LE(tl.smem + kRingTopkLeave, kOptin);
  EXPECT_EQ(tl.smem, ring_topk_smem(3, kD, 42, 14, 9).total);
  constexpr std::size_t kSmPerSm = 233472, kRingStatic = 1024, kReserved = 1024;
  constexpr std::size_t kQkvBlock = 2 * kD + 2048 + kReserved;  // 2048: a bound on its static shared memory (1312)
  EXPECT_GE(kSmPerSm - (tl.smem + kRingStatic + kReserved), kQkvBlock) << "the next layer's QKV block must fit";
  // Where the room would leave no kept slot, the plan takes the whole limit instead (the room is a nicety).
  const std::size_t one_slot = ring_topk_smem(3, kD, 42, 1, 9).total;
  const RingTopkPlan tight = ring_topk_plan(kD, kF, kSms, 3, one_slot + 100, kRingTopkLeave);
  EXPECT_TRUE(tight.ok());
  EXPECT_EQ(tight.kcap, 1);
  EXPECT_EQ(ring_topk_plan(kD, kF, kSms, 3, one_slot + kRingTopkLeave, kRingTopkLeave).kcap, 1);
}

TEST(FfnRingPlan, EveryUsablePlanFitsTheSharedMemoryAndItsRing) {
  int usable_topk = 0, usable_ab = 0, usable_dense = 0;
  for (int d = 64; d <= 2048; d += 136)
    for (int F : {37, 301, 5461, 14336})
      for (int nb : {1, 8, 64, 114, 132})
        for (int slots = 1; slots <= 4; ++slots) {
          const RingTopkPlan t = ring_topk_plan(d, F, nb, slots, kOptin);
          const RingTopkPlan tl = ring_topk_plan(d, F, nb, slots, kOptin, kRingTopkLeave);
          EXPECT_EQ(tl.ok(), t.ok()) << "the room beside a block never makes a plan unusable";
          if (tl.ok() && tl.kcap < t.kcap) {
            EXPECT_LE(tl.smem + kRingTopkLeave, kOptin);
          }
          if (t.ok()) {
            ++usable_topk;
            EXPECT_LE(t.smem, kOptin);
            EXPECT_EQ(t.smem, ring_topk_smem(t.S, d, t.nmax, t.kcap, t.xcap).total);
            EXPECT_LE(t.kcap + t.xcap, t.nmax);
            EXPECT_GE(t.nmax * t.nb, F) << "every channel has a block";
            // The key array and the ring's kept rows stay inside the ring.
            EXPECT_LE(static_cast<std::size_t>(t.xoff) + static_cast<std::size_t>(t.xcap) * 4 * d,
                      static_cast<std::size_t>(t.S) * kRingSlotBytes);
            EXPECT_LE(static_cast<std::size_t>((F + 3) / 4) * 16, static_cast<std::size_t>(t.S) * kRingSlotBytes);
          }
          for (int rows : {1, 2}) {
            const RingAbPlan a = ring_ab_plan(d, F, rows, 2, 8, rows, nb, slots, kOptin);
            if (!a.ok()) continue;
            ++usable_ab;
            EXPECT_LE(a.smem, kOptin);
            EXPECT_EQ(a.cpg % 8, 0);
            EXPECT_GE(a.nmax * a.nb, F);
            EXPECT_GE(a.kmax, (a.nmax / 8) * std::min(8, rows * 2));
          }
          const RingDensePlan dn = ring_dense_plan(d, F, 2, nb, slots, kOptin);
          if (dn.ok()) {
            ++usable_dense;
            EXPECT_LE(dn.smem, kOptin);
            EXPECT_GE(dn.nmax * dn.nb, F);
          }
        }
  EXPECT_GT(usable_topk, 100);
  EXPECT_GT(usable_ab, 100);
  EXPECT_GT(usable_dense, 100);
}

TEST(FfnRingPlan, NoPlanWhereTheFixedPartsAloneExceedTheSharedMemory) {
  // A block of 10^4 channels at two rows: its gate values alone take 240 KB. (The dense launch once took the
  // difference of the two sizes unsigned and asked for 4 slots there.)
  const RingDensePlan dn = ring_dense_plan(2048, 1320000, 2, 132, 4, kOptin);
  EXPECT_EQ(dn.S, 0);
  EXPECT_FALSE(dn.ok());
  const RingTopkPlan tk = ring_topk_plan(2048, 1320000, 132, 3, kOptin);
  EXPECT_FALSE(tk.ok());
  const RingAbPlan ab = ring_ab_plan(2048, 8 * 200000, 2, 2, 8, 2, 132, 2, kOptin);
  EXPECT_FALSE(ab.ok());
  // W_gate rows longer than a slot: no gate item.
  EXPECT_FALSE(ring_topk_plan(32768, kF, kSms, 3, kOptin).ok());
  EXPECT_FALSE(ring_ab_plan(4096, kF, 1, 2, 8, 1, kSms, 2, kOptin).ok()) << "8 rows of 8 KB: no whole group in 32 KB";
}

TEST(FfnRingPlan, ClustersOfTwoAsManyAsFitElseOneBlockPerSm) {
  const auto plan_for = [](int nb) { return ring_topk_plan(kD, kF, nb, 3, kOptin); };
  const RingTopkPlan first = plan_for(kSms);
  int C = 0;
  // Every SM in clusters of 2.
  RingTopkPlan g = ring_cluster_grid(first, kD, plan_for, [](std::size_t) { return 66; }, C);
  EXPECT_EQ(C, 2);
  EXPECT_EQ(g.nb, 132);
  // Fewer clusters fit at once than SMs / 2 (GPCs with an odd count of SMs): the grid is cut to them, re-planned.
  g = ring_cluster_grid(first, kD, plan_for, [](std::size_t) { return 60; }, C);
  EXPECT_EQ(C, 2);
  EXPECT_EQ(g.nb, 120);
  EXPECT_EQ(g.nmax, 46);
  EXPECT_TRUE(g.ok());
  // None fit: one block per SM.
  g = ring_cluster_grid(first, kD, plan_for, [](std::size_t) { return 0; }, C);
  EXPECT_EQ(C, 1);
  EXPECT_EQ(g.nb, 132);
  // d not a multiple of 16 (no 8-aligned halves of d): clusters of 1 without asking.
  bool asked = false;
  const auto plan_d = [](int nb) { return ring_topk_plan(2056, kF, nb, 3, kOptin); };
  g = ring_cluster_grid(plan_d(kSms), 2056, plan_d, [&](std::size_t) { asked = true; return 66; }, C);
  EXPECT_EQ(C, 1);
  EXPECT_FALSE(asked);
  // An odd grid is asked about with its even part's plan; a re-planned grid that is not usable keeps clusters of 1.
  std::size_t asked_smem = 0;
  g = ring_cluster_grid(plan_for(131), kD, plan_for, [&](std::size_t s) { asked_smem = s; return 66; }, C);
  EXPECT_EQ(C, 2);
  EXPECT_EQ(g.nb, 130);
  EXPECT_EQ(asked_smem, plan_for(130).smem);
  const auto tight = [](int nb) { return ring_topk_plan(kD, kF, nb, 3, nb >= 100 ? kOptin : 90000); };
  g = ring_cluster_grid(tight(kSms), kD, tight, [](std::size_t) { return 40; }, C);
  EXPECT_EQ(C, 1);
  EXPECT_EQ(g.nb, 132);
  // One block: clusters of 1.
  g = ring_cluster_grid(ring_topk_plan(kD, 1, kSms, 3, kOptin), kD, plan_for, [](std::size_t) { return 66; }, C);
  EXPECT_EQ(C, 1);
}

}  // namespace
}  // namespace moc::cuda::ffn
