// Energy in the trainer's events: with a power source each step carries the joules measured between
// its start and end (a scripted counter source: each reading adds known joules, so the expected value
// is exact); without one, run_start.power says why and the step / run_end energy fields are null,
// never 0; a source that fails mid-run turns the fields null with the error.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/core/error.h"
#include "framework/core/power.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/events.h"
#include "train/trainer.h"

namespace anelab {
namespace {
using nlohmann::json;

// Counter source: reading n has cpu = 2 n J, ane = 0.5 n J, seconds = 0.1 n; fails after fail_after reads.
class ScriptedCounter final : public power::Source {
 public:
  explicit ScriptedCounter(int fail_after = -1) : fail_after_(fail_after) {}
  std::string name() const override { return "scripted"; }
  std::string detail() const override { return "test counter"; }
  std::string basis() const override { return "energy counters"; }
  bool self_paced() const override { return false; }
  std::vector<power::Rail> rails() const override { return {power::Rail::cpu, power::Rail::ane}; }
  bool next(power::Reading* r) override {
    if (fail_after_ >= 0 && n_ >= fail_after_) fail("power", "scripted counter: read failed");
    ++n_;
    r->seconds = 0.1 * n_;
    r->joules = {};
    r->joules[power::Rail::cpu] = 2.0 * n_, r->joules[power::Rail::ane] = 0.5 * n_;
    return true;
  }

 private:
  int n_ = 0, fail_after_;
};

train::TrainConfig power_run(const std::string& dir, const std::string& data) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = dir, c.run = "p";
  c.steps = 3, c.batch_size = 1, c.seq_len = 16, c.eval_every = 0, c.eval_batches = 0, c.lr = 1e-3;
  train::validate(c);
  return c;
}

train::RunHooks hooks(std::function<power::Selection()> p) {
  train::RunHooks h;
  h.allow_exec_restart = false, h.console = false, h.power = std::move(p);
  return h;
}

TEST(TrainPower, StepEnergyFromTheSource) {
  const auto dir = test::temp_dir("train_power").string();
  const std::string data = test::write_tokens(dir, 2000, 512, 5);
  train::run_training(power_run(dir + "/run", data), hooks([] {
                        power::Selection s;
                        s.source = std::make_unique<ScriptedCounter>();
                        return s;
                      }));
  const json start = test::read_events(dir + "/run", "run_start").at(0);
  EXPECT_EQ(start["power"]["available"], true);
  EXPECT_EQ(start["power"]["source"], "scripted");
  EXPECT_EQ(start["power"]["rails"], json({"cpu", "ane"}));
  const auto steps = test::read_events(dir + "/run", "step");
  ASSERT_EQ(steps.size(), 3u);
  for (const json& s : steps) {
    // One reading at the step's start, one at its end: +2 J cpu, +0.5 J ane.
    EXPECT_DOUBLE_EQ(s["energy_j"].get<double>(), 2.5);
    EXPECT_DOUBLE_EQ(s["j_per_token"].get<double>(), 2.5 / s["tokens"].get<double>());
    EXPECT_DOUBLE_EQ(s["energy_rails"]["cpu"].get<double>(), 2.0);
    EXPECT_DOUBLE_EQ(s["energy_rails"]["ane"].get<double>(), 0.5);
    EXPECT_FALSE(s["energy_rails"].contains("gpu"));
  }
  const json end = test::read_events(dir + "/run", "run_end").at(0);
  EXPECT_DOUBLE_EQ(end["energy_j"].get<double>(), 7.5);
  EXPECT_DOUBLE_EQ(end["j_per_token"].get<double>(), 7.5 / (3.0 * 16.0));
}

TEST(TrainPower, NoSourceIsNotAvailableNeverZero) {
  const auto dir = test::temp_dir("train_nopower").string();
  const std::string data = test::write_tokens(dir, 2000, 512, 5);
  train::run_training(power_run(dir + "/run", data), hooks([] {
                        power::Selection s;
                        s.unavailable = {"rapl: no /fake/powercap"};
                        return s;
                      }));
  const json start = test::read_events(dir + "/run", "run_start").at(0);
  EXPECT_EQ(start["power"]["available"], false);
  EXPECT_EQ(start["power"]["reason"], "not available on this machine: rapl: no /fake/powercap");
  for (const json& s : test::read_events(dir + "/run", "step")) {
    ASSERT_TRUE(s.contains("energy_j"));
    EXPECT_TRUE(s["energy_j"].is_null());
    EXPECT_TRUE(s["j_per_token"].is_null());
    EXPECT_FALSE(s.contains("energy_rails"));
  }
  const json end = test::read_events(dir + "/run", "run_end").at(0);
  EXPECT_TRUE(end["energy_j"].is_null());
  EXPECT_NE(train::efficiency_report(end).find("Energy:        not available on this machine: rapl: no /fake/powercap"),
            std::string::npos)
      << train::efficiency_report(end);
}

TEST(TrainPower, SourceFailingMidRunTurnsEnergyNull) {
  const auto dir = test::temp_dir("train_failpower").string();
  const std::string data = test::write_tokens(dir, 2000, 512, 5);
  // Reads: 1 = zero point, 2-3 = step 1; the 4th (step 2's start) fails.
  train::run_training(power_run(dir + "/run", data), hooks([] {
                        power::Selection s;
                        s.source = std::make_unique<ScriptedCounter>(3);
                        return s;
                      }));
  const auto steps = test::read_events(dir + "/run", "step");
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_DOUBLE_EQ(steps[0]["energy_j"].get<double>(), 2.5);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_TRUE(steps[i]["energy_j"].is_null());
    EXPECT_NE(steps[i]["energy_error"].get<std::string>().find("scripted counter: read failed"), std::string::npos);
  }
  const json end = test::read_events(dir + "/run", "run_end").at(0);
  EXPECT_TRUE(end["energy_j"].is_null());  // not a partial sum
  EXPECT_EQ(end["power"]["available"], false);
}

}  // namespace
}  // namespace anelab
