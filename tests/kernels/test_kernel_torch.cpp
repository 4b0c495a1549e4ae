// The training kernels against PyTorch autograd (scripts/kernel_reference.py, run by the ctest fixture
// kernels_torch_reference into ${build}/kernels_ref before this test): the float64 reference of the
// test suite must agree with torch to float64/fp32-file precision, and the whole layer through
// LayerRunner (both strategies) within the same fp16 limits as against the float64 reference.
#include <filesystem>
#include <fstream>

#include "framework/backends/registry.h"
#include "framework/core/npy.h"
#include "tests/kernels/train_fixture.h"

namespace anelab::test {
namespace {

namespace fs = std::filesystem;
const fs::path kRefDir = fs::path(ANELAB_BINARY_DIR) / "kernels_ref";

struct TorchCase {
  LayerData L;
  std::map<std::string, F64> t;  // torch arrays by name (float64 written, decoded through fp32)
};

F32 load32(const fs::path& p) { return read_npy(p.string()).data; }

// Loads OUT/<name>/ written by the script; skips the calling test when the script was skipped or not run.
bool load_case(const std::string& name, TorchCase& c, std::string* why) {
  if (fs::exists(kRefDir / "SKIPPED")) {
    std::ifstream f(kRefDir / "SKIPPED");
    std::getline(f, *why);
    return false;
  }
  const fs::path d = kRefDir / name;
  if (!fs::exists(d / "shape.txt")) {
    *why = "no " + (d / "shape.txt").string() +
           ": run `ctest -L kernels` (fixture kernels_torch_reference) or "
           "/usr/bin/python3 scripts/kernel_reference.py --out " +
           kRefDir.string();
    return false;
  }
  std::ifstream sf(d / "shape.txt");
  kern::TrainShape s;
  std::string style;
  sf >> s.dim >> s.hidden >> s.n_heads >> s.n_kv_heads >> s.head_dim >> s.seq >> style;
  s.rope = style == "adjacent" ? kern::RopeStyle::kAdjacentPairs : kern::RopeStyle::kRotateHalf;
  LayerData& L = c.L;
  L.shape = s;
  L.wq = load32(d / "wq.npy"), L.wk = load32(d / "wk.npy"), L.wv = load32(d / "wv.npy"), L.wo = load32(d / "wo.npy");
  L.w1 = load32(d / "w1.npy"), L.w2 = load32(d / "w2.npy"), L.w3 = load32(d / "w3.npy");
  L.rms_att = load32(d / "rms_att.npy"), L.rms_ffn = load32(d / "rms_ffn.npy");
  L.x = load32(d / "x.npy"), L.dy = load32(d / "dy.npy");
  L.ref = {to64(L.wq), to64(L.wk), to64(L.wv),      to64(L.wo),     to64(L.w1),
           to64(L.w2), to64(L.w3), to64(L.rms_att), to64(L.rms_ffn)};
  L.fwd = ref_forward(s, L.ref, to64(L.x));
  L.grads = ref_backward(s, L.ref, L.fwd, to64(L.dy));
  for (const char* n : {"out", "dx", "attn", "dx2", "dq", "dk", "dv", "dwq", "dwk", "dwv", "dwo", "dw1", "dw2", "dw3",
                        "drms_att", "drms_ffn"})
    c.t[n] = to64(load32(d / (std::string(n) + ".npy")));
  return true;
}

class TorchReference : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchReference, Float64ReferenceMatchesAutograd) {
  TorchCase c;
  std::string why;
  if (!load_case(GetParam(), c, &why)) GTEST_SKIP() << why;
  const RefGrads& g = c.L.grads;
  // torch float64 values stored as fp32: relative 2^-24 per element -> NMSE <= 1e-14; 1e-11 leaves room
  // for float64 summation-order differences only. A wrong mapping/sign gives O(1).
  const std::vector<std::pair<std::string, const F64*>> pairs = {{"out", &c.L.fwd.out},
                                                                 {"attn", &c.L.fwd.attn},
                                                                 {"dx", &g.dx},
                                                                 {"dx2", &g.dx2},
                                                                 {"dq", &g.dq},
                                                                 {"dk", &g.dk},
                                                                 {"dv", &g.dv},
                                                                 {"dwq", &g.dw.wq},
                                                                 {"dwk", &g.dw.wk},
                                                                 {"dwv", &g.dw.wv},
                                                                 {"dwo", &g.dw.wo},
                                                                 {"dw1", &g.dw.w1},
                                                                 {"dw2", &g.dw.w2},
                                                                 {"dw3", &g.dw.w3},
                                                                 {"drms_att", &g.dw.rms_att},
                                                                 {"drms_ffn", &g.dw.rms_ffn}};
  for (const auto& [n, v] : pairs) {
    const double e = nmse(*v, c.t[n]);
    record("f64 ref vs torch " + n, e);
    EXPECT_LT(e, 1e-11) << n;
  }
}

TEST_P(TorchReference, KernelsMatchAutogradBothStrategies) {
  TorchCase c;
  std::string why;
  if (!load_case(GetParam(), c, &why)) GTEST_SKIP() << why;
  auto be = rt::create_backend("emulator");
  for (kern::Strategy st : {kern::Strategy::kStatic, kern::Strategy::kDynamic}) {
    kern::KernelCache cache(*be, c.L.shape, st);
    kern::LayerRunner r(cache);
    r.set_weights(c.L.weights());
    ChainResult k = run_chain(r, c.L);
    // same limits as the float64-reference chain test (test_train_kernels.cpp)
    const std::vector<std::tuple<std::string, const F32*, double>> checks = {
        {"out", &k.out, 48}, {"attn", &k.attn, 48}, {"dx2", &k.dx2, 24}, {"dv", &k.dv, 48},   {"dq", &k.dq, 80},
        {"dk", &k.dk, 80},   {"dx", &k.dx, 48},     {"dwq", &k.dwq, 80}, {"dwk", &k.dwk, 80}, {"dwv", &k.dwv, 48},
        {"dwo", &k.dwo, 48}, {"dw1", &k.dw1, 64},   {"dw2", &k.dw2, 48}, {"dw3", &k.dw3, 64}};
    for (const auto& [n, v, kk] : checks) {
      ASSERT_TRUE(all_finite(*v)) << n;
      const double e = nmse(*v, c.t[n]);
      record(std::string("torch ") + kern::strategy_name(st) + " " + n, e);
      EXPECT_LT(e, fp16_nmse(kk)) << n << " " << kern::strategy_name(st);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TorchReference, ::testing::Values("gqa", "mha_rotate_half"));

}  // namespace
}  // namespace anelab::test
