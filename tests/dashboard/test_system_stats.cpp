// System stats: machine CPU % from a fake procfs stat file (the platform layer's parsers: tests/core/test_platform.cpp;
// RAPL: tests/core/test_power_rapl.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dashboard/system_stats.h"
#include "tests/common/test_data.h"

namespace anelab::dashboard {
namespace {
namespace fs = std::filesystem;

using test::put;

TEST(SystemStats, MachineCpuFromProcStat) {
  auto root = test::temp_dir("procstat");
  put(root / "stat", "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\ncpu1 50 0 50 400 0 0 0 0 0 0\n");
  MachineCpu c([&] { return platform::procfs::cpu_ticks(root.string()); });
  EXPECT_FALSE(c.sample());
  EXPECT_EQ(c.reason(), "first sample");
  // +150 busy, +50 idle over 200 jiffies on 2 cores -> 150%.
  put(root / "stat", "cpu  200 0 150 850 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n");
  EXPECT_TRUE(c.sample());
  EXPECT_EQ(c.cores(), 2);
  EXPECT_NEAR(c.pct(), 150.0, 1e-9);
}

TEST(SystemStats, MachineCpuSaysWhyNotAvailable) {
  auto root = test::temp_dir("procstat_missing");
  MachineCpu c([&] { return platform::procfs::cpu_ticks(root.string()); });
  EXPECT_FALSE(c.sample());
  EXPECT_EQ(c.cores(), 0);
  EXPECT_NE(c.reason().find("cannot open " + root.string() + "/stat"), std::string::npos) << c.reason();
  MachineCpu real;  // this machine, through the platform layer
  EXPECT_FALSE(real.sample());
#if defined(__linux__) || defined(__APPLE__)
  EXPECT_GE(real.cores(), 1) << real.reason();
#endif
}

}  // namespace
}  // namespace anelab::dashboard
