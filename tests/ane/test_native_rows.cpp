// Issue 40 item 2: the training kernels through the native backend over a FakeShim whose device starts
// I/O rows every 64 bytes, 128 bytes (what M5 reports, maderix/ANE PR #35) or packs them densely ("none"):
// every output equals the emulator's, byte for byte, because every generated I/O row is a multiple of
// 128 bytes and so dense at each of these strides.
#include "framework/kernels/workloads.h"
#include "tests/ane/ane_test_util.h"

namespace anelab::test {
namespace {

constexpr size_t kRowAligns[] = {64, 128, 1};  // 1: rows packed back to back ("none")

kern::TrainShape small_shape() {
  kern::TrainShape s;
  s.dim = 64, s.hidden = 192, s.n_heads = 2, s.n_kv_heads = 1, s.head_dim = 32, s.seq = 64;
  return s;
}

TEST(NativeRows, TrainingKernelsEqualTheEmulatorAtEveryFakeRowAlignment) {
  const kern::TrainShape s = small_shape();
  const kern::RandomLayer layer(s, 3);
  auto emu = make_emulator();
  for (kern::Strategy st : {kern::Strategy::kStatic, kern::Strategy::kDynamic}) {
    kern::LayerKernels lk = kern::build_layer_kernels(s, st, &layer.w);
    for (kern::KernelKind k : kern::kAllKernelKinds) {
      const kern::KernelSpec& ks = lk.get(k);
      const Prog p{ks.program, ks.weights};
      const auto want = run_bytes(*emu, p, 0, 17);
      ASSERT_FALSE(want.empty()) << ks.name;
      for (size_t align : kRowAligns) {
        ane::FakeShimOptions fo;
        fo.row_align_bytes = align;
        Native n = make_native("m4", -1, fo);
        EXPECT_EQ(run_bytes(*n.backend, p, 0, 17), want)
            << kern::strategy_name(st) << " " << ks.name << " at fake rows of " << align << " bytes";
      }
    }
  }
}

// A 32-column (64-byte) fp16 row is refused when the program is compiled (the profile's row-stride rule),
// before a device with 128-byte rows could read it at the wrong stride.
TEST(NativeRows, ThirtyTwoColumnRowsAreRejectedByTheProfile) {
  Native n = make_native();
  Prog p = conv_prog(64, 64, 32);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_FALSE(k.is_ok());
  EXPECT_TRUE(contains(k.status().message(), "row-stride rule")) << k.status().message();
}

}  // namespace
}  // namespace anelab::test
