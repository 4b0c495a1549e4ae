// `anelab power` end to end (the built binary): --powermetrics-file --json on the recorded fixtures
// gives per-sample watts and energy totals that this test computes from the fixtures' numbers;
// malformed / truncated input and "no source" give one line and a non-zero exit; a fake RAPL tree
// gives null GPU/ANE rails.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/core/power.h"
#include "tests/common/test_data.h"

namespace anelab {
namespace {
using nlohmann::json;

struct CmdResult {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

CmdResult anelab(const std::string& args) {
  const auto dir = test::temp_dir("power_cli");
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab " + args + " >" + (dir / "out").string() +
                          " 2>" + (dir / "err").string();
  CmdResult r;
  const int st = std::system(cmd.c_str());
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(dir / "out"), r.err = slurp(dir / "err");
  return r;
}

std::vector<json> json_lines(const std::string& s) {
  std::vector<json> v;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) v.push_back(json::parse(line));
  return v;
}

std::string fixture(const std::string& f) { return test::source_path("tests/fixtures/power/" + f); }

void expect_close(const json& got, double want) {
  ASSERT_TRUE(got.is_number()) << got.dump();
  EXPECT_NEAR(got.get<double>(), want, 1e-12 * std::max(1.0, std::fabs(want)));
}

// The recorded numbers (tests/fixtures/power/README.md): cpu, gpu, ane and elapsed_ns per sample.
struct Raw {
  double cpu, gpu, ane;
  double elapsed_ns;
};

void check_json(const std::string& file, const std::vector<Raw>& raw, bool power_keys) {
  const CmdResult r = anelab("power --powermetrics-file " + fixture(file) + " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), raw.size() + 1) << r.out;
  double tj[3] = {0, 0, 0}, ts = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    const json& j = lines[i];
    const double secs = raw[i].elapsed_ns / 1e9;
    const double v[3] = {raw[i].cpu, raw[i].gpu, raw[i].ane};
    const char* keys[3] = {"cpu_w", "gpu_w", "ane_w"};
    EXPECT_EQ(j["source"], "powermetrics-file");
    expect_close(j["seconds"], secs);
    for (int k = 0; k < 3; ++k) {
      const double joules = power_keys ? v[k] / 1000.0 * secs : v[k] / 1000.0;  // mW x s, or mJ
      expect_close(j[keys[k]], joules / secs);
      tj[k] += joules;
    }
    EXPECT_TRUE(j["dram_w"].is_null());
    ts += secs;
  }
  const json& s = lines.back();
  EXPECT_EQ(s["summary"], true);
  EXPECT_EQ(s["samples"], raw.size());
  expect_close(s["seconds"], ts);
  expect_close(s["cpu_j"], tj[0]);
  expect_close(s["gpu_j"], tj[1]);
  expect_close(s["ane_j"], tj[2]);
  EXPECT_TRUE(s["core_j"].is_null());
  EXPECT_EQ(s["basis"], power_keys ? "power keys (mW) x elapsed_ns" : "energy keys (mJ)");
}

TEST(PowerCli, ReplayEnergyKeysJson) {
  check_json("processor_energy.plist",
             {{1532, 75, 0, 1004621458}, {2210, 41, 1874, 998004125}, {1987, 38, 2410, 1001250000}}, false);
}

TEST(PowerCli, ReplayPowerKeysJson) {
  check_json("toplevel_power.plist",
             {{3120.5, 210.25, 1450, 500000000}, {2890.75, 0, 1622.5, 250000000}, {3301, 198.5, 0, 500123000}}, true);
}

TEST(PowerCli, SamplesLimitsAndTableOutput) {
  CmdResult r = anelab("power --powermetrics-file " + fixture("processor_energy.plist") + " --json --samples 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u);
  expect_close(lines[2]["cpu_j"], (1532 + 2210) / 1000.0);
  r = anelab("power --powermetrics-file " + fixture("processor_energy.plist"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("source: powermetrics-file"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("total"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("n/a"), std::string::npos) << r.out;  // dram / core
}

void expect_one_line_failure(const CmdResult& r, const std::vector<std::string>& parts) {
  EXPECT_NE(r.rc, 0);
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // exactly one line
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << "missing '" << p << "' in: " << r.err;
}

TEST(PowerCli, BadRecordingsFailWithOneLine) {
  for (const auto& [file, what] :
       std::vector<std::pair<std::string, std::string>>{{"truncated.plist", "truncated"},
                                                        {"malformed_value.plist", "processor.ane_energy"},
                                                        {"malformed_xml.plist", "expected </integer>"},
                                                        {"missing_elapsed.plist", "elapsed_ns"}}) {
    SCOPED_TRACE(file);
    expect_one_line_failure(anelab("power --json --powermetrics-file " + fixture(file)),
                            {"[power]", fixture(file), what});
  }
  expect_one_line_failure(anelab("power --powermetrics-file /nonexistent.plist"), {"/nonexistent.plist"});
}

#if defined(__linux__)
TEST(PowerCli, NoSourceSaysWhyAndFails) {
  const CmdResult r = anelab("power --json --rapl-root /nonexistent/powercap");
  expect_one_line_failure(r, {"no power source available on this machine", "ioreport: macOS only",
                              "powermetrics: macOS only", "rapl: no /nonexistent/powercap"});
  EXPECT_TRUE(r.out.empty()) << r.out;  // no numbers at all, in particular no zeros
}

TEST(PowerCli, ThisMachineEitherHasReadableRaplOrSaysWhy) {
  const CmdResult r = anelab("power --json --samples 1 --interval-ms 50");
  if (power::open_rapl().source) {  // readable RAPL counters on this machine
    EXPECT_EQ(r.rc, 0) << r.err;
  } else {
    expect_one_line_failure(r, {"no power source available on this machine", "rapl: "});
  }
}

TEST(PowerCli, FakeRaplTreeHasNoGpuOrAneRail) {
  const auto root = test::temp_dir("power_cli_rapl");
  std::filesystem::create_directories(root / "intel-rapl:0");
  std::ofstream(root / "intel-rapl:0/name") << "package-0\n";
  std::ofstream(root / "intel-rapl:0/energy_uj") << "1000\n";
  const CmdResult r = anelab("power --json --samples 2 --interval-ms 20 --rapl-root " + root.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["source"], "rapl");
  expect_close(lines[0]["cpu_w"], 0.0);  // the fake counter does not move
  EXPECT_GT(lines[0]["seconds"].get<double>(), 0.015);
  EXPECT_TRUE(lines[0]["gpu_w"].is_null());
  EXPECT_TRUE(lines[0]["ane_w"].is_null());
  EXPECT_TRUE(lines[2]["gpu_j"].is_null());
  expect_close(lines[2]["cpu_j"], 0.0);
}
#endif

}  // namespace
}  // namespace anelab
