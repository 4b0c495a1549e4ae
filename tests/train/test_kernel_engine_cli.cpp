// The static / dynamic kernel strategies through the `anelab` binary: exec-restart under a tiny compile budget ==
// an unrestarted run bitwise, `--backend ane` on a host without one, and the ANE self-check over the fake shim. (In the
// test_train_runs binary, which depends on the program; test_kernel_engine.cpp has the in-process tests.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/engine.h"
#include "train/trainer.h"

namespace anelab {
namespace {

TEST(KernelEngine, StaticExecRestartsEqualUnrestartedRun) {
  const auto dir = test::temp_dir("krestart").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 4);
  auto c = test::small_run(dir + "/straight", data, "static");
  c.steps = 8, c.accum_steps = 2;
  train::run_training(c, {false, false});
  // 5 layers: a process compiles 2 + 35 kernels for its first step and 35 per further update; a budget of
  // 75 fits two steps (72), so 8 steps take 4 processes (3 exec-restarts).
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab train --preset stories260k --data " + data +
                          " --run-dir " + dir +
                          "/restarted --run t --steps 8 --accum-steps 2 --batch-size 2 "
                          "--seq-len 64 --lr 2e-3 --warmup-steps 2 --eval-batches 0 --strategy static "
                          "--compile-budget 75 --quiet > " +
                          dir + "/log.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file_text(dir + "/log.txt");
  EXPECT_EQ(test::read_events(dir + "/restarted", "restart").size(), 3u);
  EXPECT_EQ(test::read_events(dir + "/restarted", "run_start").size(), 4u);
  const auto compiles = test::read_events(dir + "/restarted", "compile");
  ASSERT_EQ(compiles.size(), 8u);
  for (size_t i = 0; i < compiles.size(); ++i) EXPECT_EQ(compiles[i]["kernels"].get<int>(), i % 2 ? 35 : 37) << i;
  test::expect_same_state(dir + "/straight", dir + "/restarted");
  std::filesystem::remove_all(dir);
}

TEST(KernelEngine, AneBackendGivesClearError) {
  const models::ModelConfig cfg = models::preset("stories260k");
  train::TrainConfig c;
  c.strategy = "dynamic", c.backend = "ane", c.seq_len = 64;
  try {
    train::make_engine(c, train::ParamLayout(cfg));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no Apple Neural Engine on this host"), std::string::npos) << e.what();
  }
  const auto dir = test::temp_dir("kane").string();
  const std::string data = test::write_tokens(dir, 2000, 512, 1);
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab train --preset stories260k --data " + data +
                          " --run-dir " + dir + "/r --steps 2 --seq-len 64 --strategy static --backend ane > " + dir +
                          "/out.txt 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string out = read_file_text(dir + "/out.txt");
  EXPECT_EQ(out.rfind("anelab: error: [", 0), 0u) << out;
  EXPECT_NE(out.find("no Apple Neural Engine on this host"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  std::filesystem::remove_all(dir);
}

// Issue 40 item 4: on the ANE (the fake shim with a planted layout error: outputs one row further down, no error)
// the self-check runs before the first step, says so in one line (chip, kernel, max rel diff) and stops the run
// before any step, naming --strategy cpu and `anelab probe`, with its report in the run directory; without the
// planted error the same run trains, with one `self_check` event (agrees, its ms).
TEST(KernelEngine, AneSelfCheckStopsTrainingOnAPlantedLayoutError) {
  const auto dir = test::temp_dir("kselfcheck").string();
  const std::string data = test::write_tokens(dir, 2000, 512, 1);
  for (const bool planted : {true, false}) {
    const std::string run = dir + (planted ? "/planted" : "/clean");
    const std::string cmd =
        "ANELAB_ANE_SHIM=fake ANELAB_FAKE_ANE_DIR=" + dir +
        "/ane ANELAB_FAKE_ANE_LAYOUT_ERROR=" + (planted ? "1 " : "0 ") + std::string(ANELAB_BINARY_DIR) +
        "/bin/anelab train --preset stories260k --data " + data + " --run-dir " + run +
        " --steps 2 --seq-len 64 --strategy dynamic --backend ane --eval-batches 0 > " + run + ".txt 2>&1";
    const int rc = std::system(cmd.c_str());
    const std::string out = read_file_text(run + ".txt");
    if (!planted) {
      EXPECT_EQ(rc, 0) << out;
      EXPECT_EQ(test::losses(run).size(), 2u) << out;
      const auto checks = test::read_events(run, "self_check");  // the passed check, once, before step 1
      ASSERT_EQ(checks.size(), 1u) << out;
      EXPECT_EQ(checks[0]["agrees"], true);
      EXPECT_EQ(checks[0]["kernel"], "attn_fwd");
      EXPECT_GT(checks[0]["ms"].get<double>(), 0.0);
      EXPECT_LE(checks[0]["max_rel_diff"].get<double>(), checks[0]["tolerance"].get<double>());
      continue;
    }
    EXPECT_NE(rc, 0) << out;
    const size_t at = out.find("anelab: error: [train] [self-check] ane m4 attn_fwd");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string line = out.substr(at, out.find('\n', at) - at);  // the error is one line
    for (const char* part : {"DIFFERS from the emulator", "max rel diff", "--strategy cpu", "anelab probe",
                             "/self_check.json", "before its first step"})
      EXPECT_NE(line.find(part), std::string::npos) << part << " in: " << line;
    const auto report = nlohmann::json::parse(read_file_text(run + "/self_check.json"));
    EXPECT_EQ(report["agrees"], false);
    EXPECT_GE(report["max_rel_diff"].get<double>(), 0.5);
    EXPECT_FALSE(std::filesystem::exists(run + "/last.ckpt"));
    EXPECT_TRUE(test::read_events(run, "step").empty());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab
