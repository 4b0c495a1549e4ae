// System stats against fake sysfs/procfs trees: RAPL watts incl. wrap-around, "not available"
// messages, machine CPU % from a fake procfs stat file (the platform layer's parsers: tests/core/test_platform.cpp).
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

TEST(SystemStats, RaplWattsFromEnergyDeltas) {
  auto root = test::temp_dir("rapl");
  put(root / "intel-rapl:0/name", "package-0\n");
  put(root / "intel-rapl:0/energy_uj", "1000000\n");
  put(root / "intel-rapl:0/max_energy_range_uj", "262143328850\n");
  put(root / "intel-rapl:0:0/name", "core\n");
  put(root / "intel-rapl:0:0/energy_uj", "500000\n");
  put(root / "intel-rapl:1/name", "psys\n");
  put(root / "intel-rapl:1/energy_uj", "0\n");
  RaplPower p(root.string());
  ASSERT_TRUE(p.available()) << p.reason();
  EXPECT_FALSE(p.sample(10.0));  // first sample primes
  put(root / "intel-rapl:0/energy_uj", "13000000\n");  // +12 J in 2 s = 6 W
  put(root / "intel-rapl:0:0/energy_uj", "4500000\n");  // +4 J = 2 W (inside the package)
  put(root / "intel-rapl:1/energy_uj", "30000000\n");  // psys, not added
  EXPECT_TRUE(p.sample(12.0));
  EXPECT_NEAR(p.total_watts(), 6.0, 1e-9);
  ASSERT_EQ(p.domains().size(), 3u);
  EXPECT_EQ(p.domains()[0].name, "package-0");
  EXPECT_NEAR(p.domains()[1].watts, 2.0, 1e-9);
  // Wrap-around of the counter.
  put(root / "intel-rapl:0/energy_uj", "1000000\n");  // wrapped: (max - 13e6) + 1e6
  EXPECT_TRUE(p.sample(13.0));
  EXPECT_NEAR(p.total_watts(), (262143328850.0 - 13000000.0 + 1000000.0) * 1e-6, 1e-3);
}

TEST(SystemStats, RaplMissingSaysNotAvailable) {
  auto root = test::temp_dir("rapl_none");
  RaplPower p((root / "nope").string());
  EXPECT_FALSE(p.available());
  EXPECT_NE(p.reason().find("power not available on this machine"), std::string::npos);
  RaplPower q(root.string());  // directory exists, no zones
  EXPECT_FALSE(q.available());
  EXPECT_NE(q.reason().find("no RAPL zones"), std::string::npos);
  EXPECT_FALSE(q.sample(1.0));
}

TEST(SystemStats, RaplUnreadableSaysWhy) {
  auto root = test::temp_dir("rapl_perm");
  put(root / "intel-rapl:0/name", "package-0\n");
  if (::geteuid() == 0) {
    fs::create_directories(root / "intel-rapl:0/energy_uj");  // root ignores permissions: make it unreadable
  } else {
    put(root / "intel-rapl:0/energy_uj", "1\n");
    fs::permissions(root / "intel-rapl:0/energy_uj", fs::perms::none);
  }
  RaplPower p(root.string());
  EXPECT_FALSE(p.available());
  EXPECT_NE(p.reason().find("not readable"), std::string::npos) << p.reason();
}

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
