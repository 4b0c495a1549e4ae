// The RAPL source against fake powercap sysfs trees: joules per rail from energy_uj deltas
// (incl. a counter wrap), psys not double counted, and the "why not available" reasons.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "framework/core/error.h"
#include "framework/core/power.h"
#include "tests/common/test_data.h"

namespace anelab::power {
namespace {
namespace fs = std::filesystem;

using test::put;

TEST(PowerRapl, JoulesPerRailFromEnergyDeltas) {
  auto root = test::temp_dir("rapl");
  put(root / "intel-rapl:0/name", "package-0\n");
  put(root / "intel-rapl:0/energy_uj", "1000000\n");
  put(root / "intel-rapl:0/max_energy_range_uj", "262143328850\n");
  put(root / "intel-rapl:0:0/name", "core\n");
  put(root / "intel-rapl:0:0/energy_uj", "500000\n");
  put(root / "intel-rapl:0:1/name", "dram\n");
  put(root / "intel-rapl:0:1/energy_uj", "100\n");
  put(root / "intel-rapl:1/name", "psys\n");
  put(root / "intel-rapl:1/energy_uj", "0\n");
  double now = 10.0;
  Opened op = open_rapl(root.string(), [&] { return now; });
  ASSERT_TRUE(op.source) << op.reason;
  Source& s = *op.source;
  EXPECT_EQ(s.name(), "rapl");
  EXPECT_FALSE(s.self_paced());
  EXPECT_EQ(s.rails(), (std::vector<Rail>{Rail::cpu, Rail::dram, Rail::core}));
  Reading r0, r1, r2;
  ASSERT_TRUE(s.next(&r0));
  EXPECT_EQ(r0.seconds, 0.0);
  EXPECT_EQ(r0.joules[Rail::cpu], 0.0);
  EXPECT_FALSE(r0.joules.has(Rail::gpu));  // RAPL has no GPU or ANE rail: NaN, not 0
  EXPECT_FALSE(r0.joules.has(Rail::ane));
  put(root / "intel-rapl:0/energy_uj", "13000000\n");   // +12 J in 2 s = 6 W
  put(root / "intel-rapl:0:0/energy_uj", "4500000\n");  // +4 J (inside the package)
  put(root / "intel-rapl:0:1/energy_uj", "1000100\n");  // +1 J
  put(root / "intel-rapl:1/energy_uj", "30000000\n");   // psys: not added (would double count)
  now = 12.0;
  ASSERT_TRUE(s.next(&r1));
  Sample d = difference(r0, r1);
  EXPECT_DOUBLE_EQ(d.seconds, 2.0);
  EXPECT_NEAR(d.watts(Rail::cpu), 6.0, 1e-12);
  EXPECT_NEAR(d.watts(Rail::core), 2.0, 1e-12);
  EXPECT_NEAR(d.watts(Rail::dram), 0.5, 1e-12);
  EXPECT_NEAR(d.joules.total(), 13.0, 1e-12);  // cpu + dram; core is part of cpu
  // The package counter wraps: (max - 13e6) + 1e6 microjoules.
  put(root / "intel-rapl:0/energy_uj", "1000000\n");
  now = 13.0;
  ASSERT_TRUE(s.next(&r2));
  EXPECT_NEAR(difference(r1, r2).joules[Rail::cpu], (262143328850.0 - 13000000.0 + 1000000.0) * 1e-6, 1e-6);
  EXPECT_NEAR(r2.joules[Rail::cpu], 12.0 + (262143328850.0 - 12000000.0) * 1e-6, 1e-6);
}

TEST(PowerRapl, PsysAloneCountsAsCpu) {
  auto root = test::temp_dir("rapl_psys");
  put(root / "intel-rapl:0/name", "psys\n");
  put(root / "intel-rapl:0/energy_uj", "0\n");
  Opened op = open_rapl(root.string(), [] { return 0.0; });
  ASSERT_TRUE(op.source) << op.reason;
  EXPECT_EQ(op.source->rails(), (std::vector<Rail>{Rail::cpu}));
}

TEST(PowerRapl, MissingSaysWhy) {
  auto root = test::temp_dir("rapl_none");
  Opened p = open_rapl((root / "nope").string());
  EXPECT_FALSE(p.source);
  EXPECT_NE(p.reason.find("rapl: no " + (root / "nope").string()), std::string::npos) << p.reason;
  Opened q = open_rapl(root.string());  // the directory exists, no zones
  EXPECT_FALSE(q.source);
  EXPECT_NE(q.reason.find("no RAPL zones"), std::string::npos) << q.reason;
}

TEST(PowerRapl, UnreadableSaysWhy) {
  auto root = test::temp_dir("rapl_perm");
  put(root / "intel-rapl:0/name", "package-0\n");
  if (::geteuid() == 0) {
    fs::create_directories(root / "intel-rapl:0/energy_uj");  // root ignores permissions: make it unreadable
  } else {
    put(root / "intel-rapl:0/energy_uj", "1\n");
    fs::permissions(root / "intel-rapl:0/energy_uj", fs::perms::none);
  }
  Opened p = open_rapl(root.string());
  EXPECT_FALSE(p.source);
  EXPECT_NE(p.reason.find("not readable"), std::string::npos) << p.reason;
}

TEST(PowerRapl, CounterVanishingLaterIsAnError) {
  auto root = test::temp_dir("rapl_gone");
  put(root / "intel-rapl:0/name", "package-0\n");
  put(root / "intel-rapl:0/energy_uj", "5\n");
  Opened op = open_rapl(root.string());
  ASSERT_TRUE(op.source);
  fs::remove(root / "intel-rapl:0/energy_uj");
  Reading r;
  try {
    op.source->next(&r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read " + (root / "intel-rapl:0").string() + "/energy_uj"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace anelab::power
