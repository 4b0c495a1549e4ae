// Real model shapes: every kernel of both strategies for stories110M (llama2.c) and the Qwen3-0.6B shape
// of the MDX dynamic pipeline builds, passes the M4 device-profile checks (max dim 65536, conv Cin,
// S >= 32, no SDPA mask) and, for the dynamic strategy, compiles on the emulator. Shapes/compile only.
#include <cstdio>

#include "framework/backends/registry.h"
#include "framework/kernels/self_check.h"
#include "framework/runtime/device_profile.h"
#include "framework/runtime/weights.h"
#include "tests/kernels/train_fixture.h"

namespace anelab::test {
namespace {

kern::TrainShape stories110m() {
  kern::TrainShape s;
  s.dim = 768, s.hidden = 2048, s.n_heads = 12, s.n_kv_heads = 12, s.head_dim = 64, s.seq = 256;
  return s;
}
kern::TrainShape qwen3_06b() {
  kern::TrainShape s;
  s.dim = 1024, s.hidden = 3072, s.n_heads = 16, s.n_kv_heads = 8, s.head_dim = 128, s.seq = 256;
  return s;
}

void shape_case(const kern::TrainShape& s, const char* label) {
  LayerData L;  // random fp16 weights of the right sizes (no reference needed)
  L.shape = s;
  const int64_t D = s.dim, QD = s.q_dim(), KVD = s.kv_dim(), H = s.hidden;
  L.wq = rand_f16(QD * D, 0.05, 1), L.wk = rand_f16(KVD * D, 0.05, 2), L.wv = rand_f16(KVD * D, 0.05, 3);
  L.wo = rand_f16(D * QD, 0.05, 4), L.w1 = rand_f16(H * D, 0.05, 5), L.w3 = rand_f16(H * D, 0.05, 6);
  L.w2 = rand_f16(D * H, 0.05, 7), L.rms_att = F32(D, 1.0f), L.rms_ffn = F32(D, 1.0f);
  const auto& prof = rt::device_profile("m4");
  auto be = rt::create_backend("emulator");
  for (kern::Strategy st : {kern::Strategy::kStatic, kern::Strategy::kDynamic}) {
    kern::LayerWeights w = L.weights();
    kern::LayerKernels lk = kern::build_layer_kernels(s, st, &w);
    for (kern::KernelKind k : kern::kAllKernelKinds) {
      const kern::KernelSpec& ks = lk.get(k);
      Status chk = rt::check_program(ks.program, prof);
      EXPECT_TRUE(chk.is_ok()) << label << " " << kern::strategy_name(st) << " " << ks.name << ": " << chk.message();
      EXPECT_TRUE(rt::check_weights(ks.program, ks.weights).is_ok()) << ks.name;
      EXPECT_LE(ks.in.spatial(), prof.max_dim) << ks.name;
      EXPECT_LE(ks.in.channels(), prof.max_dim) << ks.name;
      EXPECT_EQ(ks.out.spatial(), s.seq) << ks.name;
      EXPECT_EQ(ks.weight_slots.empty(), st == kern::Strategy::kStatic || !kern::kernel_has_weights(k)) << ks.name;
      std::printf("[shapes] %-10s %-7s %-12s in [%6lld, %6lld]  out [%6lld, %4lld]  blobs %zu\n", label,
                  kern::strategy_name(st), ks.name.c_str(), (long long)ks.in.channels(), (long long)ks.in.spatial(),
                  (long long)ks.out.channels(), (long long)ks.out.spatial(), ks.weights.size());
      if (st == kern::Strategy::kDynamic) {
        auto r = be->compile(ks.program, ks.weights);
        EXPECT_TRUE(r.is_ok()) << ks.name << ": " << r.status().message();
      }
    }
  }
}

// Issue 40 item 4: what the silent-zeros self-check costs before the first Stories110M step (attn_fwd's I/O
// types; the emulator stands in for the device, so both halves are emulator compiles and evaluations, as over
// the fake shim). Printed for docs/native_backend.md, next to a Stories110M step on the emulator.
TEST(KernelShapes, SelfCheckOfStories110mAttnFwd) {
  const kern::TrainShape s = stories110m();
  LayerData L;
  L.shape = s;
  const int64_t D = s.dim, QD = s.q_dim(), KVD = s.kv_dim(), H = s.hidden;
  L.wq = rand_f16(QD * D, 0.05, 1), L.wk = rand_f16(KVD * D, 0.05, 2), L.wv = rand_f16(KVD * D, 0.05, 3);
  L.wo = rand_f16(D * QD, 0.05, 4), L.w1 = rand_f16(H * D, 0.05, 5), L.w3 = rand_f16(H * D, 0.05, 6);
  L.w2 = rand_f16(D * H, 0.05, 7), L.rms_att = F32(D, 1.0f), L.rms_ffn = F32(D, 1.0f);
  const kern::LayerWeights w = L.weights();
  auto be = rt::create_backend("emulator");
  for (kern::Strategy st : {kern::Strategy::kStatic, kern::Strategy::kDynamic}) {
    const kern::KernelSpec ks = kern::build_kernel(kern::KernelKind::kAttnFwd, s, st, &w);
    const kern::SelfCheck c = kern::run_self_check(*be, ks.name, ks.in.type(), ks.out.type());
    EXPECT_TRUE(c.ok()) << c.line();
    EXPECT_EQ(c.max_rel_diff, 0.0) << c.line();
    std::printf("[self-check] stories110m %-7s %s: %.1f ms\n", kern::strategy_name(st), c.line().c_str(), c.ms);
  }
}

TEST(KernelShapes, Stories110mBuildsAndPassesDeviceChecks) { shape_case(stories110m(), "stories110m"); }
TEST(KernelShapes, Qwen3ShapeBuildsAndPassesDeviceChecks) { shape_case(qwen3_06b(), "qwen3-0.6b"); }

}  // namespace
}  // namespace anelab::test
