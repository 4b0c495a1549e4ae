// The static / dynamic kernel strategies through the `anelab` binary: exec-restart under a tiny compile budget ==
// an unrestarted run bitwise, and `--backend ane` on a host without one. (In the test_train_runs binary, which
// depends on the program; test_kernel_engine.cpp has the in-process tests.)
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
                          "--seq-len 32 --lr 2e-3 --warmup-steps 2 --eval-batches 0 --strategy static "
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
  c.strategy = "dynamic", c.backend = "ane", c.seq_len = 32;
  try {
    train::make_engine(c, train::ParamLayout(cfg));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no Apple Neural Engine on this host"), std::string::npos) << e.what();
  }
  const auto dir = test::temp_dir("kane").string();
  const std::string data = test::write_tokens(dir, 2000, 512, 1);
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab train --preset stories260k --data " + data +
                          " --run-dir " + dir + "/r --steps 2 --seq-len 32 --strategy static --backend ane > " + dir +
                          "/out.txt 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string out = read_file_text(dir + "/out.txt");
  EXPECT_EQ(out.rfind("anelab: error: [", 0), 0u) << out;
  EXPECT_NE(out.find("no Apple Neural Engine on this host"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab
