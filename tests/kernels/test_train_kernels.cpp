// Training kernels (framework/kernels/train.h, runner.h) on the emulator against the float64 reference
// layer (ref_layer.h), for both weight strategies and a GQA and an MHA/rotate-half shape:
//   - the float64 reference gradients against central finite differences of the float64 forward;
//   - every kernel alone, fed the reference's own intermediates, against the reference outputs;
//   - the whole layer forward + backward through LayerRunner (CPU glue as the trainer does it);
//   - static and dynamic strategies against each other.
// Tolerances: NMSE limits in units of fp16_nmse(k) = k u²/3, u = 2^-11 (kern_util.h). k counts the
// chained fp16 roundings of a value plus the relative error the fp16-rounded inputs contribute; where a
// gradient involves cancellation (dS = P (dP - rowsum)) k is raised and the reason given.
#include <cmath>
#include <random>

#include "framework/backends/registry.h"
#include "tests/kernels/train_fixture.h"

namespace anelab::test {
namespace {

using kern::KernelKind;
using kern::Strategy;

// ---- float64 reference vs finite differences -----------------------------------------------------

double loss(const kern::TrainShape& s, const RefWeights& w, const F64& x, const F64& dy) {
  RefFwd f = ref_forward(s, w, x);
  double l = 0;
  for (size_t i = 0; i < dy.size(); ++i) l += dy[i] * f.out[i];
  return l;
}

double dot(const F64& a, const F64& b) {
  double r = 0;
  for (size_t i = 0; i < a.size(); ++i) r += a[i] * b[i];
  return r;
}

void fd_case(const kern::TrainShape& s) {
  LayerData L = make_layer(s, 100);
  const F64 dy = to64(L.dy);
  std::mt19937 gen(7);
  std::normal_distribution<double> nd;
  const double h = 1e-5;
  // Directional derivatives along 2 random directions per tensor: central differences are exact up to
  // O(h²) ~ 1e-10 relative, far below the 1e-6 limit; a wrong gradient term gives O(1) errors.
  auto check = [&](const std::string& what, F64& param, const F64& grad) {
    for (int rep = 0; rep < 2; ++rep) {
      F64 dir(param.size());
      for (auto& d : dir) d = nd(gen);
      const F64 saved = param;
      for (size_t i = 0; i < param.size(); ++i) param[i] = saved[i] + h * dir[i];
      const double lp = what == "x" ? loss(s, L.ref, param, dy) : loss(s, L.ref, to64(L.x), dy);
      for (size_t i = 0; i < param.size(); ++i) param[i] = saved[i] - h * dir[i];
      const double lm = what == "x" ? loss(s, L.ref, param, dy) : loss(s, L.ref, to64(L.x), dy);
      param = saved;
      const double fd = (lp - lm) / (2 * h), an = dot(grad, dir);
      EXPECT_NEAR(fd, an, 1e-6 * (std::abs(an) + 1e-3)) << what << " direction " << rep;
    }
  };
  F64 x = to64(L.x);
  check("x", x, L.grads.dx);
  for (const char* n : {"wq", "wk", "wv", "wo", "w1", "w2", "w3", "rms_att", "rms_ffn"})
    check(n, L.ref.get(n), L.grads.dw.get(n));
}

TEST(KernelReference, GradientsMatchFiniteDifferencesGqa) { fd_case(gqa_shape()); }
TEST(KernelReference, GradientsMatchFiniteDifferencesMhaRotateHalf) { fd_case(mha_shape()); }

// ---- kernels vs reference ------------------------------------------------------------------------

struct Param {
  const char* name;
  kern::TrainShape (*shape)();
  Strategy strategy;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

class TrainKernels : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    be_ = rt::create_backend("emulator");
    L_ = make_layer(GetParam().shape(), 100);
    cache_ = std::make_unique<kern::KernelCache>(*be_, L_.shape, GetParam().strategy);
    runner_ = std::make_unique<kern::LayerRunner>(*cache_);
    runner_->set_weights(L_.weights());
  }
  void expect_close(const std::string& what, const F32& got, const F64& want, double k) {
    ASSERT_TRUE(all_finite(got)) << what;
    const double e = nmse(got, want);
    record(std::string(kern::strategy_name(GetParam().strategy)) + " " + what, e);
    EXPECT_LT(e, fp16_nmse(k)) << what << " (" << GetParam().name << ")";
  }
  std::unique_ptr<rt::Backend> be_;
  LayerData L_;
  std::unique_ptr<kern::KernelCache> cache_;
  std::unique_ptr<kern::LayerRunner> runner_;
};

TEST_P(TrainKernels, AttnForwardTapsMatchReference) {
  kern::AttnTaps t;
  runner_->attn_forward(L_.x.data(), t);
  const RefFwd& f = L_.fwd;
  expect_close("attn_fwd xnorm", t.xnorm, f.xn1, 8);
  expect_close("attn_fwd q_rope", t.q_rope, f.q_rope, 16);  // xnorm (8) + conv + rope (tables, 3)
  expect_close("attn_fwd k_rope", t.k_rope, f.k_rope, 16);
  expect_close("attn_fwd v", t.v, f.v, 12);
  expect_close("attn_fwd attn", t.attn, f.attn, 48);  // scores ~|3|: exp amplifies score errors 3x
  expect_close("attn_fwd o", t.o, f.o, 48);
}

TEST_P(TrainKernels, FfnForwardTapsMatchReference) {
  kern::FfnTaps t;
  F32 x2 = f16(L_.fwd.x2);  // the kernel sees fp16 x2: one extra rounding (k + 1)
  runner_->ffn_forward(x2.data(), t);
  const RefFwd& f = L_.fwd;
  expect_close("ffn_fwd xnorm", t.xnorm, f.xn2, 9);
  expect_close("ffn_fwd h1", t.h1, f.h1, 12);
  expect_close("ffn_fwd h3", t.h3, f.h3, 12);
  expect_close("ffn_fwd gate", t.gate, f.gate, 20);
  expect_close("ffn_fwd y", t.y, f.y, 24);
}

TEST_P(TrainKernels, FfnBackwardMatchesReference) {
  kern::FfnTaps fwd;
  fwd.h1 = f16(L_.fwd.h1);
  fwd.h3 = f16(L_.fwd.h3);
  kern::FfnGrads g;
  runner_->ffn_backward(L_.dy.data(), fwd, g);
  expect_close("ffn_bwd dh1", g.dh1, L_.grads.dh1, 16);
  expect_close("ffn_bwd dh3", g.dh3, L_.grads.dh3, 12);
  expect_close("ffn_bwd dx", g.dx, L_.grads.dxn2, 20);
}

TEST_P(TrainKernels, RmsNormBackwardMatchesReference) {
  // dx of the norm alone: reference input dxn2 (fp16-rounded) and x2.
  F32 dyn = f16(L_.grads.dxn2), x2 = f16(L_.fwd.x2);
  F64 want = ref_rms_bwd(to64(dyn), to64(x2), L_.ref.rms_ffn, L_.shape.dim, L_.shape.seq, L_.shape.norm_eps, nullptr);
  F32 got;
  runner_->rms_backward(KernelKind::kRmsFfnBwd, dyn.data(), x2.data(), got);
  // r g - x r² mean(g x): the two terms nearly cancel for some positions (mean over 64 channels) -> k 24
  expect_close("rms_ffn_bwd dx", got, want, 24);
  F32 dxn1 = f16(L_.grads.dxn1);
  want = ref_rms_bwd(to64(dxn1), to64(L_.x), L_.ref.rms_att, L_.shape.dim, L_.shape.seq, L_.shape.norm_eps, nullptr);
  runner_->rms_backward(KernelKind::kRmsAttBwd, dxn1.data(), L_.x.data(), got);
  expect_close("rms_att_bwd dx", got, want, 24);
}

TEST_P(TrainKernels, WoBackwardMatchesReference) {
  F32 dx2 = f16(L_.grads.dx2), da;
  runner_->wo_backward(dx2.data(), da);
  expect_close("wo_bwd da", da, L_.grads.da, 4);
}

TEST_P(TrainKernels, SdpaBackwardMatchesReference) {
  kern::AttnTaps fwd;
  fwd.q_rope = f16(L_.fwd.q_rope);
  fwd.k_rope = f16(L_.fwd.k_rope);
  fwd.v = f16(L_.fwd.v);
  F32 da = f16(L_.grads.da);
  // part 1 alone
  F32 dv, probs, dp;
  runner_->run(KernelKind::kSdpaBwd1,
               {{"q_rope", fwd.q_rope.data()}, {"k_rope", fwd.k_rope.data()}, {"v", fwd.v.data()}, {"da", da.data()}},
               {{"dv", &dv}, {"probs", &probs}, {"dp", &dp}});
  expect_close("sdpa_bwd1 probs", probs, L_.fwd.probs, 48);
  // dP = dA Vᵀ is computed for every (i, j); only j <= i matters (P = 0 above the diagonal, where the
  // reference stores 0), so compare the causal part.
  const int64_t S = L_.shape.seq;
  for (size_t r = 0; r < dp.size() / S; ++r)
    for (int64_t j = static_cast<int64_t>(r % S) + 1; j < S; ++j) dp[r * S + j] = 0;
  expect_close("sdpa_bwd1 dp", dp, L_.grads.dp, 8);
  expect_close("sdpa_bwd1 dv", dv, L_.grads.dv, 48);
  // both parts (runner chain): dq / dk pre-RoPE and GQA-reduced. dS = P (dP - rowsum(P dP)) cancels:
  // rowsum is a P-weighted mean of dP, so dP - rowsum loses ~log2(|dP|/|dP - rowsum|) bits -> k 200.
  kern::SdpaGrads g;
  runner_->sdpa_backward(fwd, da.data(), g);
  expect_close("sdpa_bwd2 dq", g.dq, L_.grads.dq, 40);
  expect_close("sdpa_bwd2 dk", g.dk, L_.grads.dk, 40);
  expect_close("sdpa_bwd dv", g.dv, L_.grads.dv, 48);
}

TEST_P(TrainKernels, QkvBackwardMatchesReference) {
  kern::SdpaGrads g;
  g.dq = f16(L_.grads.dq);
  g.dk = f16(L_.grads.dk);
  g.dv = f16(L_.grads.dv);
  F32 dxn;
  runner_->qkv_backward(g, dxn);
  expect_close("qkv_bwd dx", dxn, L_.grads.dxn1, 8);
}

TEST_P(TrainKernels, WholeLayerForwardBackwardMatchesReference) {
  ChainResult c = run_chain(*runner_, L_);
  const RefGrads& g = L_.grads;
  // Errors compound along the chain (each stage sees the previous stage's fp16 outputs); the limits are
  // the per-kernel ones summed along the path, the attention-gradient cancellation dominating.
  expect_close("chain out", c.out, L_.fwd.out, 48);
  expect_close("chain dW2", c.dw2, g.dw.w2, 48);
  expect_close("chain dW1", c.dw1, g.dw.w1, 64);
  expect_close("chain dW3", c.dw3, g.dw.w3, 64);
  expect_close("chain dWo", c.dwo, g.dw.wo, 48);
  expect_close("chain dWv", c.dwv, g.dw.wv, 48);
  expect_close("chain dWq", c.dwq, g.dw.wq, 80);
  expect_close("chain dWk", c.dwk, g.dw.wk, 80);
  expect_close("chain dx", c.dx, g.dx, 48);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TrainKernels,
                         ::testing::Values(Param{"gqa_static", gqa_shape, Strategy::kStatic},
                                           Param{"gqa_dynamic", gqa_shape, Strategy::kDynamic},
                                           Param{"mha_rotate_half_static", mha_shape, Strategy::kStatic},
                                           Param{"mha_rotate_half_dynamic", mha_shape, Strategy::kDynamic}),
                         [](const auto& i) { return std::string(i.param.name); });

// Static and dynamic strategies run different MIL (conv on baked blobs vs matmul on staged bands) and
// must agree within fp16 noise for the same weights.
TEST(KernelStrategies, StaticAndDynamicAgree) {
  auto be = rt::create_backend("emulator");
  LayerData L = make_layer(gqa_shape(), 200);
  kern::KernelCache cs(*be, L.shape, Strategy::kStatic), cd(*be, L.shape, Strategy::kDynamic);
  kern::LayerRunner rs(cs), rd(cd);
  rs.set_weights(L.weights());
  rd.set_weights(L.weights());
  ChainResult a = run_chain(rs, L), b = run_chain(rd, L);
  // both sides carry fp16 error vs the exact value: the difference is bounded by the sum of the limits
  EXPECT_LT(nmse(a.out, b.out), fp16_nmse(96));
  EXPECT_LT(nmse(a.dx, b.dx), fp16_nmse(400));
  EXPECT_LT(nmse(a.dwq, b.dwq), fp16_nmse(800));
  EXPECT_LT(nmse(a.dw1, b.dw1), fp16_nmse(128));
  record("static vs dynamic dx", nmse(a.dx, b.dx));
  record("static vs dynamic dWq", nmse(a.dwq, b.dwq));
  // compile counts: static = 7 weight-bearing kernels per layer + 2 shared; dynamic = 9 shared, once
  EXPECT_EQ(cs.compiles(), 9);
  EXPECT_EQ(cd.compiles(), 9);
  rs.set_weights(L.weights());  // an update: static recompiles its 7, dynamic only restages
  rd.set_weights(L.weights());
  EXPECT_EQ(cs.compiles(), 16);
  EXPECT_EQ(cd.compiles(), 9);
}

TEST(KernelStrategies, DynamicRestagingMatchesFreshStaticBuild) {
  // After an update, the dynamic kernel (compiled once) must see the new weights.
  auto be = rt::create_backend("emulator");
  LayerData A = make_layer(gqa_shape(), 300), B = make_layer(gqa_shape(), 301);
  kern::KernelCache cd(*be, A.shape, Strategy::kDynamic);
  kern::LayerRunner rd(cd);
  rd.set_weights(A.weights());
  kern::AttnTaps t;
  rd.attn_forward(A.x.data(), t);
  rd.set_weights(B.weights());
  rd.attn_forward(A.x.data(), t);
  RefFwd fb = ref_forward(B.shape, B.ref, to64(A.x));
  EXPECT_LT(nmse(t.o, fb.o), fp16_nmse(48));
}

// An M1-M3 device takes program(1.0)/ios16 text only: the cache hands the backend each kernel in its device's
// dialect, the same ops, so the emulator with the m1 profile computes what it computes with m4, bit for bit.
TEST(KernelStrategies, M1ProfileRunsTheKernelsInItsDialect) {
  rt::BackendOptions m1;
  m1.device = "m1";
  auto be1 = rt::create_backend("emulator", m1), be4 = rt::create_backend("emulator");
  LayerData L = make_layer(gqa_shape(), 210);
  for (Strategy st : {Strategy::kStatic, Strategy::kDynamic}) {
    kern::KernelCache c1(*be1, L.shape, st), c4(*be4, L.shape, st);
    kern::LayerRunner r1(c1), r4(c4);
    r1.set_weights(L.weights());
    r4.set_weights(L.weights());
    ChainResult a = run_chain(r1, L), b = run_chain(r4, L);
    EXPECT_EQ(a.out, b.out) << kern::strategy_name(st);
    EXPECT_EQ(a.dx, b.dx) << kern::strategy_name(st);
    EXPECT_EQ(a.dwq, b.dwq) << kern::strategy_name(st);
    EXPECT_EQ(c1.compiles(), 9);
  }
}

TEST(KernelStrategies, MissingWeightsAndBadShapesAreReported) {
  auto be = rt::create_backend("emulator");
  kern::TrainShape s = gqa_shape();
  kern::KernelCache c(*be, s, Strategy::kStatic);
  kern::LayerRunner r(c);
  kern::AttnTaps t;
  F32 x(static_cast<size_t>(s.dim * s.seq));
  EXPECT_THROW(r.attn_forward(x.data(), t), Error);  // set_weights() first
  kern::LayerWeights w;
  EXPECT_THROW(r.set_weights(w), Error);  // empty spans
  s.seq = 16;
  EXPECT_THROW(kern::build_kernel(KernelKind::kSdpaBwd1, s, Strategy::kDynamic), Error);  // S < 32
  s.seq = 48;  // not a whole number of 64-byte device rows
  EXPECT_THROW(kern::build_kernel(KernelKind::kSdpaBwd1, s, Strategy::kDynamic), Error);
  s = gqa_shape();
  s.n_kv_heads = 3;
  EXPECT_THROW(kern::build_kernel(KernelKind::kSdpaBwd1, s, Strategy::kDynamic), Error);
}

}  // namespace
}  // namespace anelab::test
