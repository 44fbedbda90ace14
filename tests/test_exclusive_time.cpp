// Exclusive device time (prof::device_times) on synthetic traces with hand-computed answers: a chain of PDL
// kernels (each starts early and waits inside its record), nested overlaps, a copy overlapping a kernel, two
// streams running at once, records that only touch, ties; and on fresh random traces against a
// per-nanosecond count of "the earliest-started record running at this instant" (the rule's definition),
// summing to busy_ns exactly. The inclusive mode is end - start.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "profiling/trace.h"
#include "test_util.h"

namespace moc {
namespace {

using prof::DeviceTimes;
using prof::ProfileTrace;
using prof::TimeMode;

prof::KernelRecord kern(std::int64_t s, std::int64_t e, std::uint32_t stream = 7) {
  prof::KernelRecord k;
  k.name = "spin(long)";
  k.short_name = "spin";
  k.start_ns = s;
  k.end_ns = e;
  k.device_id = 0;
  k.stream_id = stream;
  return k;
}
prof::MemcpyRecord copy(std::int64_t s, std::int64_t e, std::uint32_t stream = 7) {
  prof::MemcpyRecord m;
  m.start_ns = s;
  m.end_ns = e;
  m.stream_id = stream;
  return m;
}
prof::MemsetRecord set(std::int64_t s, std::int64_t e, std::uint32_t stream = 7) {
  prof::MemsetRecord m;
  m.start_ns = s;
  m.end_ns = e;
  m.stream_id = stream;
  return m;
}

std::int64_t sum(const DeviceTimes& d) {
  return std::accumulate(d.kernels.begin(), d.kernels.end(), std::int64_t{0}) +
         std::accumulate(d.memcpys.begin(), d.memcpys.end(), std::int64_t{0}) +
         std::accumulate(d.memsets.begin(), d.memsets.end(), std::int64_t{0});
}

TEST(ExclusiveTime, PdlChainGivesEachKernelItsOwnWork) {
  // Solo durations 10, 20, 30: each PDL kernel starts 8 ns into its predecessor and waits for it.
  ProfileTrace t;
  t.kernels = {kern(100, 110), kern(102, 130), kern(122, 160)};
  const auto ex = prof::device_times(t, TimeMode::exclusive);
  EXPECT_EQ(ex.kernels, (std::vector<std::int64_t>{10, 20, 30}));
  EXPECT_EQ(ex.kernel_own, (std::vector<std::int64_t>{100, 110, 130}));
  EXPECT_EQ(sum(ex), prof::busy_ns(t));
  const auto in = prof::device_times(t, TimeMode::inclusive);
  EXPECT_EQ(in.kernels, (std::vector<std::int64_t>{10, 28, 38}));
  EXPECT_EQ(in.kernel_own, (std::vector<std::int64_t>{100, 102, 122}));
}

TEST(ExclusiveTime, NestedRecordOwnsNothingInsideAnEarlierOne) {
  // [0,100) holds [10,20) and [30,120): the first owns [0,100), the nested one nothing, the third [100,120).
  ProfileTrace t;
  t.kernels = {kern(30, 120), kern(0, 100), kern(10, 20)};
  const auto ex = prof::device_times(t, TimeMode::exclusive);
  EXPECT_EQ(ex.kernels, (std::vector<std::int64_t>{20, 100, 0}));
  EXPECT_EQ(ex.kernel_own[0], 100);
  EXPECT_EQ(ex.kernel_own[2], 20) << "own = end when a record owns nothing";
  EXPECT_EQ(sum(ex), 120);
  EXPECT_EQ(sum(ex), prof::busy_ns(t));
}

TEST(ExclusiveTime, CopyOverlappingAKernel) {
  // Kernel [0,50) and a copy on another stream [30,80): the copy adds [50,80); a set [90,95) alone.
  ProfileTrace t;
  t.kernels = {kern(0, 50)};
  t.memcpys = {copy(30, 80, 9)};
  t.memsets = {set(90, 95)};
  const auto ex = prof::device_times(t, TimeMode::exclusive);
  EXPECT_EQ(ex.kernels[0], 50);
  EXPECT_EQ(ex.memcpys[0], 30);
  EXPECT_EQ(ex.memcpy_own[0], 50);
  EXPECT_EQ(ex.memsets[0], 5);
  EXPECT_EQ(sum(ex), prof::busy_ns(t));
}

TEST(ExclusiveTime, TwoStreamsAtOnceCountTheSharedPartOnce) {
  // Stream 7: [0,40) [40,60); stream 8: [20,70). Shared [20,60) belongs to the earlier-started records.
  ProfileTrace t;
  t.kernels = {kern(0, 40, 7), kern(40, 60, 7), kern(20, 70, 8)};
  const auto ex = prof::device_times(t, TimeMode::exclusive);
  EXPECT_EQ(ex.kernels, (std::vector<std::int64_t>{40, 0, 30}));
  EXPECT_EQ(ex.kernel_own[2], 40);
  EXPECT_EQ(sum(ex), 70);
  EXPECT_EQ(sum(ex), prof::busy_ns(t));
}

TEST(ExclusiveTime, TouchingRecordsKeepTheirWholeTime) {
  ProfileTrace t;
  t.kernels = {kern(10, 20), kern(20, 35)};
  t.memsets = {set(35, 36)};
  t.memcpys = {copy(36, 36)};  // empty
  const auto ex = prof::device_times(t, TimeMode::exclusive);
  EXPECT_EQ(ex.kernels, (std::vector<std::int64_t>{10, 15}));
  EXPECT_EQ(ex.memsets[0], 1);
  EXPECT_EQ(ex.memcpys[0], 0);
  EXPECT_EQ(ex, prof::device_times(t, TimeMode::exclusive));
}

TEST(ExclusiveTime, TiesGoToTheRecordThatEndsFirst) {
  ProfileTrace t;
  t.kernels = {kern(0, 30), kern(0, 10)};
  const auto ex = prof::device_times(t, TimeMode::exclusive);
  EXPECT_EQ(ex.kernels, (std::vector<std::int64_t>{20, 10}));
  EXPECT_EQ(ex.kernel_own[0], 10);
}

TEST(ExclusiveTime, ModesParseAndName) {
  TimeMode m = TimeMode::inclusive;
  EXPECT_TRUE(prof::parse_time_mode("exclusive", &m));
  EXPECT_EQ(m, TimeMode::exclusive);
  EXPECT_TRUE(prof::parse_time_mode("inclusive", &m));
  EXPECT_EQ(m, TimeMode::inclusive);
  EXPECT_FALSE(prof::parse_time_mode("self", &m));
  EXPECT_STREQ(prof::time_mode_name(TimeMode::exclusive), "exclusive");
  EXPECT_STREQ(prof::time_mode_name(TimeMode::inclusive), "inclusive");
}

// The rule, instant by instant: each covered nanosecond goes to the running record that started first
// (ties: ends first, then kernel < memcpy < memset, then record order).
TEST(ExclusiveTime, MatchesAPerNanosecondOwnerOnFreshTraces) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int round = 0; round < 20; ++round) {
    ProfileTrace t;
    const int n = 1 + static_cast<int>(rng() % 50);
    for (int i = 0; i < n; ++i) {
      const std::int64_t s = rng() % 900, e = s + rng() % 120;
      const std::uint32_t stream = rng() % 3;
      if (rng() % 3 == 0) t.memcpys.push_back(copy(s, e, stream));
      else if (rng() % 2) t.memsets.push_back(set(s, e, stream));
      else t.kernels.push_back(kern(s, e, stream));
    }
    using Key = std::tuple<std::int64_t, std::int64_t, int, std::size_t>;
    std::vector<Key> all;
    for (std::size_t i = 0; i < t.kernels.size(); ++i) all.emplace_back(t.kernels[i].start_ns, t.kernels[i].end_ns, 0, i);
    for (std::size_t i = 0; i < t.memcpys.size(); ++i) all.emplace_back(t.memcpys[i].start_ns, t.memcpys[i].end_ns, 1, i);
    for (std::size_t i = 0; i < t.memsets.size(); ++i) all.emplace_back(t.memsets[i].start_ns, t.memsets[i].end_ns, 2, i);
    std::vector<std::int64_t> want_k(t.kernels.size()), want_c(t.memcpys.size()), want_s(t.memsets.size());
    for (std::int64_t x = 0; x < 1100; ++x) {
      const Key* owner = nullptr;
      for (const auto& r : all)
        if (std::get<0>(r) <= x && x < std::get<1>(r) && (!owner || r < *owner)) owner = &r;
      if (!owner) continue;
      auto& v = std::get<2>(*owner) == 0 ? want_k : std::get<2>(*owner) == 1 ? want_c : want_s;
      ++v[std::get<3>(*owner)];
    }
    const auto ex = prof::device_times(t, TimeMode::exclusive);
    EXPECT_EQ(ex.kernels, want_k);
    EXPECT_EQ(ex.memcpys, want_c);
    EXPECT_EQ(ex.memsets, want_s);
    EXPECT_EQ(sum(ex), prof::busy_ns(t));
    // The counted part is [own, end): its length is the exclusive time.
    for (std::size_t i = 0; i < t.kernels.size(); ++i)
      EXPECT_EQ(std::max(t.kernels[i].start_ns, t.kernels[i].end_ns) - ex.kernel_own[i], ex.kernels[i]);
    const auto in = prof::device_times(t, TimeMode::inclusive);
    for (std::size_t i = 0; i < t.kernels.size(); ++i)
      EXPECT_EQ(in.kernels[i], std::max<std::int64_t>(0, t.kernels[i].end_ns - t.kernels[i].start_ns));
  }
}

}  // namespace
}  // namespace moc
