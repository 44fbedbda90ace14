#include <gtest/gtest.h>
#include "kernels/ops.h"
TEST(Build, CpuBackendExists) { EXPECT_EQ(moc::make_cpu_ops()->name(), "cpu"); }
