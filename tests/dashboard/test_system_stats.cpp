// System stats against fake procfs trees: /proc/stat CPU, VmRSS, meminfo (RAPL: tests/core/test_power_rapl.cpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dashboard/system_stats.h"
#include "tests/common/test_data.h"

namespace anelab::dashboard {
namespace {
namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::trunc);
  f << s;
}

TEST(SystemStats, MachineCpuFromProcStat) {
  auto root = test::temp_dir("procstat");
  put(root / "stat", "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\ncpu1 50 0 50 400 0 0 0 0 0 0\n");
  MachineCpu c(root.string());
  EXPECT_FALSE(c.sample());
  // +150 busy, +50 idle over 200 jiffies on 2 cores -> 150%.
  put(root / "stat", "cpu  200 0 150 850 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n");
  EXPECT_TRUE(c.sample());
  EXPECT_EQ(c.cores(), 2);
  EXPECT_NEAR(c.pct(), 150.0, 1e-9);
}

TEST(SystemStats, ProcessRssAndMeminfo) {
  auto root = test::temp_dir("procrss");
  put(root / "42/status", "Name:\tx\nVmRSS:\t  204800 kB\n");
  EXPECT_NEAR(process_rss_mb(42, root.string()), 200.0, 1e-9);
  EXPECT_LT(process_rss_mb(43, root.string()), 0);
  put(root / "meminfo", "MemTotal:       2048000 kB\nMemFree: 1 kB\nMemAvailable:   1024000 kB\n");
  double t = 0, a = 0;
  ASSERT_TRUE(machine_memory_mb(&t, &a, root.string()));
  EXPECT_NEAR(t, 2000.0, 1e-9);
  EXPECT_NEAR(a, 1000.0, 1e-9);
  // The real /proc of this process.
  EXPECT_GT(process_rss_mb(::getpid()), 0.5);
}

}  // namespace
}  // namespace anelab::dashboard
