// Unit tests of the trainer's pieces: schedule, loss scaler, clipping, data windows, config parsing,
// checkpoint round trip + corrupt/truncated checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/data.h"
#include "train/events.h"
#include "train/optim.h"
#include "train/params.h"

namespace anelab::train {
namespace {

TEST(TrainUnits, WarmupCosineSchedule) {
  ScheduleConfig s{1e-3, 0.1, 10, 110, true};
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 9), 1e-3);
  EXPECT_NEAR(learning_rate(s, 60), 0.55e-3, 1e-12);  // halfway: (max + min) / 2
  EXPECT_NEAR(learning_rate(s, 110), 1e-4, 1e-12);
  s.cosine = false;
  EXPECT_DOUBLE_EQ(learning_rate(s, 100), 1e-3);
}

TEST(TrainUnits, DynamicLossScaleHalvesSkipsAndGrows) {
  LossScaler s = LossScaler::parse("dynamic:1024:2");
  EXPECT_TRUE(s.dynamic);
  EXPECT_TRUE(s.after_backward(false));
  EXPECT_EQ(s.scale, 512);
  EXPECT_FALSE(s.after_backward(true));
  EXPECT_FALSE(s.after_backward(true));
  EXPECT_EQ(s.scale, 1024);
  LossScaler st = LossScaler::parse("static:256");
  EXPECT_TRUE(st.after_backward(false));  // skipped, scale kept
  EXPECT_EQ(st.scale, 256);
  EXPECT_THROW(LossScaler::parse("static:-1"), Error);
  EXPECT_THROW(LossScaler::parse("banana"), Error);
}

TEST(TrainUnits, GlobalNormDetectsNonFiniteAndClipMatchesTorch) {
  std::vector<float> g = {3, 4};
  bool finite = false;
  EXPECT_DOUBLE_EQ(global_norm(g.data(), 2, &finite), 5.0);
  EXPECT_TRUE(finite);
  EXPECT_FLOAT_EQ(clip_factor(5.0, 1.0), float(1.0 / (5.0 + 1e-6)));
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_factor(5.0, 0.0), 1.0f);
  g[1] = INFINITY;
  global_norm(g.data(), 2, &finite);
  EXPECT_FALSE(finite);
}

TEST(TrainUnits, SequentialAndRandomWindows) {
  std::vector<int32_t> t(1000);
  for (int i = 0; i < 1000; ++i) t[size_t(i)] = i % 500;
  TokenData d(t, 0.1, 16);
  EXPECT_EQ(d.n_train(), 900);
  Batcher seq(d, 2, 16, false, 0);
  Batch b = seq.next();
  EXPECT_EQ(b.tokens[0], 0);
  EXPECT_EQ(b.tokens[17], 16);  // second row starts T tokens later
  Batcher r1(d, 4, 16, true, 3), r2(d, 4, 16, true, 3);
  for (int i = 0; i < 50; ++i) {
    Batch a = r1.next();
    EXPECT_EQ(a.tokens, r2.next().tokens);
    for (int64_t row = 0; row < 4; ++row)  // windows are contiguous and inside the train split
      EXPECT_EQ(a.tokens[size_t(row * 17 + 16)], (a.tokens[size_t(row * 17)] + 16) % 500);
  }
  const uint64_t s = r1.state();
  Batch x = r1.next();
  r2.set_state(s);
  EXPECT_EQ(r2.next().tokens, x.tokens);
  Batch v;
  EXPECT_TRUE(seq.val_batch(0, &v));
  EXPECT_EQ(v.tokens[0], 900 % 500);
  EXPECT_FALSE(seq.val_batch(100, &v));
  EXPECT_THROW(TokenData(std::vector<int32_t>(10, 1), 0.05, 16), Error);
}

TEST(TrainUnits, FlatTokenFileRejectsOddSize) {
  const auto dir = test::temp_dir("tok_odd");
  write_file_atomic((dir / "t.bin").string(), "abc");
  EXPECT_THROW(TokenData((dir / "t.bin").string(), 0.05, 4), Error);
}

TEST(TrainUnits, TomlConfigAndValidation) {
  const auto dir = test::temp_dir("toml");
  const std::string p = (dir / "x.toml").string();
  write_file_atomic(p, "# comment\npreset = \"stories260k\"\ndata = \"d.bin\"\nsteps = 7\nlr = 1e-3\n");
  TrainConfig c;
  apply_toml_file(c, p);
  EXPECT_EQ(c.steps, 7);
  EXPECT_DOUBLE_EQ(c.lr, 1e-3);
  resolve_names(c);
  EXPECT_EQ(c.run, "x");
  EXPECT_NO_THROW(validate(c));
  TrainConfig r;
  apply_json(r, to_json(c));
  r.config = c.config;  // informational, not restored
  EXPECT_EQ(to_json(r), to_json(c));
  write_file_atomic(p, "stepz = 3\n");
  EXPECT_THROW(apply_toml_file(c, p), Error);
  write_file_atomic(p, "steps = \"many\"\n");
  EXPECT_THROW(apply_toml_file(c, p), Error);
  write_file_atomic(p, "steps = [1\n");
  EXPECT_THROW(apply_toml_file(c, p), Error);
  c.strategy = "gpu";
  EXPECT_THROW(validate(c), Error);
  // the saved TOML loads back to the same config (it holds paths absolute)
  c.strategy = "cpu";
  c.run_dir = std::filesystem::absolute(c.run_dir).lexically_normal().string();
  write_file_atomic(p, to_toml(c));
  TrainConfig back;
  apply_toml_file(back, p);
  back.config = c.config;
  EXPECT_EQ(to_json(back), to_json(c));
}

// Paths in a config are relative to the config file's directory (not the current one), "~/" to $HOME;
// they are made absolute so the saved config works from anywhere.
TEST(TrainUnits, ConfigPathsResolveAgainstTheConfigFile) {
  namespace fs = std::filesystem;
  const auto dir = test::temp_dir("tomlpaths");
  fs::create_directories(dir / "exp");
  const std::string p = (dir / "exp" / "x.toml").string();
  write_file_atomic(p,
                    "init = \"../models/m.bin\"\ndata = \"tok.bin\"\ntokenizer = \"~/t/tok512.bin\"\n"
                    "run_dir = \"/abs/run\"\nschedule = \"cosine\"\n");
  const fs::path cwd = fs::current_path();
  fs::current_path(fs::temp_directory_path());  // anywhere but the config's directory
  TrainConfig c;
  apply_toml_file(c, p);
  fs::current_path(cwd);
  EXPECT_EQ(c.init, (dir / "models" / "m.bin").lexically_normal().string());
  EXPECT_EQ(c.data, (dir / "exp" / "tok.bin").lexically_normal().string());
  const char* home = std::getenv("HOME");
  if (home) {
    EXPECT_EQ(c.tokenizer, (fs::path(home) / "t" / "tok512.bin").lexically_normal().string());
  }
  EXPECT_EQ(c.run_dir, "/abs/run");
  EXPECT_EQ(c.schedule, "cosine");  // not a path
  fs::remove_all(dir);
}

TEST(TrainUnits, ConsoleLineHasElapsedAndEtaAndReportAddsUpTrainTime) {
  const nlohmann::json step = {{"event", "step"}, {"step", 10},        {"loss", 2.0},
                               {"ms", 5.0},       {"elapsed_s", 65.2}, {"eta_s", 3725.0}};
  const std::string line = console_line(step, 100);
  EXPECT_NE(line.find("elapsed 1m05s"), std::string::npos) << line;
  EXPECT_NE(line.find("eta 1h02m"), std::string::npos) << line;
  EXPECT_NE(console_line({{"event", "step"}, {"step", 1}, {"elapsed_s", 42.4}, {"eta_s", 0.2}}, 2)
                .find("elapsed 42s  eta 0s"),
            std::string::npos);
  // An extended run: 300 steps in all, 100 of them in this process at 10 ms; 2.5 s of train time over
  // all processes. The report's train time is the cumulative one, not this process's mean x all steps.
  const nlohmann::json end = {{"steps", 300},
                              {"wall_s", 10.0},
                              {"compile_s", 1.0},
                              {"train_s", 2.5},
                              {"train_ms_per_step", 10.0},
                              {"steps_this_process", 100},
                              {"final_loss", 1.0}};
  const std::string rep = efficiency_report(end);
  EXPECT_NE(rep.find("Train time:    2.5 s (25.0%)"), std::string::npos) << rep;
}

CheckpointState small_state() {
  CheckpointState s;
  s.model = models::preset("stories260k");
  const size_t P = size_t(models::parameter_count(s.model));
  s.weights.resize(P), s.m.resize(P), s.v.resize(P);
  for (size_t i = 0; i < P; ++i) s.weights[i] = float(i) * 1e-3f, s.m[i] = -float(i), s.v[i] = 0.5f;
  s.step = 5, s.adam_t = 4, s.data_state = 0xfedcba9876543210ull, s.best_val_loss = 1.5;
  s.config = {{"steps", 10}};
  return s;
}

TEST(TrainUnits, CheckpointRoundTrip) {
  const auto dir = test::temp_dir("ckpt");
  const std::string p = (dir / "a.ckpt").string();
  const CheckpointState s = small_state();
  write_checkpoint(p, s);
  const CheckpointState r = read_checkpoint(p);
  EXPECT_EQ(r.weights, s.weights);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
  EXPECT_EQ(r.step, 5);
  EXPECT_EQ(r.data_state, s.data_state);
  EXPECT_EQ(*r.best_val_loss, 1.5);
  EXPECT_TRUE(r.model == s.model);
}

// Qwen3's per-head norms are parameters like any other: in the layout (no weight decay), the checkpoint's tensor
// table and the round trip.
TEST(TrainUnits, Qwen3HeadNormsAreParametersAndCheckpointed) {
  models::ModelConfig c = models::preset("qwen3-0.6b");
  c.dim = 32, c.hidden_dim = 48, c.n_layers = 2, c.vocab_size = 64, c.head_dim = 8;
  const ParamLayout layout(c);
  const ParamInfo& qn = layout.find("layers.1.q_norm");
  EXPECT_EQ(qn.shape, std::vector<int64_t>{8});
  EXPECT_FALSE(qn.decay);
  std::vector<float> base(size_t(layout.total()));
  EXPECT_EQ(layout.layer(base.data(), 1).q_norm, base.data() + qn.offset);
  EXPECT_EQ(layout.layer(base.data(), 1).k_norm, base.data() + layout.find("layers.1.k_norm").offset);
  EXPECT_EQ(ParamLayout(models::preset("stories260k")).layer(base.data(), 0).q_norm, nullptr);
  CheckpointState s = small_state();
  s.model = c;
  const size_t P = size_t(layout.total());
  s.weights.resize(P), s.m.resize(P), s.v.resize(P);
  for (size_t i = 0; i < P; ++i) s.weights[i] = float(i) * 1e-3f, s.m[i] = -float(i), s.v[i] = 0.5f;
  const std::string p = (test::temp_dir("ckpt_qwen3") / "a.ckpt").string();
  write_checkpoint(p, s);
  const CheckpointState r = read_checkpoint(p);
  EXPECT_TRUE(r.model == c);
  EXPECT_EQ(r.weights, s.weights);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
}

// Refusals are one line: GPT-2 for training at all naming every missing part; for the kernel strategies the
// first step of the description the training kernels lack, naming the layer, the step and the executor.
TEST(TrainUnits, RefusalsAreOneLineNamingWhatIsMissing) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NO_THROW(check_trainable(models::preset("qwen3-0.6b")));
  EXPECT_NO_THROW(check_trainable(models::preset("gemma3-270m")));
  EXPECT_NO_THROW(check_kernel_steps(models::describe_model(models::preset("qwen3-0.6b")), "dynamic"));
  const std::string g =
      message([] { check_kernel_steps(models::describe_model(models::preset("gemma3-270m")), "static"); });
  EXPECT_EQ(g.find('\n'), std::string::npos) << g;
  EXPECT_EQ(g.rfind("[train] layer 0 attention: a (1+w) RMSNorm (layers.0.attn_norm) is not supported by the MIL "
                    "training kernels (--strategy static; --strategy cpu has it)",
                    0),
            0u)
      << g;
  const std::string p = message([] { check_trainable(models::preset("gpt2-124m")); });
  EXPECT_EQ(p.find('\n'), std::string::npos) << p;
  for (const char* part :
       {"[train] model 'gpt2': ", "LayerNorm", "a GELU MLP", "bias tensors", "learned positions", "inference-only"})
    EXPECT_NE(p.find(part), std::string::npos) << part << " in: " << p;
  // Qwen3.5 trains on the CPU (tests/train/test_qwen35_train.cpp); the kernel strategies refuse its first linear layer.
  EXPECT_NO_THROW(check_trainable(models::preset("qwen3.5-0.8b")));
  const std::string q =
      message([] { check_kernel_steps(models::describe_model(models::preset("qwen3.5-0.8b")), "dynamic"); });
  EXPECT_EQ(q,
            "[train] layer 0 linear attention: a Gated DeltaNet mixer is not supported by the MIL training kernels "
            "(--strategy dynamic; --strategy cpu has it)");
}

// The kernel strategies walk the description: a step or parameter they lack, put into a Qwen3 description
// they otherwise train, is refused in one line naming the layer, the step and the executor.
TEST(TrainUnits, KernelStrategiesRefuseAnEditedDescriptionNamingLayerStepAndExecutor) {
  const models::ModelDesc base = models::describe_model(models::preset("qwen3-0.6b"));
  ASSERT_GE(base.layers.size(), 3u);
  ASSERT_EQ(base.layers[2].steps.size(), 2u);
  ASSERT_EQ(base.layers[2].steps[0].kind, models::StepKind::kAttention);
  ASSERT_EQ(base.layers[2].steps[1].kind, models::StepKind::kFfn);
  auto refusal = [](const models::ModelDesc& d) -> std::string {
    try {
      check_kernel_steps(d, "dynamic");
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  const std::string ex = " is not supported by the MIL training kernels (--strategy dynamic; --strategy cpu has it)";
  models::ModelDesc d = base;
  d.layers[2].steps[0].attn.score_softcap = 50.0f;
  EXPECT_EQ(refusal(d), "[train] layer 2 attention: score soft-capping" + ex);
  d = base;
  d.layers[2].steps[0].attn.window = 512;
  EXPECT_EQ(refusal(d), "[train] layer 2 attention: a sliding window (512 keys)" + ex);
  d = base;
  d.layers[2].steps[1].post_norm = d.layers[2].steps[1].pre_norm;
  d.layers[2].steps[1].post_norm->weight = "layers.2.ffn_post_norm";
  EXPECT_EQ(refusal(d), "[train] layer 2 ffn: the norm layers.2.ffn_post_norm (only input and q/k norms)" + ex);
  d = base;  // a norm the kernels lack, wherever the description puts it, is refused by the same rule
  d.layers[2].steps[0].attn.k_norm.reset();
  d.layers[2].steps[0].post_norm = d.layers[2].steps[0].attn.q_norm;
  EXPECT_EQ(refusal(d), "[train] layer 2 attention: the norm layers.2.q_norm (only input and q/k norms)" + ex);
  d = base;
  d.layers[2].steps[1].ffn.activation = models::Activation::kGeluTanhGated;
  EXPECT_EQ(refusal(d), "[train] layer 2 ffn: an MLP other than SwiGLU" + ex);
  d = base;
  d.head.softcap = 30.0f;
  EXPECT_EQ(refusal(d), "[train] logit soft-capping" + ex);
}

TEST(TrainUnits, CorruptAndTruncatedCheckpointsAreRejected) {
  const auto dir = test::temp_dir("ckpt_bad");
  const std::string p = (dir / "a.ckpt").string();
  write_checkpoint(p, small_state());
  const auto good = read_file_bytes(p);
  auto expect_bad = [&](std::vector<uint8_t> bytes, const char* what) {
    const std::string q = (dir / "b.ckpt").string();
    write_file_atomic(q, bytes.data(), bytes.size());
    EXPECT_THROW(read_checkpoint(q), Error) << what;
  };
  expect_bad({good.begin(), good.begin() + good.size() / 2}, "truncated data");
  expect_bad({good.begin(), good.begin() + 20}, "truncated header");
  auto b = good;
  b[0] = 'X';
  expect_bad(b, "magic");
  b = good;
  b[8] = 9;
  expect_bad(b, "version");
  b = good;
  b.back() ^= 1;
  expect_bad(b, "checksum");
  b = good;
  b[16] = 0xff, b[17] = 0xff, b[18] = 0xff;
  expect_bad(b, "header_len");
  b = good;
  const std::string hs(b.begin() + 24, b.begin() + 24 + b[16] + 256 * b[17]);
  const size_t at = hs.find("\"step\"");
  if (at != std::string::npos) b[24 + at + 1] = 'x';  // "xtep": missing field
  expect_bad(b, "missing field");
  expect_bad({}, "empty");
}

}  // namespace
}  // namespace anelab::train
