// The CPU backend's default memory limit (app/harness/host_memory.h): parsing /proc/meminfo and cgroup limit files,
// the margin, and the environment override.
#include <gtest/gtest.h>

#include <cstdlib>

#include "app/harness/host_memory.h"

namespace moc {
namespace {

TEST(HostMemory, ParsesMemAvailableInKiB) {
  const std::string meminfo =
      "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20480000 kB\nBuffers: 1 kB\n";
  ASSERT_TRUE(parse_meminfo_available(meminfo));
  EXPECT_EQ(*parse_meminfo_available(meminfo), std::size_t{20480000} * 1024);
  EXPECT_FALSE(parse_meminfo_available("MemTotal: 1 kB\n")) << "a kernel without MemAvailable";
}

TEST(HostMemory, CgroupLimitsMaxAndV1UnlimitedMeanNone) {
  EXPECT_FALSE(parse_cgroup_limit("max\n"));
  EXPECT_FALSE(parse_cgroup_limit("9223372036854771712\n")) << "cgroup v1's unlimited";
  ASSERT_TRUE(parse_cgroup_limit("8589934592\n"));
  EXPECT_EQ(*parse_cgroup_limit("8589934592\n"), std::size_t{8} << 30);
  EXPECT_FALSE(parse_cgroup_limit("garbage"));
}

TEST(HostMemory, DefaultLimitLeavesAMarginAndNeverZero) {
  EXPECT_EQ(default_cpu_memory_limit({std::size_t{20} << 30, "x"}), (std::size_t{20} << 30) - (std::size_t{2} << 30));
  EXPECT_EQ(default_cpu_memory_limit({std::size_t{1} << 30, "x"}), (std::size_t{1} << 30) - (std::size_t{256} << 20));
  EXPECT_EQ(default_cpu_memory_limit({std::size_t{100} << 20, "x"}), std::size_t{1} << 20) << "0 would mean unlimited";
}

TEST(HostMemory, ReadsThisMachineAndHonoursTheOverride) {
  ::unsetenv("MOCBENCH_HOST_MEMORY_MIB");
  const auto m = host_memory_available();
  ASSERT_TRUE(m) << "Linux has /proc/meminfo";
  EXPECT_GT(m->available_bytes, 0u);
  ::setenv("MOCBENCH_HOST_MEMORY_MIB", "300", 1);
  const auto o = host_memory_available();
  ::unsetenv("MOCBENCH_HOST_MEMORY_MIB");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->available_bytes, std::size_t{300} << 20);
  EXPECT_EQ(o->source, "MOCBENCH_HOST_MEMORY_MIB");
}

}  // namespace
}  // namespace moc
