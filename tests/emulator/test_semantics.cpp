// Emulator semantics beyond single-op accuracy: fp16 overflow, rounding to the declared dtype,
// bit-identical results across runs and thread counts, allocation-free evaluate, weight errors.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "framework/emulator/emulator.h"
#include "tests/emulator/op_harness.h"

// evaluate() allocates nothing: tests/common/counting_new.h counts operator new (the emulator allocates through it).
#include "tests/common/counting_new.h"

namespace anelab::test {
namespace {

using mil::DType;

TEST(EmulatorSemantics, Fp16OverflowGivesInf) {
  ProgramUnderTest p;
  Vec x(64 * 32, 40000.0);
  x[1] = -40000.0;
  auto X = p.input("x", {1, 64, 1, 32}, x);
  p.b->output(p.b->mul(X, 2.0));  // 80000 > 65504
  auto r = run_on("emulator", p);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_TRUE(std::isinf(r.out[0][0]) && r.out[0][0] > 0);
  EXPECT_TRUE(std::isinf(r.out[0][1]) && r.out[0][1] < 0);
}

TEST(EmulatorSemantics, AddRoundsToDeclaredFp16) {
  // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: round-to-nearest-even gives 1.
  // 1 + 3*2^-11 is halfway between 1+2^-10 and 1+2^-9: rounds to the even 1 + 2^-9.
  ProgramUnderTest p;
  Vec x(64 * 32, 1.0), y(64 * 32, std::ldexp(1.0, -11));
  y[1] = 3 * std::ldexp(1.0, -11);
  auto X = p.input("x", {1, 64, 1, 32}, x);
  auto Y = p.weight({1, 64, 1, 32}, y);
  p.b->output(p.b->add(X, Y));
  auto r = run_on("emulator", p);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0][0], 1.0);
  EXPECT_EQ(r.out[0][1], 1.0 + std::ldexp(1.0, -9));
}

// A conv + attention-like program large enough to use several GEMM tiles, several k blocks (K = 640)
// and threads.
ProgramUnderTest block_program() {
  ProgramUnderTest p;
  auto x = p.input("x", {1, 640, 1, 64}, rand_vec(640 * 64, -1, 1, 31));
  auto w = p.weight({512, 640, 1, 1}, rand_vec(512 * 640, -0.1, 0.1, 32));
  auto& b = *p.b;
  auto h = b.conv(x, w);  // [1, 512, 1, 64]
  auto q = b.transpose(b.reshape(h, {1, 8, 64, 64}), {0, 1, 3, 2});
  auto s = b.softmax(b.matmul(q, q, false, true), -1);  // [1, 8, 64, 64]
  b.output(b.named("y").reshape(b.matmul(s, q), {1, 512, 1, 64}));
  return p;
}

TEST(EmulatorSemantics, BitIdenticalAcrossRunsAndThreads) {
  ProgramUnderTest p1 = block_program(), p2 = block_program();
  auto a = run_on("emulator", p1, 1, 3);
  auto b = run_on("emulator", p2, 2, 3);
  ASSERT_EQ(a.raw.size(), 1u);
  ASSERT_EQ(b.raw.size(), 1u);
  EXPECT_TRUE(a.raw[0] == b.raw[0]) << "1-thread and 2-thread results differ";
}

// evaluate() after a warm-up makes no C++ heap allocation (counted by the operator new above).
TEST(EmulatorSemantics, EvaluateAllocatesNothing) {
  ProgramUnderTest p = block_program();
  auto be = emu::make_emulator_backend({});
  auto k = be->compile(p.pb.build(), p.weights());
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  auto ins = (*k)->make_inputs(0, be->profile());
  auto outs = (*k)->make_outputs(0, be->profile());
  std::vector<rt::Surface*> ip{&ins[0]}, op{&outs[0]};
  ASSERT_TRUE(be->evaluate(**k, 0, ip, op).is_ok());  // warm-up: thread pool
  anelab::test::g_allocations = 0;
  anelab::test::g_counting = true;
  for (int i = 0; i < 3; ++i) (void)be->evaluate(**k, 0, ip, op);
  anelab::test::g_counting = false;
  EXPECT_EQ(anelab::test::g_allocations.load(), 0) << "evaluate() allocated";
}

TEST(EmulatorSemantics, MissingWeightNamesPathAndKnownKeys) {
  ProgramUnderTest p;
  auto x = p.input("x", {1, 32, 1, 64}, Vec(2048, 1.0));
  auto w = p.b->const_blob(mil::tensor_type(DType::kFp16, {1, 32, 1, 64}), "@model_path/weights/missing.bin", 64);
  p.b->output(p.b->add(x, w));
  (void)p.weight({1}, {1.0});  // makes w.bin known
  auto be = emu::make_emulator_backend({});
  auto k = be->compile(p.pb.build(), p.weights());
  ASSERT_FALSE(k.is_ok());
  EXPECT_NE(k.status().message().find("@model_path/weights/missing.bin"), std::string::npos) << k.status().message();
  EXPECT_NE(k.status().message().find(kWeightsPath), std::string::npos) << k.status().message();
}

TEST(EmulatorSemantics, TruncatedBlobIsRejected) {
  ProgramUnderTest p;
  auto x = p.input("x", {1, 32, 1, 64}, Vec(2048, 1.0));
  p.b->output(p.b->add(x, p.weight({1, 32, 1, 64}, Vec(2048, 0.5))));
  rt::Weights w = p.weights();
  auto bytes = *w[kWeightsPath];
  bytes.resize(bytes.size() - 2);
  w[kWeightsPath] = std::make_shared<const std::vector<uint8_t>>(bytes);
  auto be = emu::make_emulator_backend({});
  auto k = be->compile(p.pb.build(), w);
  ASSERT_FALSE(k.is_ok());
  EXPECT_NE(k.status().message().find("[blob]"), std::string::npos) << k.status().message();
}

TEST(EmulatorSemantics, CompileBudgetIsEnforced) {
  ProgramUnderTest p;
  p.b->output(p.b->identity(p.input("x", {1, 32, 1, 64}, Vec(2048, 1.0))));
  rt::BackendOptions o;
  o.compile_budget = 1;
  auto be = emu::make_emulator_backend(o);
  EXPECT_TRUE(be->compile(p.pb.build(), p.weights()).is_ok());
  auto second = be->compile(p.pb.build(), p.weights());
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), Code::kBudgetExhausted);
}

}  // namespace
}  // namespace anelab::test
