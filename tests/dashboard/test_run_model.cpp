// Run model: events -> series/markers/config, malformed lines, restarts, resumes, truncation,
// several runs side by side, and the recorded fixture.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dashboard/run_model.h"
#include "tests/common/test_data.h"

namespace anelab::dashboard {
namespace {
using nlohmann::json;

std::string step_line(int step, double loss, double t = 0) {
  json e = {{"event", "step"},   {"t", t ? t : 1000.0 + step},
            {"step", step},      {"loss", loss},
            {"lr", 1e-3},        {"grad_norm", 1.5},
            {"loss_scale", 256}, {"skipped", false},
            {"tokens", 512},     {"tokens_per_s", 8000},
            {"ms", 60.0},        {"ms_kernel", 40.0},
            {"ms_cpu_dw", 5.0},  {"ms_staging", 6.0},
            {"ms_other", 9.0},   {"compiles_total", 6},
            {"restarts", 0},     {"rss_mb", 90.0},
            {"cpu_pct", 180.0}};
  return e.dump();
}
std::string start_line(int step, bool resumed, int restart, const std::string& run = "r1") {
  json e = {{"event", "run_start"},
            {"t", 1000.0 + step},
            {"step", step},
            {"schema", 1},
            {"run", run},
            {"pid", 999999999},
            {"resumed", resumed},
            {"restart", restart},
            {"backend", "emulator"},
            {"device", "m4"},
            {"strategy", "dynamic"},
            {"config", {{"lr", 0.0005}, {"steps", 100}}},
            {"model", {{"arch", "llama"}, {"dim", 64}}}};
  return e.dump();
}
void append(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::app | std::ios::binary);
  f << s;
}

TEST(RunModel, ParsesAllEventTypes) {
  RunData r("/nonexistent/run-a");
  uint64_t n = 0;
  r.apply_line(start_line(0, false, 0), ++n);
  r.apply_line(R"({"event":"compile","t":1000.4,"step":0,"kernels":6,"ms":212.5,"compiles_total":6,"budget":119})",
               ++n);
  r.apply_line(step_line(1, 2.5), ++n);
  r.apply_line(step_line(2, 2.4), ++n);
  r.apply_line(R"({"event":"eval","t":1003,"step":2,"val_loss":2.45,"val_tokens":8192})", ++n);
  r.apply_line(
      R"({"event":"sample","t":1003.5,"step":2,"text":"Once upon","prompt":"","temperature":0.8,"top_p":0.9,"tokens":64})",
      ++n);
  r.apply_line(R"({"event":"checkpoint","t":1003.6,"step":2,"path":"ck/last.ckpt","kind":"last"})", ++n);
  r.apply_line(R"({"event":"checkpoint","t":1003.7,"step":2,"path":"ck/best.ckpt","kind":"best","val_loss":2.45})",
               ++n);
  r.apply_line(R"({"event":"future_thing","t":1004,"step":2,"x":1})", ++n);
  r.apply_line(R"({"event":"run_end","t":1005,"step":2,"steps":2,"wall_s":5,"best_val_loss":2.45,"final_loss":2.4})",
               ++n);
  EXPECT_EQ(r.name, "r1");
  EXPECT_EQ(r.backend, "emulator");
  EXPECT_EQ(r.strategy, "dynamic");
  EXPECT_EQ(r.config["lr"].get<double>(), 0.0005);
  EXPECT_EQ(r.model["dim"].get<int>(), 64);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(r.steps[Col::loss][1], 2.4);
  EXPECT_DOUBLE_EQ(r.steps[Col::ms_staging][0], 6.0);
  EXPECT_DOUBLE_EQ(r.steps[Col::skipped][0], 0.0);
  ASSERT_EQ(r.evals.size(), 1u);
  EXPECT_DOUBLE_EQ(r.evals.val_loss[0], 2.45);
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].text, "Once upon");
  EXPECT_DOUBLE_EQ(r.samples[0].top_p, 0.9);
  EXPECT_EQ(r.last_checkpoint, "ck/last.ckpt");
  EXPECT_EQ(r.best_checkpoint, "ck/best.ckpt");
  EXPECT_EQ(r.compiles_total, 6);
  EXPECT_EQ(r.compile_budget, 119);
  EXPECT_DOUBLE_EQ(r.compile_ms, 212.5);
  EXPECT_EQ(r.ignored, 1u);
  EXPECT_EQ(r.malformed, 0u);
  EXPECT_EQ(r.status, RunStatus::finished);
  EXPECT_TRUE(r.have_best_val);
  int compiles = 0, checkpoints = 0;
  for (auto& m : r.markers) compiles += m.kind == MarkerKind::compile, checkpoints += m.kind == MarkerKind::checkpoint;
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(checkpoints, 2);
}

// Energy: a trainer without a power source says so in run_start and writes null energy: the model
// keeps "not available" with the reason and NaN (never 0) in the energy columns; with a source the
// joules come through.
TEST(RunModel, EnergyNotAvailableIsAStateNotZeros) {
  RunData r("/nonexistent/run-e");
  json s = json::parse(start_line(0, false, 0));
  s["power"] = {{"available", false}, {"reason", "not available on this machine: rapl: no /fake/powercap"}};
  r.apply_line(s.dump(), 1);
  json st = json::parse(step_line(1, 2.0));
  st["energy_j"] = nullptr, st["j_per_token"] = nullptr;
  r.apply_line(st.dump(), 2);
  EXPECT_EQ(r.power_state, PowerState::not_available);
  EXPECT_NE(r.power_reason.find("rapl: no /fake/powercap"), std::string::npos);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_TRUE(std::isnan(r.steps[Col::energy_j][0]));
  EXPECT_TRUE(std::isnan(r.steps[Col::j_per_token][0]));

  RunData a("/nonexistent/run-f");
  s["power"] = {{"available", true}, {"source", "rapl"}, {"rails", {"cpu", "dram"}}};
  a.apply_line(s.dump(), 1);
  st["energy_j"] = 3.5, st["j_per_token"] = 3.5 / 512;
  a.apply_line(st.dump(), 2);
  EXPECT_EQ(a.power_state, PowerState::available);
  EXPECT_EQ(a.power_source, "rapl");
  EXPECT_DOUBLE_EQ(a.steps[Col::energy_j][0], 3.5);
  EXPECT_DOUBLE_EQ(a.steps[Col::j_per_token][0], 3.5 / 512);

  RunData old("/nonexistent/run-g");  // a run_start from before power existed: unknown, not "available"
  old.apply_line(start_line(0, false, 0), 1);
  EXPECT_EQ(old.power_state, PowerState::unknown);
}

TEST(RunModel, MalformedLinesAreCountedWithTheFirstLineNumber) {
  RunData r("/nonexistent/run-bad");
  r.apply_line(step_line(1, 3.0), 1);
  r.apply_line("{\"event\":\"step\",\"loss\":", 2);  // cut JSON
  r.apply_line("[1,2,3]", 3);                        // not an object
  r.apply_line("{\"loss\":1}", 4);                   // no event
  r.apply_line("{\"event\":5}", 5);                  // event not a string
  r.apply_line("   ", 6);                            // blank: ignored
  r.apply_line("\xff\xfe garbage", 7);
  r.apply_line(R"({"event":"step","step":"two","loss":"low","t":1002})", 8);  // wrong field types
  r.apply_line(step_line(3, 2.0), 9);
  EXPECT_EQ(r.malformed, 5u);
  EXPECT_EQ(r.first_error.line, 2u);
  EXPECT_NE(r.first_error.message.find("invalid JSON"), std::string::npos) << r.first_error.message;
  ASSERT_EQ(r.recent_errors.size(), 5u);
  EXPECT_EQ(r.recent_errors.back().line, 7u);
  // The step with wrong types is kept with NaN loss and the previous step number.
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_TRUE(std::isnan(r.steps[Col::loss][1]));
  EXPECT_DOUBLE_EQ(r.steps[Col::step][1], 1.0);
  EXPECT_DOUBLE_EQ(r.steps[Col::loss][2], 2.0);
}

TEST(RunModel, ExecRestartKeepsRowsAndAddsAMarker) {
  RunData r("/nonexistent/run-restart");
  uint64_t n = 0;
  r.apply_line(start_line(0, false, 0), ++n);
  for (int s = 1; s <= 10; ++s) r.apply_line(step_line(s, 3.0 - 0.1 * s), ++n);
  r.apply_line(
      R"({"event":"restart","t":1010.5,"step":10,"reason":"compile_budget","compiles_total":110,"budget":119})", ++n);
  r.apply_line(start_line(10, false, 1), ++n);
  for (int s = 11; s <= 12; ++s) r.apply_line(step_line(s, 2.0), ++n);  // (their "restarts" field says 0)
  EXPECT_EQ(r.steps.size(), 12u);
  EXPECT_EQ(r.restarts, 1);
  EXPECT_EQ(r.starts, 2);
  EXPECT_EQ(r.dropped_rows, 0u);
  int restart_markers = 0;
  for (auto& m : r.markers) restart_markers += m.kind == MarkerKind::restart;
  EXPECT_EQ(restart_markers, 2);  // the restart event and the new process
}

TEST(RunModel, ResumeFromAnOlderCheckpointDropsSupersededSteps) {
  RunData r("/nonexistent/run-resume");
  uint64_t n = 0;
  r.apply_line(start_line(0, false, 0), ++n);
  for (int s = 1; s <= 30; ++s) r.apply_line(step_line(s, 3.0), ++n);
  r.apply_line(R"({"event":"eval","t":1025,"step":25,"val_loss":2.9})", ++n);
  r.apply_line(R"({"event":"eval","t":1020,"step":20,"val_loss":2.95})", ++n);
  r.apply_line(start_line(20, true, 0), ++n);  // crashed at 30, resumed from the step-20 checkpoint
  EXPECT_EQ(r.steps.size(), 20u);
  EXPECT_DOUBLE_EQ(r.steps[Col::step].back(), 20.0);
  ASSERT_EQ(r.evals.size(), 1u);  // eval at 25 dropped; the one at 20 stays
  EXPECT_DOUBLE_EQ(r.evals.step[0], 20.0);
  EXPECT_EQ(r.dropped_rows, 11u);
  r.apply_line(step_line(21, 2.5), ++n);
  EXPECT_EQ(r.steps.size(), 21u);
  EXPECT_EQ(r.markers.back().kind, MarkerKind::resume);
  EXPECT_EQ(r.status, RunStatus::running);
}

TEST(RunModel, FatalErrorEventMarksTheRunFailed) {
  RunData r("/nonexistent/run-err");
  r.apply_line(start_line(0, false, 0), 1);
  r.apply_line(R"({"event":"error","t":1001,"step":0,"message":"[train] out of memory"})", 2);
  EXPECT_EQ(r.status, RunStatus::failed);
  EXPECT_EQ(r.fatal_error, "[train] out of memory");
}

TEST(RunModel, FollowsAGrowingFileWithTruncationAndPartialLines) {
  auto dir = test::temp_dir("rm_follow");
  auto p = dir / "events.jsonl";
  RunData r(dir.string());
  EXPECT_FALSE(r.poll());  // no file yet
  EXPECT_EQ(r.status, RunStatus::waiting);
  append(p, start_line(0, false, 0) + "\n" + step_line(1, 3.0) + "\n");
  std::string partial = step_line(2, 2.9);
  append(p, partial.substr(0, 20));
  EXPECT_TRUE(r.poll());
  EXPECT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.malformed, 0u);  // the partial line is pending, not malformed
  append(p, partial.substr(20) + "\n");
  EXPECT_TRUE(r.poll());
  EXPECT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.polls_with_data, 2u);
  // Truncate: a new run in the same directory.
  {
    std::ofstream f(p, std::ios::trunc);
    f << start_line(0, false, 0, "r2") << "\n"
      << "oops\n";
  }
  EXPECT_TRUE(r.poll());
  EXPECT_EQ(r.name, "r2");
  EXPECT_EQ(r.steps.size(), 0u);
  EXPECT_EQ(r.malformed, 1u);
  EXPECT_EQ(r.first_error.line, 2u);
  EXPECT_EQ(r.follower().resets(), 1u);
}

TEST(RunModel, SeveralRunsAreIndependent) {
  auto d1 = test::temp_dir("rm_multi_a"), d2 = test::temp_dir("rm_multi_b");
  append(d1 / "events.jsonl", start_line(0, false, 0, "a") + "\n" + step_line(1, 3.0) + "\n");
  append(d2 / "events.jsonl",
         start_line(0, false, 0, "b") + "\nnot json\n" + step_line(1, 4.0) + "\n" + step_line(2, 3.5) + "\n");
  std::vector<std::unique_ptr<RunData>> runs;
  runs.push_back(std::make_unique<RunData>(d1.string()));
  runs.push_back(std::make_unique<RunData>(d2.string()));
  for (auto& r : runs) r->poll();
  EXPECT_EQ(runs[0]->name, "a");
  EXPECT_EQ(runs[1]->name, "b");
  EXPECT_EQ(runs[0]->steps.size(), 1u);
  EXPECT_EQ(runs[1]->steps.size(), 2u);
  EXPECT_EQ(runs[0]->malformed, 0u);
  EXPECT_EQ(runs[1]->malformed, 1u);
}

TEST(RunModel, RecordedFixtureLoadsCompletely) {
  std::string dir = test::source_path("tests/dashboard/fixtures/recorded_run");
  ASSERT_TRUE(std::filesystem::exists(dir + "/events.jsonl"));
  RunData r(dir);
  while (r.poll(1 << 16)) {
  }
  // Independent count of the step lines in the file.
  std::ifstream f(dir + "/events.jsonl");
  std::string line;
  size_t step_lines = 0, lines = 0;
  while (std::getline(f, line)) ++lines, step_lines += line.find("\"event\":\"step\"") != std::string::npos;
  EXPECT_GT(step_lines, 100u);
  EXPECT_EQ(r.steps.size(), step_lines);
  EXPECT_EQ(r.dropped_rows, 0u);
  EXPECT_EQ(r.events, lines);
  EXPECT_EQ(r.malformed, 0u);
  EXPECT_EQ(r.status, RunStatus::finished);
  EXPECT_GE(r.starts, 2);  // the fixture contains an exec-restart
  EXPECT_FALSE(r.samples.empty());
  EXPECT_FALSE(r.config.empty());
  // Loss goes down over the run.
  EXPECT_LT(r.steps[Col::loss].back(), r.steps[Col::loss].front());
}

}  // namespace
}  // namespace anelab::dashboard
