// The powermetrics plist parser on the recorded fixtures (tests/fixtures/power, README there): energy
// and interval per sample against the numbers the fixtures were written with, computed here; malformed
// and truncated input; rails; source selection and the Meter.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/power.h"
#include "tests/common/test_data.h"

namespace anelab::power {
namespace {

std::string fixture(const std::string& f) { return test::source_path("tests/fixtures/power/" + f); }

// cpu, gpu, ane in the fixture's unit (mJ or mW) and elapsed_ns, per sample.
struct Raw {
  double cpu, gpu, ane;
  int64_t elapsed_ns;
};
const std::vector<Raw> kProcessorEnergy = {
    {1532, 75, 0, 1004621458}, {2210, 41, 1874, 998004125}, {1987, 38, 2410, 1001250000}};
const std::vector<Raw> kToplevelPower = {
    {3120.5, 210.25, 1450, 500000000}, {2890.75, 0, 1622.5, 250000000}, {3301, 198.5, 0, 500123000}};

// Joules of one rail value: mJ / 1000, or mW / 1000 x seconds.
double joules(double v, const Raw& r, bool power_keys) {
  return power_keys ? v / 1000.0 * (double(r.elapsed_ns) / 1e9) : v / 1000.0;
}

std::vector<Reading> read_all(Source& s) {
  std::vector<Reading> out;
  Reading r;
  while (s.next(&r)) out.push_back(r);
  return out;
}

// Relative tolerance: a handful of double roundings (sums of 3 terms, one division).
void expect_close(double got, double want) { EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::fabs(want))); }

void check_fixture(const std::string& file, const std::vector<Raw>& raw, bool power_keys) {
  auto src = open_powermetrics_file(fixture(file));
  EXPECT_EQ(src->name(), "powermetrics-file");
  EXPECT_TRUE(src->self_paced());
  const auto readings = read_all(*src);
  ASSERT_EQ(readings.size(), raw.size());
  EXPECT_EQ(src->rails(), (std::vector<Rail>{Rail::cpu, Rail::gpu, Rail::ane}));
  EXPECT_EQ(src->basis(), power_keys ? "power keys (mW) x elapsed_ns" : "energy keys (mJ)");
  Reading prev;
  double cpu = 0, gpu = 0, ane = 0, secs = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    const Raw& r = raw[i];
    const Sample s = difference(prev, readings[i]);
    const double dt = double(r.elapsed_ns) / 1e9;
    expect_close(s.seconds, dt);
    expect_close(s.watts(Rail::cpu), joules(r.cpu, r, power_keys) / dt);
    expect_close(s.watts(Rail::gpu), joules(r.gpu, r, power_keys) / dt);
    expect_close(s.watts(Rail::ane), joules(r.ane, r, power_keys) / dt);
    EXPECT_TRUE(std::isnan(s.watts(Rail::dram)));  // no such rail: NaN, not 0
    EXPECT_TRUE(std::isnan(s.watts(Rail::core)));
    cpu += joules(r.cpu, r, power_keys), gpu += joules(r.gpu, r, power_keys), ane += joules(r.ane, r, power_keys);
    secs += dt;
    prev = readings[i];
  }
  expect_close(prev.seconds, secs);
  expect_close(prev.joules[Rail::cpu], cpu);
  expect_close(prev.joules[Rail::gpu], gpu);
  expect_close(prev.joules[Rail::ane], ane);
  expect_close(prev.joules.total(), cpu + gpu + ane);
}

TEST(PowerPowermetrics, EnergyKeysInProcessorDict) { check_fixture("processor_energy.plist", kProcessorEnergy, false); }

TEST(PowerPowermetrics, PowerKeysAtTopLevel) { check_fixture("toplevel_power.plist", kToplevelPower, true); }

// The error of reading `file` to its end ("" when none).
std::string error_of(const std::string& file) {
  try {
    auto src = open_powermetrics_file(file);
    read_all(*src);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_one_line_error(const std::string& file, const std::vector<std::string>& parts) {
  const std::string e = error_of(fixture(file));
  ASSERT_FALSE(e.empty()) << file << " was accepted";
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(e.rfind("[power] ", 0), 0u) << e;
  EXPECT_NE(e.find(fixture(file)), std::string::npos) << e;
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "missing '" << p << "' in: " << e;
}

TEST(PowerPowermetrics, TruncatedSampleIsAnError) {
  expect_one_line_error("truncated.plist", {"sample 2", "truncated"});
}

TEST(PowerPowermetrics, MalformedValueIsAnError) {
  expect_one_line_error("malformed_value.plist", {"sample 2", "processor.ane_energy", "\"n/a\""});
}

TEST(PowerPowermetrics, MismatchedTagIsAnError) {
  expect_one_line_error("malformed_xml.plist", {"sample 3", "expected </integer>"});
}

TEST(PowerPowermetrics, MissingElapsedIsAnError) {
  expect_one_line_error("missing_elapsed.plist", {"sample 1", "elapsed_ns"});
}

// Small hand-made streams for the remaining rules.
std::string plist(const std::string& body) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<dict>\n" + body + "</dict>\n</plist>\n";
}

std::string write_tmp(const std::string& tag, const std::string& bytes) {
  auto p = test::temp_dir(tag) / "pm.plist";
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

TEST(PowerPowermetrics, RailMissingLaterIsAnErrorAndEmptyStreamToo) {
  const std::string a = plist(
      "<key>elapsed_ns</key><integer>1000000</integer><key>cpu_energy</key><integer>5</integer>"
      "<key>ane_energy</key><integer>7</integer>");
  const std::string b =
      plist("<key>elapsed_ns</key><integer>1000000</integer><key>cpu_energy</key><integer>5</integer>");
  std::string e = error_of(write_tmp("pm_rail", a + '\0' + b + '\0'));
  EXPECT_NE(e.find("sample 2 has no ane_energy or ane_power key"), std::string::npos) << e;
  e = error_of(write_tmp("pm_empty", std::string("\n\0\n", 3)));
  EXPECT_NE(e.find("no powermetrics samples"), std::string::npos) << e;
  e = error_of(
      write_tmp("pm_neg", plist("<key>elapsed_ns</key><integer>10</integer><key>cpu_power</key><real>-1</real>")));
  EXPECT_NE(e.find("cpu_power is -1.0, not a finite non-negative number"), std::string::npos) << e;
  e = error_of(write_tmp("pm_none", plist("<key>elapsed_ns</key><integer>10</integer>")));
  EXPECT_NE(e.find("no cpu/gpu/ane"), std::string::npos) << e;
  e = error_of(
      write_tmp("pm_zero", plist("<key>elapsed_ns</key><integer>0</integer><key>cpu_power</key><real>1</real>")));
  EXPECT_NE(e.find("elapsed_ns is 0, not a positive integer"), std::string::npos) << e;
  e = error_of(write_tmp("pm_junk", "<plist><dict></dict></plist>trailing"));
  EXPECT_NE(e.find("unexpected data after </plist>"), std::string::npos) << e;
  EXPECT_NE(error_of("/nonexistent/pm.plist").find("cannot open powermetrics recording /nonexistent/pm.plist"),
            std::string::npos);
}

TEST(PowerPowermetrics, MixedKeysEntitiesAndNoTrailingNul) {
  // gpu has only a power key (mW x elapsed), cpu an energy key; last sample without a NUL; an entity.
  const std::string s = plist(
      "<key>hw_model</key><string>a &amp; b</string><key>elapsed_ns</key><integer>2000000000</integer>"
      "<key>processor</key><dict><key>cpu_energy</key><integer>3000</integer><key>gpu_power</key><real>250.5</real>"
      "</dict>");
  auto src = open_powermetrics_file(write_tmp("pm_mixed", s));
  Reading r;
  ASSERT_TRUE(src->next(&r));
  expect_close(r.joules[Rail::cpu], 3.0);
  expect_close(r.joules[Rail::gpu], 0.2505 * 2.0);
  EXPECT_FALSE(r.joules.has(Rail::ane));
  EXPECT_NE(src->basis().find("else power keys"), std::string::npos);
  EXPECT_FALSE(src->next(&r));
}

TEST(PowerSelect, FileWinsAndNoSourceSaysWhy) {
  SourceOptions o;
  o.powermetrics_file = fixture("toplevel_power.plist");
  Selection s = select_source(o);
  ASSERT_TRUE(s.source);
  EXPECT_EQ(s.source->name(), "powermetrics-file");
  o.powermetrics_file.clear();
  o.rapl_root = "/nonexistent/powercap";
  s = select_source(o);
#if defined(__linux__)
  EXPECT_FALSE(s.source);
  EXPECT_NE(s.reason().find("ioreport: macOS only"), std::string::npos) << s.reason();
  EXPECT_NE(s.reason().find("powermetrics: macOS only"), std::string::npos) << s.reason();
  EXPECT_NE(s.reason().find("rapl: no /nonexistent/powercap"), std::string::npos) << s.reason();
  Meter m(std::move(s));
  EXPECT_FALSE(m.available());
  EXPECT_EQ(m.reason().rfind("not available on this machine: ", 0), 0u) << m.reason();
  EXPECT_THROW(m.energy(), Error);
#endif
}

TEST(PowerMeter, DrainsASelfPacedSource) {
  SourceOptions o;
  o.powermetrics_file = fixture("processor_energy.plist");
  Meter m(select_source(o));
  ASSERT_TRUE(m.available());
  EXPECT_EQ(m.source_name(), "powermetrics-file");
  Reading r;
  for (int i = 0; i < 2000 && r.seconds == 0; ++i) {  // the worker thread reads the whole file
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    r = m.energy();
  }
  for (int i = 0; i < 2000 && r.joules[Rail::cpu] < 5.7; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    r = m.energy();
  }
  expect_close(r.joules[Rail::cpu], (1532 + 2210 + 1987) / 1000.0);
  expect_close(r.joules[Rail::ane], (0 + 1874 + 2410) / 1000.0);
}

}  // namespace
}  // namespace anelab::power
