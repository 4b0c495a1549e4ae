// The native backend around compile failures and restarts, through FakeShim (the native-path audit):
// the budget leaves a margin below the compiler's limit; one compile counter per process; static kernels
// of old weights are freed (unloaded first) before their replacements compile; weights/ always exists;
// a program still loaded when a process exec-restarts loads in the next process without a compile.
#include <cstdlib>
#include <filesystem>

#include "framework/ane/ane_backend.h"
#include "framework/backends/registry.h"
#include "framework/kernels/runner.h"
#include "framework/runtime/device_profile.h"
#include "tests/ane/ane_test_util.h"
#include "tests/common/test_data.h"

namespace anelab::test {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for the scope (restores the old value).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

size_t index_of(const std::vector<std::string>& v, const std::string& name, size_t from = 0) {
  for (size_t i = from; i < v.size(); ++i)
    if (v[i] == name) return i;
  return v.size();
}

// ---- item 1: the budget ----------------------------------------------------------------------------------
TEST(NativeRestartBudget, DefaultBudgetStopsBeforeTheCompilersLimit) {
  for (const std::string& dev : rt::device_profile_names())
    EXPECT_EQ(rt::device_profile(dev).compile_budget, 100) << dev;  // maderix MAX_COMPILES
  Native n = make_native();  // fake compile_limit: 119, where the real compiler starts failing
  ASSERT_LT(n.backend->compile_budget(), n.fake->options().compile_limit);
  for (uint32_t i = 0; i < 100; ++i) {
    Prog p = conv_prog(32, 32, 64, 1000 + i);
    ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok()) << i;
  }
  Prog p = conv_prog(32, 32, 64, 5000);
  auto k = n.backend->compile(p.program, p.weights);
  EXPECT_EQ(k.status().code(), Code::kBudgetExhausted) << k.status().message();
  EXPECT_EQ(n.fake->compiles(), 100);  // the 101st never reached the compiler
}

// A compiler failure while the trainer's kernels compile is an rt::CompileError (the trainer restarts on it),
// whatever the compile's number; a program the profile rejects is a plain Error (no restart would help).
TEST(NativeRestartBudget, KernelCacheThrowsCompileErrorForAnyCompilerFailure) {
  kern::TrainShape s;
  s.dim = 64, s.hidden = 128, s.n_heads = 2, s.n_kv_heads = 2, s.head_dim = 32, s.seq = 64;
  Native n = make_native();
  n.fake->fail("compile", {});  // the first compile of the process fails (far below the budget)
  kern::KernelCache cache(*n.backend, s, kern::Strategy::kStatic);
  try {
    cache.shared(kern::KernelKind::kSdpaBwd2);
    FAIL() << "no exception";
  } catch (const rt::CompileError& e) {
    EXPECT_EQ(e.code, Code::kCompileFailed);
    EXPECT_TRUE(contains(e.what(), "ANECCompile() FAILED")) << e.what();
  }
  EXPECT_NO_THROW(cache.shared(kern::KernelKind::kSdpaBwd2));  // a transient failure: the next try works
}

// The fake shim lives in tests/support: the framework's "ane" backend uses it only once a program installs it.
TEST(NativeRestartCounter, AneShimFakeWithoutAnInstalledFakeIsRefused) {
  const auto dir = temp_dir("ane_install");
  ScopedEnv shim("ANELAB_ANE_SHIM", "fake"), fake_dir("ANELAB_FAKE_ANE_DIR", dir.string());
  ane::install_fake_shim(nullptr);
  try {
    rt::create_backend("ane", rt::BackendOptions{});
    ADD_FAILURE() << "created an ane backend without a fake shim";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("[backend] ane: ANELAB_ANE_SHIM=fake, but this program has no fake shim installed"),
        std::string::npos)
        << e.what();
  }
  ane::install_fake_shim(&ane::fake_shim_for_backend);
  EXPECT_NE(rt::create_backend("ane", rt::BackendOptions{}), nullptr);
}

// ---- item 2: one counter per process ---------------------------------------------------------------------
TEST(NativeRestartCounter, AneBackendsOfOneProcessShareOneBudget) {
  const auto dir = temp_dir("ane_counter");
  ScopedEnv shim("ANELAB_ANE_SHIM", "fake"), fake_dir("ANELAB_FAKE_ANE_DIR", dir.string());
  ane::install_fake_shim(&ane::fake_shim_for_backend);
  rt::BackendOptions o;
  o.threads = 1;
  auto a = rt::create_backend("ane", o);
  auto b = rt::create_backend("ane", o);
  const int before = a->compiles_used();  // this test binary's process may have compiled already
  ASSERT_EQ(b->compiles_used(), before);
  Prog p = conv_prog(32, 32, 64, 1), q = conv_prog(32, 32, 64, 2);
  ASSERT_TRUE(a->compile(p.program, p.weights).is_ok());
  ASSERT_TRUE(b->compile(q.program, q.weights).is_ok());
  EXPECT_EQ(a->compiles_used(), before + 2);
  EXPECT_EQ(b->compiles_used(), before + 2);
  EXPECT_EQ(b->compiles_left(), b->compile_budget() - before - 2);
  // A backend whose budget the other one spent: kBudgetExhausted before any compiler call.
  rt::BackendOptions tight = o;
  tight.compile_budget = before + 2;
  auto c = rt::create_backend("ane", tight);
  Prog r = conv_prog(32, 32, 64, 3);
  EXPECT_EQ(c->compile(r.program, r.weights).status().code(), Code::kBudgetExhausted);
  a.reset(), b.reset(), c.reset();
  fs::remove_all(dir);
}

TEST(NativeRestartCounter, SimulatedProcessesCountApart) {
  auto shared = std::make_shared<rt::CompileCounter>();
  ane::FakeShimOptions fo;
  auto make = [&](std::shared_ptr<rt::CompileCounter> counter) {
    rt::BackendOptions o;
    o.compile_budget = 1, o.threads = 1, o.compile_counter = std::move(counter);
    return std::make_unique<ane::NativeBackend>(std::make_unique<ane::FakeShim>(fo), o);
  };
  auto a = make(shared), b = make(shared), alone = make(nullptr);
  Prog p = conv_prog(32, 32, 64, 1), q = conv_prog(32, 32, 64, 2);
  ASSERT_TRUE(a->compile(p.program, p.weights).is_ok());
  EXPECT_EQ(b->compile(q.program, q.weights).status().code(), Code::kBudgetExhausted);
  EXPECT_TRUE(alone->compile(q.program, q.weights).is_ok());
}

// ---- item 6: static kernels and memory -------------------------------------------------------------------
TEST(NativeRestartTeardown, LastUserUnloadsBeforeReleasingRequestAndSurfaces) {
  ane::NativeOptions no;
  no.cache_capacity = 0;  // the kernel is the model's only holder
  Native n = make_native("m4", -1, {}, no);
  Prog p = conv_prog(64, 64, 64);
  {
    auto k = n.backend->compile(p.program, p.weights);
    ASSERT_TRUE(k.is_ok()) << k.status().message();
    auto ins = (*k)->make_inputs(0, n.backend->profile());
    auto outs = (*k)->make_outputs(0, n.backend->profile());
    ASSERT_TRUE(n.backend->evaluate(**k, 0, ptrs(ins), ptrs(outs)).is_ok());
    n.fake->clear_calls();
  }
  // maderix stories_io.h free_kern: unloadWithQoS:, then CFRelease of the surfaces, then the rest.
  EXPECT_EQ(n.fake->call_names(), (std::vector<std::string>{"unload", "release_request", "release_surface",
                                                            "release_surface", "release_model"}));
  EXPECT_EQ(n.fake->live_models(), 0u);
}

TEST(NativeRestartTeardown, DiscardDropsTheProgramFromTheCacheAndUnloadsFirst) {
  Native n = make_native();  // cache on (64)
  Prog p = conv_prog(64, 64, 64);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k.is_ok());
  auto ins = (*k)->make_inputs(0, n.backend->profile());
  auto outs = (*k)->make_outputs(0, n.backend->profile());
  ASSERT_TRUE(n.backend->evaluate(**k, 0, ptrs(ins), ptrs(outs)).is_ok());
  ASSERT_EQ(n.backend->cached_programs(), 1u);
  n.fake->clear_calls();
  n.backend->discard(std::move(*k));
  EXPECT_EQ(n.backend->cached_programs(), 0u);
  EXPECT_EQ(n.fake->loaded_models(), 0u);
  EXPECT_EQ(n.fake->call_names(), (std::vector<std::string>{"unload", "release_request", "release_surface",
                                                            "release_surface", "release_model"}));
}

// Static strategy: after set_weights() with new weights, no kernel of the old weights is loaded (nor cached),
// and every old one was unloaded before the first compile of the new ones (maderix frees, then compiles).
TEST(NativeRestartTeardown, StaticSetWeightsFreesOldWeightKernelsBeforeCompiling) {
  kern::TrainShape s;
  s.dim = 64, s.hidden = 128, s.n_heads = 2, s.n_kv_heads = 2, s.head_dim = 32, s.seq = 64;
  const size_t D = 64, H = 128;
  std::vector<std::vector<float>> a, b;
  for (size_t n : {D * D, D * D, D * D, D * D, H * D, H * D, D * H, D, D}) {
    a.push_back(randn(n, uint32_t(n) + 1, 0.05f));
    b.push_back(randn(n, uint32_t(n) + 2, 0.05f));
  }
  auto lw = [&s](const std::vector<std::vector<float>>& v) {
    return kern::train_weights(s, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
  };
  Native n = make_native();
  kern::KernelCache cache(*n.backend, s, kern::Strategy::kStatic);
  kern::LayerRunner r(cache);
  r.set_weights(lw(a));
  const size_t per_layer = n.fake->loaded_models();
  ASSERT_GE(per_layer, 5u);
  n.fake->clear_calls();
  r.set_weights(lw(b));
  EXPECT_EQ(n.fake->loaded_models(), per_layer);  // not 2 · per_layer: the old ones are not kept in the LRU
  const auto names = n.fake->call_names();
  const size_t first_compile = index_of(names, "compile");
  ASSERT_LT(first_compile, names.size());
  size_t unloads = 0;
  for (size_t i = 0; i < first_compile; ++i) unloads += names[i] == "unload";
  EXPECT_EQ(unloads, per_layer) << "every old-weight kernel unloads before the first new compile";
}

TEST(NativeRestartModelDir, WeightsDirectoryExistsAlsoWithoutWeights) {
  Native n = make_native();
  Prog p = two_input_prog(64, 128, 64);  // no weights
  ASSERT_TRUE(p.weights.empty());
  ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok());
  const auto compiles = n.fake->calls_named("compile");
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_TRUE(compiles[0]->weights_dir);  // maderix ane_runtime.h creates weights/ unconditionally
}

// ---- item 10: compiled programs across exec-restarts -----------------------------------------------------
// "Process" 1 still has the program loaded (as at an exec: no destructor runs); "process" 2, a fresh shim on
// the same temp dir, finds the compiler's output (compiledModelExists) and loads it without compiling.
TEST(NativeRestartCompiledCache, NextProcessLoadsTheCompiledProgramWithoutCompiling) {
  const auto dir = temp_dir("ane_reuse");
  ane::FakeShimOptions fo;
  fo.temp_dir = dir.string();
  Native first = make_native("m4", -1, fo);
  Prog p = conv_prog(64, 64, 64, 7);
  auto k1 = first.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k1.is_ok());
  EXPECT_EQ(first.fake->compiles(), 1);

  Native second = make_native("m4", 0, fo);  // a budget of 0: any compile would fail
  auto k2 = second.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k2.is_ok()) << k2.status().message();
  EXPECT_EQ(second.fake->call_names(),
            (std::vector<std::string>{"create_model", "hex_string_identifier", "compiled_model_exists", "load",
                                      "procedure_symbols"}));
  EXPECT_EQ(second.fake->compiles(), 0);
  EXPECT_EQ(second.backend->compiles_used(), 0);
  EXPECT_EQ(second.backend->compiled_reuses(), 1);
  // it computes what the emulator computes
  auto emu = make_emulator();
  auto want = run_bytes(*emu, p, 0, 3);
  auto ins = (*k2)->make_inputs(0, second.backend->profile());
  auto outs = (*k2)->make_outputs(0, second.backend->profile());
  fill_inputs(ins, 3);
  ASSERT_TRUE(second.backend->evaluate(**k2, 0, ptrs(ins), ptrs(outs)).is_ok());
  EXPECT_EQ(0, std::memcmp(outs[0].data(), want[0].data(), want[0].size()));
  // a different program (other weights) is not found and needs the budget
  Prog q = conv_prog(64, 64, 64, 8);
  EXPECT_EQ(second.backend->compile(q.program, q.weights).status().code(), Code::kBudgetExhausted);
  k1 = Status(Code::kInternal, "released");
  k2 = Status(Code::kInternal, "released");
  first.backend.reset(), second.backend.reset();
  fs::remove_all(dir);
}

// The temp directory of a program unloaded in the normal way is removed: only the (fake) daemon's cache,
// which is not ours, is left.
TEST(NativeRestartCompiledCache, UnloadedProgramsLeaveNothingBehind) {
  const auto dir = temp_dir("ane_reuse_clean");
  ane::FakeShimOptions fo;
  fo.temp_dir = dir.string();
  {
    Native n = make_native("m4", -1, fo);
    Prog p = conv_prog(64, 64, 64, 7);
    ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok());
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{ane::FakeShim::kDaemonCacheDir});
  fs::remove_all(dir);
}

// Issue 40 item 3: the daemon's cache outlives the process. The second run of a program, after the first
// exited cleanly (its model directory removed), finds it (compiledModelExists), writes model.mil and the
// weights back, and loads it without a compile.
TEST(NativeRestartCompiledCache, SecondRunAfterACleanExitLoadsTheCachedProgram) {
  const auto dir = temp_dir("ane_reuse_second_run");
  ane::FakeShimOptions fo;
  fo.temp_dir = dir.string();
  Prog p = conv_prog(64, 64, 64, 7);
  {
    Native first = make_native("m4", -1, fo);
    ASSERT_TRUE(first.backend->compile(p.program, p.weights).is_ok());
    EXPECT_EQ(first.fake->compiles(), 1);
  }                                          // clean exit: unloaded, model directory removed
  Native second = make_native("m4", 0, fo);  // a budget of 0: any compile would fail
  auto k = second.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  EXPECT_EQ(second.fake->call_names(),
            (std::vector<std::string>{"create_model", "hex_string_identifier", "compiled_model_exists", "load",
                                      "procedure_symbols"}));
  EXPECT_EQ(second.fake->compiles(), 0);
  EXPECT_EQ(second.backend->compiled_reuses(), 1);
  auto emu = make_emulator();
  auto want = run_bytes(*emu, p, 0, 3);
  auto ins = (*k)->make_inputs(0, second.backend->profile());
  auto outs = (*k)->make_outputs(0, second.backend->profile());
  fill_inputs(ins, 3);
  ASSERT_TRUE(second.backend->evaluate(**k, 0, ptrs(ins), ptrs(outs)).is_ok());
  EXPECT_EQ(0, std::memcmp(outs[0].data(), want[0].data(), want[0].size()));
  k = Status(Code::kInternal, "released");
  second.backend.reset();
  fs::remove_all(dir);
}

TEST(NativeRestartCompiledCache, AFailingLoadOfTheCompiledProgramFallsBackToACompile) {
  const auto dir = temp_dir("ane_reuse_fallback");
  ane::FakeShimOptions fo;
  fo.temp_dir = dir.string();
  ane::NativeOptions no;
  no.load_retry_delay_ms = 1;
  Native first = make_native("m4", -1, fo, no);
  Prog p = conv_prog(64, 64, 64, 7);
  auto k1 = first.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k1.is_ok());
  Native second = make_native("m4", -1, fo, no);
  ane::FakeFailure f;
  f.times = 2;  // the load and its retry
  second.fake->fail("load", f);
  testing::internal::CaptureStderr();
  auto k2 = second.backend->compile(p.program, p.weights);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(k2.is_ok()) << k2.status().message();
  EXPECT_EQ(second.fake->compiles(), 1);
  EXPECT_EQ(second.backend->compiled_reuses(), 0);
  EXPECT_TRUE(contains(err, "compiling it again")) << err;
  k1 = Status(Code::kInternal, "released");
  k2 = Status(Code::kInternal, "released");
  first.backend.reset(), second.backend.reset();
  fs::remove_all(dir);
}

// ---- the fault-injection hook ------------------------------------------------------------------------------
TEST(FakeCompileFailures, ScheduledAndRandomSpecs) {
  const auto f = ane::parse_compile_failures("3,10");
  EXPECT_TRUE(f.fails(3));
  EXPECT_TRUE(f.fails(10));
  EXPECT_FALSE(f.fails(4));
  const auto r = ane::parse_compile_failures("random:0.25:7");
  int n = 0;
  for (int64_t i = 1; i <= 4000; ++i) n += r.fails(i);
  EXPECT_NEAR(n / 4000.0, 0.25, 0.03);  // binomial sd = sqrt(.25 · .75 / 4000) ≈ 0.0068: > 4 sd
  for (const char* bad : {"x", "0", "3,", "random:2:1", "random:0.1", "random:0.1:x"})
    EXPECT_THROW(ane::parse_compile_failures(bad), Error) << bad;
}

TEST(FakeCompileFailures, CountedOverTheRunThroughTheCountFile) {
  const auto dir = temp_dir("ane_fail_count");
  ane::FakeShimOptions fo;
  fo.temp_dir = dir.string();
  fo.compile_failures = ane::parse_compile_failures("2");
  fo.compile_failures.count_file = (dir / "count").string();
  {
    Native n = make_native("m4", -1, fo);
    Prog p = conv_prog(32, 32, 64, 1);
    EXPECT_TRUE(n.backend->compile(p.program, p.weights).is_ok());  // compile 1 of the run
  }
  Native n = make_native("m4", -1, fo);  // the next "process"
  Prog q = conv_prog(32, 32, 64, 2);
  auto k = n.backend->compile(q.program, q.weights);  // compile 2 of the run
  EXPECT_EQ(k.status().code(), Code::kCompileFailed) << k.status().message();
  EXPECT_TRUE(contains(k.status().message(), "injected at compile 2 of the run")) << k.status().message();
  EXPECT_TRUE(n.backend->compile(q.program, q.weights).is_ok());  // compile 3
  n.backend.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anelab::test
