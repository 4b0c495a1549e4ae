// Native backend failure paths through FakeShim: each private-API call failing surfaces as a clear
// Status naming the selector and carrying the NSError text; compile budget -> kBudgetExhausted; the
// compiled-program cache; load retry; cleanup without leaks; the registry on a host without an ANE.
#include <chrono>
#include <filesystem>

#include "framework/ane/ane_backend.h"
#include "framework/ane/native_rules.h"
#include "framework/backends/registry.h"
#include "tests/ane/ane_test_util.h"

namespace anelab::test {
namespace {

namespace fs = std::filesystem;

// ---- budget ---------------------------------------------------------------------------------------
TEST(NativeBudget, SpentBudgetIsBudgetExhaustedWithoutCallingTheCompiler) {
  Native n = make_native("m4", 3);
  for (uint32_t i = 0; i < 3; ++i) {
    Prog p = conv_prog(64, 64, 64, 100 + i);
    ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok()) << i;
  }
  Prog p = conv_prog(64, 64, 64, 200);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_FALSE(k.is_ok());
  EXPECT_EQ(k.status().code(), Code::kBudgetExhausted);
  EXPECT_TRUE(contains(k.status().message(), "restart")) << k.status().message();
  EXPECT_EQ(n.fake->compiles(), 3);
}

TEST(NativeBudget, CompilerFailureNearTheBudgetIsBudgetExhaustedWithTheNSErrorText) {
  ane::FakeShimOptions fo;
  fo.compile_limit = 8;  // the real limit came earlier than the budget of 10 assumed
  Native n = make_native("m4", 10, fo);
  for (uint32_t i = 0; i < 8; ++i) {
    Prog p = conv_prog(64, 64, 64, 300 + i);
    ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok()) << i;
  }
  Prog p = conv_prog(64, 64, 64, 400);
  auto k = n.backend->compile(p.program, p.weights);  // compile 9 >= ceil(0.9 * 10)
  ASSERT_FALSE(k.is_ok());
  EXPECT_EQ(k.status().code(), Code::kBudgetExhausted) << k.status().message();
  EXPECT_TRUE(contains(k.status().message(), "_ANECompiler : ANECCompile() FAILED")) << k.status().message();
  EXPECT_TRUE(contains(k.status().message(), "com.apple.appleneuralengine.compiler")) << k.status().message();
}

TEST(NativeBudget, EarlyCompilerFailureIsCompileFailed) {
  ane::FakeShimOptions fo;
  fo.compile_limit = 2;
  Native n = make_native("m4", 10, fo);
  for (uint32_t i = 0; i < 2; ++i) {
    Prog p = conv_prog(64, 64, 64, 500 + i);
    ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok());
  }
  Prog p = conv_prog(64, 64, 64, 600);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_FALSE(k.is_ok());
  EXPECT_EQ(k.status().code(), Code::kCompileFailed);
  EXPECT_TRUE(contains(k.status().message(), "ANECCompile() FAILED")) << k.status().message();
  EXPECT_TRUE(contains(k.status().message(), "compile 3 of 10")) << k.status().message();
}

TEST(NativeBudget, MapCompileFailureRule) {
  Status e = ane::shim_error(ane::sel::kCompile, "boom", "d", 1);
  // near = ceil(0.9 * 119) = ceil(107.1) = 108
  EXPECT_EQ(ane::map_compile_failure(e, 108, 119, 0.9, "p").code(), Code::kBudgetExhausted);
  EXPECT_EQ(ane::map_compile_failure(e, 119, 119, 0.9, "p").code(), Code::kBudgetExhausted);
  EXPECT_EQ(ane::map_compile_failure(e, 107, 119, 0.9, "p").code(), Code::kCompileFailed);
  EXPECT_EQ(ane::map_compile_failure(e, 1, 1, 0.9, "p").code(), Code::kBudgetExhausted);
}

// ---- cache ----------------------------------------------------------------------------------------
TEST(NativeCache, HitSharesTheLoadedModelWithoutBudgetOrCompiler) {
  Native n = make_native("m4", 1);
  Prog p = conv_prog(64, 64, 64);
  auto k1 = n.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k1.is_ok());
  n.fake->clear_calls();
  auto k2 = n.backend->compile(p.program, p.weights);  // budget of 1 already spent
  ASSERT_TRUE(k2.is_ok()) << k2.status().message();
  EXPECT_TRUE(n.fake->calls().empty());
  EXPECT_EQ(n.backend->compiles_used(), 1);
  EXPECT_EQ(n.backend->cache_hits(), 1);
  EXPECT_EQ(n.backend->cache_misses(), 1);
  // both kernels evaluate (own surfaces and requests, one model)
  auto emu = make_emulator();
  auto want = run_bytes(*emu, p, 0, 9);
  for (auto* k : {&*k1, &*k2}) {
    auto ins = (*k)->make_inputs(0, n.backend->profile());
    auto outs = (*k)->make_outputs(0, n.backend->profile());
    fill_inputs(ins, 9);
    ASSERT_TRUE(n.backend->evaluate(**k, 0, ptrs(ins), ptrs(outs)).is_ok());
    EXPECT_EQ(0, std::memcmp(outs[0].data(), want[0].data(), want[0].size()));
  }
  // different weights, same MIL: a miss
  Prog q = conv_prog(64, 64, 64, 2);
  auto k3 = n.backend->compile(q.program, q.weights);
  EXPECT_EQ(k3.status().code(), Code::kBudgetExhausted);
}

TEST(NativeCache, EvictedModelsUnloadWhenTheirLastKernelGoes) {
  ane::NativeOptions no;
  no.cache_capacity = 1;
  Native n = make_native("m4", -1, {}, no);
  Prog a = conv_prog(64, 64, 64, 1), b = conv_prog(64, 64, 64, 2);
  auto ka = n.backend->compile(a.program, a.weights);
  auto kb = n.backend->compile(b.program, b.weights);  // evicts a from the cache; ka still holds it
  EXPECT_EQ(n.fake->loaded_models(), 2u);
  ka.value().reset();
  EXPECT_EQ(n.fake->loaded_models(), 1u);
  EXPECT_EQ(n.backend->cached_programs(), 1u);
  auto kb2 = n.backend->compile(b.program, b.weights);
  EXPECT_EQ(n.backend->cache_hits(), 1);
}

// ---- each call failing ------------------------------------------------------------------------------
struct FailCase {
  const char* call;
  const char* selector;  // must appear in the message
  Code code;
  bool at_compile;  // fails in compile() (else in evaluate())
};

class NativeCallFailure : public ::testing::TestWithParam<FailCase> {};

TEST_P(NativeCallFailure, SurfacesAsAClearStatusAndLeaksNothing) {
  const FailCase fc = GetParam();
  ane::NativeOptions no;
  no.load_retry_delay_ms = 1;
  Native n = make_native("m4", -1, {}, no);
  ane::FakeFailure f;
  f.times = -1;
  f.description = "injected text 42";
  f.domain = "com.example.test";
  f.code = 77;
  n.fake->fail(fc.call, f);
  Prog p = conv_prog(64, 64, 64);
  Status st;
  std::string hex_dir;
  {
    auto k = n.backend->compile(p.program, p.weights);
    if (fc.at_compile) {
      ASSERT_FALSE(k.is_ok());
      st = k.status();
    } else {
      ASSERT_TRUE(k.is_ok()) << k.status().message();
      auto ins = (*k)->make_inputs(0, n.backend->profile());
      auto outs = (*k)->make_outputs(0, n.backend->profile());
      st = n.backend->evaluate(**k, 0, ptrs(ins), ptrs(outs));
      ASSERT_FALSE(st.is_ok());
    }
  }
  n.backend->clear_cache();
  const std::string& m = st.message();
  EXPECT_EQ(st.code(), fc.code) << m;
  EXPECT_EQ(m.rfind("[", 0), 0u) << m;  // "[ane] ..." / "[compile] ..."
  EXPECT_TRUE(contains(m, fc.selector)) << m;
  EXPECT_TRUE(contains(m, "injected text 42")) << m;
  EXPECT_TRUE(contains(m, "domain com.example.test, code 77")) << m;
  EXPECT_EQ(n.fake->live_models(), 0u) << m;
  EXPECT_EQ(n.fake->live_surfaces(), 0u) << m;
  EXPECT_EQ(n.fake->live_requests(), 0u) << m;
  for (const auto& e : fs::directory_iterator(n.fake->temporary_directory()))  // the fake daemon's cache is not ours
    EXPECT_EQ(e.path().filename().string(), ane::FakeShim::kDaemonCacheDir) << "temp dirs left behind";
}

INSTANTIATE_TEST_SUITE_P(EveryCall, NativeCallFailure,
                         ::testing::Values(FailCase{"create_model", ane::sel::kDescriptor, Code::kInternal, true},
                                           FailCase{"hex_string_identifier", ane::sel::kHexId, Code::kInternal, true},
                                           FailCase{"compile", ane::sel::kCompile, Code::kCompileFailed, true},
                                           FailCase{"load", ane::sel::kLoad, Code::kInternal, true},
                                           FailCase{"create_surface", ane::sel::kSurfaceCreate, Code::kIoError, false},
                                           FailCase{"create_request", ane::sel::kRequest, Code::kInternal, false},
                                           FailCase{"lock_surface", ane::sel::kSurfaceLock, Code::kIoError, false},
                                           FailCase{"unlock_surface", ane::sel::kSurfaceUnlock, Code::kIoError, false},
                                           FailCase{"evaluate", ane::sel::kEvaluate, Code::kInternal, false}),
                         [](const auto& info) { return std::string(info.param.call); });

TEST(NativeLoad, OneFailedLoadIsRetriedAfter100ms) {
  Native n = make_native();
  n.fake->fail("load", {});  // the first load fails once
  Prog p = conv_prog(64, 64, 64);
  const auto t0 = std::chrono::steady_clock::now();
  auto k = n.backend->compile(p.program, p.weights);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  EXPECT_GE(ms, 100.0);
  EXPECT_EQ(n.fake->call_names(),
            (std::vector<std::string>{"create_model", "hex_string_identifier", "compiled_model_exists", "compile",
                                      "load", "load", "procedure_symbols"}));
  EXPECT_FALSE(n.fake->calls()[4].ok);
  EXPECT_TRUE(n.fake->calls()[5].ok);
}

TEST(NativeLoad, TwoFailedLoadsNameBothFailures) {
  ane::NativeOptions no;
  no.load_retry_delay_ms = 1;
  Native n = make_native("m4", -1, {}, no);
  ane::FakeFailure f;
  f.times = 2;
  n.fake->fail("load", f);
  Prog p = conv_prog(64, 64, 64);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_FALSE(k.is_ok());
  EXPECT_TRUE(contains(k.status().message(), "failed twice")) << k.status().message();
  EXPECT_TRUE(contains(k.status().message(), "0x1d")) << k.status().message();
}

TEST(NativeUnload, FailedUnloadInADestructorDoesNotThrowOrLeak) {
  Native n = make_native();
  n.fake->fail("unload", {});
  Prog p = conv_prog(64, 64, 64);
  ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok());
  testing::internal::CaptureStderr();
  n.backend->clear_cache();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "unload")) << err;
  EXPECT_EQ(n.fake->live_models(), 0u);
}

// ---- checks before the shim ---------------------------------------------------------------------------
TEST(NativeChecks, SmallSurfacesAreRejectedBeforeAnyShimCall) {
  Native n = make_native();
  Prog p = conv_prog(64, 64, 64);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k.is_ok());
  n.fake->clear_calls();
  rt::Surface in((*k)->function(0).inputs[0].second), out(*(*k)->function(0).type_of((*k)->function(0).outputs[0]));
  rt::Surface* i[] = {&in};
  rt::Surface* o[] = {&out};
  Status s = n.backend->evaluate(**k, 0, i, o);
  EXPECT_EQ(s.code(), Code::kLimitExceeded) << s.message();
  EXPECT_TRUE(contains(s.message(), "49152")) << s.message();
  EXPECT_TRUE(n.fake->calls().empty());
}

TEST(NativeChecks, MissingWeightIsRejectedBeforeTheCompiler) {
  Native n = make_native();
  Prog p = conv_prog(64, 64, 64);
  p.weights.clear();
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_FALSE(k.is_ok());
  EXPECT_TRUE(contains(k.status().message(), "@model_path/weights/w.bin")) << k.status().message();
  EXPECT_TRUE(n.fake->calls().empty());
}

TEST(NativeRules, ModelRelativePaths) {
  EXPECT_EQ(ane::model_relative_path("@model_path/weights/w.bin").value(), "weights/w.bin");
  EXPECT_EQ(ane::model_relative_path("@model_path/weights/layer_00/wq.bin").value(), "weights/layer_00/wq.bin");
  for (const char* bad : {"weights/w.bin", "@model_path/", "@model_path//etc/passwd", "@model_path/../x.bin",
                          "@model_path/weights/./w.bin", "@model_path/weights//w.bin"}) {
    auto r = ane::model_relative_path(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(NativeRules, RequestIndicesAreProgramWideSymbolIndices) {
  mil::ProgramBuilder pb;  // f0: 2 inputs / 1 output, f1: 1 input / 2 outputs, f2: 1 / 1
  auto& f0 = pb.function("f0");
  auto a = f0.input("a", kern::act_type(64, 64));
  auto b = f0.input("b", kern::act_type(128, 64));
  f0.output(f0.concat({a, b}, 1));
  auto& f1 = pb.function("f1");
  auto c = f1.input("c", kern::act_type(64, 64));
  f1.output(f1.concat({c, c}, 1));
  f1.output(f1.sigmoid(c));
  auto& f2 = pb.function("f2");
  f2.output(f2.relu(f2.input("d", kern::act_type(64, 64))));
  mil::Program p = pb.build();
  auto r1 = ane::request_indices(p, 1), r2 = ane::request_indices(p, 2);
  EXPECT_EQ(r1.inputs, std::vector<int64_t>{2});
  EXPECT_EQ(r1.outputs, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r1.procedure, 1);
  EXPECT_EQ(r2.inputs, std::vector<int64_t>{3});
  EXPECT_EQ(r2.outputs, std::vector<int64_t>{3});
  EXPECT_THROW(ane::request_indices(p, 3), Error);
}

// ---- the fake itself checks what the real API needs -------------------------------------------------
TEST(FakeShimChecks, CompileWithoutTheTempDirFails) {
  ane::FakeShim fake;
  Prog p = conv_prog(64, 64, 64);
  const std::string text = mil::print(p.program);
  auto entries = ane::weight_entries(p.weights);
  auto m = fake.create_model(text, entries);
  ASSERT_TRUE(m.is_ok());
  Status s = fake.compile(*m, 21);
  EXPECT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s.message(), "model.mil")) << s.message();
  // with the directory written, but a weight file that differs: still fails
  const std::string dir = fake.temporary_directory() + "/" + fake.hex_string_identifier(*m).value();
  rt::Weights other = p.weights;
  other.begin()->second = blob_of(randn(64 * 64, 99));
  ASSERT_TRUE(ane::write_model_dir(dir, text, other).is_ok());
  s = fake.compile(*m, 21);
  EXPECT_TRUE(contains(s.message(), "weights/w.bin")) << s.message();
  ASSERT_TRUE(ane::write_model_dir(dir, text, p.weights).is_ok());
  EXPECT_TRUE(fake.compile(*m, 21).is_ok());
  fake.release_model(*m);
}

TEST(FakeShimChecks, WrongProcedureIndicesAndSmallSurfacesFailAtEvaluate) {
  ane::FakeShim fake;
  Prog p = two_function_prog(64, 64);
  const std::string text = mil::print(p.program);
  auto m = fake.create_model(text, ane::weight_entries(p.weights));
  ASSERT_TRUE(
      ane::write_model_dir(fake.temporary_directory() + "/" + fake.hex_string_identifier(*m).value(), text, p.weights)
          .is_ok());
  ASSERT_TRUE(fake.compile(*m, 21).is_ok());
  ASSERT_TRUE(fake.load(*m, 21).is_ok());
  auto s0 = fake.create_surface(49152).value(), s1 = fake.create_surface(49152).value();
  auto bad = fake.create_request({{s0}, {0}, {s1}, {0}, 1}).value();  // index 0 for procedure 1
  Status st = fake.evaluate(*m, bad, 21);
  EXPECT_TRUE(contains(st.message(), "0x2")) << st.message();
  auto good = fake.create_request({{s0}, {1}, {s1}, {1}, 1}).value();
  EXPECT_TRUE(fake.evaluate(*m, good, 21).is_ok());
  auto small = fake.create_surface(4096).value();
  auto r = fake.create_request({{small}, {0}, {s1}, {0}, 0}).value();
  st = fake.evaluate(*m, r, 21);
  EXPECT_TRUE(contains(st.message(), "returns zeros")) << st.message();
}

// ---- registry on this host ----------------------------------------------------------------------------
#if !defined(__APPLE__)
TEST(NativeRegistry, AneBackendIsUnavailableHereWithAClearMessage) {
  std::string why;
  EXPECT_FALSE(ane::ane_available(&why));
  EXPECT_TRUE(contains(why, "no Apple Neural Engine on this host")) << why;
  try {
    rt::create_backend("ane");
    FAIL() << "create_backend(\"ane\") succeeded on a host without an ANE";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "[backend] ane: no Apple Neural Engine on this host")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--backend emulator")) << e.what();
  }
}
#endif

}  // namespace
}  // namespace anelab::test
