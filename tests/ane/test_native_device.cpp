// Issue 17 on the fake: the ane backend picks the chip's device profile from aneSubType (item 5) and
// takes each procedure's request indices from the loaded model's ANEFModelProcedures attributes
// instead of inferring them (item 7).
#include "tests/ane/ane_test_util.h"

namespace anelab::test {
namespace {

Native make_auto(ane::FakeShimOptions fo, const std::string& device = "auto") {
  auto shim = std::make_unique<ane::FakeShim>(fo);
  Native n;
  n.fake = shim.get();
  rt::BackendOptions o;
  o.device = device;
  o.threads = 1;
  n.backend = std::make_unique<ane::NativeBackend>(std::move(shim), o);
  return n;
}

TEST(NativeDevice, AutoPicksTheProfileOfTheChipFamily) {
  const std::vector<std::pair<std::string, std::string>> chips = {
      {"h13", "m1"}, {"h14", "m2"}, {"h15", "m3"}, {"h16", "m4"}, {"h17", "m5"}, {"H13G", "m1"}, {"H16G", "m4"}};
  for (const auto& [sub, profile] : chips) {
    ane::FakeShimOptions fo;
    fo.sub_type = sub;
    fo.device = profile;
    Native n = make_auto(fo);
    EXPECT_EQ(n.backend->profile().name, profile) << sub;
    EXPECT_TRUE(contains(n.backend->device_choice().note, sub)) << n.backend->device_choice().note;
    EXPECT_TRUE(contains(n.backend->device_choice().note, "device profile " + profile))
        << n.backend->device_choice().note;
    // M1-M3 get the verbose program(1.0)/ios16 dialect without --device
    Prog p = conv_prog(64, 64, 64);
    ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok()) << sub;
    const auto made = n.fake->calls_named("create_model");
    ASSERT_EQ(made.size(), 1u);
    EXPECT_EQ(made[0]->mil_text.rfind(profile <= "m3" ? "program(1.0)" : "program(1.3)", 0), 0u) << sub;
  }
}

TEST(NativeDevice, TheFakeReportsALowercaseFamilyLikeARealChip) {
  EXPECT_EQ(ane::FakeShimOptions{}.sub_type, "h16");
  Native n = make_auto({});
  EXPECT_EQ(n.backend->profile().name, "m4");
  EXPECT_TRUE(contains(n.backend->device_choice().note, "chip family h16: device profile m4"))
      << n.backend->device_choice().note;
}

TEST(NativeDevice, UnknownOrUnreadableChipFallsBackToM4AndSaysSo) {
  ane::FakeShimOptions fo;
  fo.sub_type = "H99X";
  Native n = make_auto(fo);
  EXPECT_EQ(n.backend->profile().name, "m4");
  EXPECT_TRUE(contains(n.backend->device_choice().note, "unknown chip family aneSubType 'H99X'"))
      << n.backend->device_choice().note;
  ane::FakeShimOptions fo2;
  auto shim = std::make_unique<ane::FakeShim>(fo2);
  shim->fail("ane_sub_type", {});
  rt::BackendOptions o;
  o.device = "auto";
  ane::NativeBackend be(std::move(shim), o);
  EXPECT_EQ(be.profile().name, "m4");
  EXPECT_TRUE(contains(be.device_choice().note, "cannot read the chip family")) << be.device_choice().note;
}

TEST(NativeDevice, AnExplicitDeviceIsKeptAndTheChipIsNotAsked) {
  ane::FakeShimOptions fo;
  fo.sub_type = "H13G";
  fo.device = "m3";
  Native n = make_auto(fo, "m3");
  EXPECT_EQ(n.backend->profile().name, "m3");
  EXPECT_TRUE(n.backend->device_choice().note.empty());
  EXPECT_TRUE(n.fake->calls_named("ane_sub_type").empty());
}

// f0 reads input "b", f1 input "a": suffixed b_0 / a_1. A compiler that numbers symbols by name puts
// a_1 first, so procedure 0's input is symbol 1 — inferring "Σ inputs before it" gives 0 (error 0x2).
Prog renamed_two_function_prog() {
  mil::ProgramBuilder pb;
  auto& f0 = pb.function("f0");
  f0.output(f0.mul(f0.input("b", kern::act_type(64, 64)), 2.0));
  auto& f1 = pb.function("f1");
  f1.output(f1.sigmoid(f1.input("a", kern::act_type(64, 64))));
  return {pb.build(), {}};
}

TEST(NativeProcedures, RequestIndicesComeFromTheModelAttributes) {
  ane::FakeShimOptions fo;
  fo.symbol_order = "by_name";
  Native n = make_native("m4", -1, fo);
  Prog p = renamed_two_function_prog();
  auto emu = make_emulator();
  for (int fn : {0, 1}) {
    n.fake->clear_calls();
    EXPECT_EQ(run_bytes(*n.backend, p, fn, 3), run_bytes(*emu, p, fn, 3)) << "procedure " << fn;
    auto req = n.fake->calls_named("create_request");
    ASSERT_EQ(req.size(), 1u);
    EXPECT_EQ(req[0]->procedure, fn);
    EXPECT_EQ(req[0]->input_indices, std::vector<int64_t>{fn == 0 ? 1 : 0}) << "procedure " << fn;
  }
  // read once, right after load, also when the load is of the daemon's cached program (no compile)
  n.backend->clear_cache();
  n.fake->clear_calls();
  ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok());
  EXPECT_EQ(n.fake->call_names(), (std::vector<std::string>{"create_model", "hex_string_identifier",
                                                            "compiled_model_exists", "load", "procedure_symbols"}));
}

TEST(NativeProcedures, MissingAttributesFailAMultiProcedureProgramClearly) {
  ane::FakeShimOptions fo;
  fo.has_procedure_attributes = false;
  Native n = make_native("m4", -1, fo);
  // one procedure: the indices are @0..@n-1 either way
  Prog one = conv_prog(64, 64, 64);
  auto emu = make_emulator();
  EXPECT_EQ(run_bytes(*n.backend, one, 0, 1), run_bytes(*emu, one, 0, 1));
  // several: no guessing
  n.fake->clear_calls();
  Prog two = renamed_two_function_prog();
  auto k = n.backend->compile(two.program, two.weights);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  auto ins = (*k)->make_inputs(1, n.backend->profile());
  auto outs = (*k)->make_outputs(1, n.backend->profile());
  Status s = n.backend->evaluate(**k, 1, ptrs(ins), ptrs(outs));
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_TRUE(contains(s.message(), "ANEFModelProcedures")) << s.message();
  EXPECT_TRUE(n.fake->calls_named("create_request").empty());
}

TEST(NativeProcedures, IndicesMustFitTheFunction) {
  Prog p = two_function_prog(64, 64);
  std::vector<ane::ProcedureSymbols> table = {{0, {0}, {0}}, {1, {1, 2}, {1}}};
  auto r = ane::procedure_indices(p.program, 1, table);
  EXPECT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status().message(), "has 2 input")) << r.status().message();
  table[1].inputs = {5};
  table[1].procedure_id = 7;
  EXPECT_FALSE(ane::procedure_indices(p.program, 1, table).is_ok());
  table[1].procedure_id = 1;
  auto ok = ane::procedure_indices(p.program, 1, table);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->inputs, std::vector<int64_t>{5});
}

}  // namespace
}  // namespace anelab::test
