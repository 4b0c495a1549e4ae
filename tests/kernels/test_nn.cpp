// Building blocks (framework/kernels/nn.h) on the emulator against independent float64 loops.
// Inputs are fp16-exact, so the only error is fp16 rounding inside the block; limits are NMSE with
// the number of chained roundings k stated per check (kern_util.h).
#include <cmath>

#include "framework/kernels/nn.h"
#include "framework/runtime/device_profile.h"
#include "tests/kernels/kern_util.h"

namespace anelab::test {
namespace {

using kern::RopeStyle;
using mil::DType;
using mil::Value;

struct OneFn {
  mil::ProgramBuilder pb;
  mil::FunctionBuilder& b = pb.function("main");
  kern::BlobSet blobs;
  std::vector<F32> inputs;
  Value in(const std::string& n, int64_t c, int64_t s, F32 v) {
    inputs.push_back(std::move(v));
    return b.input(n, kern::act_type(c, s));
  }
  std::vector<F32> run(const Value& out) {
    b.output(out);
    return eval_program(pb.build(), blobs.weights(), inputs);
  }
};

constexpr int64_t D = 64, S = 64;

TEST(KernelNn, RmsNormMatchesFloat64) {
  OneFn f;
  F32 x = rand_f16(D * S, 2.0, 1), w = rand_f16(D, 1.0, 2);
  auto y = f.run(kern::rms_norm(f.b, f.in("x", D, S, x), f.blobs.vector(f.b, "rms", w), 1e-5))[0];
  F64 want(x.size());
  for (int64_t t = 0; t < S; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[d * S + t]) * x[d * S + t];
    const double r = 1.0 / std::sqrt(ss / D + 1e-5);
    for (int64_t d = 0; d < D; ++d) want[d * S + t] = x[d * S + t] * r * w[d];
  }
  // ~7 chained roundings (square, sum, scale, +eps, pow, two muls)
  const double e = nmse(y, want);
  record("block rms_norm", e);
  EXPECT_LT(e, fp16_nmse(8));
}

TEST(KernelNn, LayerNormAndActivationsMatchFloat64) {
  OneFn f;
  F32 x = rand_f16(D * S, 3.0, 3), g = rand_f16(D, 1.0, 4), bt = rand_f16(D, 0.5, 5);
  Value xv = f.in("x", D, S, x);
  Value ln = kern::layer_norm(f.b, xv, f.blobs.vector(f.b, "g", g), f.blobs.vector(f.b, "b", bt), 1e-5);
  Value all = f.b.concat({ln, kern::silu(f.b, xv), kern::gelu_tanh(f.b, xv)}, 1);
  auto y = f.run(all)[0];
  F64 want(3 * x.size());
  for (int64_t t = 0; t < S; ++t) {
    double m = 0, v = 0;
    for (int64_t d = 0; d < D; ++d) m += x[d * S + t];
    m /= D;
    for (int64_t d = 0; d < D; ++d) v += (x[d * S + t] - m) * (x[d * S + t] - m);
    v /= D;
    for (int64_t d = 0; d < D; ++d) {
      const double xi = x[d * S + t];
      want[d * S + t] = (xi - m) / std::sqrt(v + 1e-5) * g[d] + bt[d];
      want[(D + d) * S + t] = xi / (1 + std::exp(-xi));
      want[(2 * D + d) * S + t] = 0.5 * xi * (1 + std::tanh(std::sqrt(2 / M_PI) * (xi + 0.044715 * xi * xi * xi)));
    }
  }
  for (int part = 0; part < 3; ++part) {
    F32 got(y.begin() + part * D * S, y.begin() + (part + 1) * D * S);
    F64 ref(want.begin() + part * D * S, want.begin() + (part + 1) * D * S);
    const double e = nmse(got, ref);
    record(std::string("block ") + (part == 0 ? "layer_norm" : part == 1 ? "silu" : "gelu_tanh"), e);
    EXPECT_LT(e, fp16_nmse(10)) << "part " << part;  // <= 10 chained roundings in each composition
  }
}

TEST(KernelNn, LinearConvAndRuntimeMatricesAgree) {
  const int64_t OC =
      128;  // != D (catches transposes), a multiple of 64 (the row-stride rule for the [1, D, 1, OC] input)
  OneFn f;
  F32 x = rand_f16(D * S, 1.0, 6), w = rand_f16(OC * D, 0.2, 7), bias = rand_f16(OC, 0.5, 8);
  F32 wt(w.size());  // W^T [D, OC]
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t i = 0; i < D; ++i) wt[i * OC + o] = w[o * D + i];
  Value xv = f.in("x", D, S, x);
  Value a = f.in("wt", D, OC, wt);  // runtime W^T as [1, D, 1, OC]
  Value m = f.in("w", OC, D, w);    // runtime W as [1, OC, 1, D]
  Value y1 = kern::linear(f.b, xv, f.blobs.matrix(f.b, "w", w, OC, D), f.blobs.vector(f.b, "bias", bias));
  Value y2 = kern::linear_runtime_t(f.b, xv, a);
  Value y3 = kern::linear_runtime(f.b, xv, m);
  auto y = f.run(f.b.concat({y1, y2, y3}, 1))[0];
  F64 want(OC * S);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t t = 0; t < S; ++t) {
      double acc = 0;
      for (int64_t i = 0; i < D; ++i) acc += double(w[o * D + i]) * x[i * S + t];
      want[o * S + t] = acc;
    }
  for (int part = 0; part < 3; ++part) {
    F64 ref = want;
    if (part == 0)
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t t = 0; t < S; ++t) ref[o * S + t] += bias[o];
    F32 got(y.begin() + part * OC * S, y.begin() + (part + 1) * OC * S);
    EXPECT_LT(nmse(got, ref), fp16_nmse(2)) << "part " << part;  // output rounding (+ bias add)
  }
}

// RoPE: adjacent pairs against the llama2.c loop, rotate-half against the HF formula; the inverse
// (rope with -sin) must give x back.
void rope_case(RopeStyle style, int64_t H = 4, int64_t HD = 16, int64_t S = test::S) {
  OneFn f;
  F32 x = rand_f16(H * HD * S, 1.0, 9);
  auto tab = kern::rope_tables(S, HD, 10000.0, style);
  F32 nsin = tab.sin;
  for (auto& v : nsin) v = -v;
  auto tt = mil::tensor_type(DType::kFp16, {1, 1, S, HD});
  Value c = f.blobs.tensor(f.b, "cos", tt, tab.cos), s = f.blobs.tensor(f.b, "sin", tt, tab.sin);
  Value ns = f.blobs.tensor(f.b, "nsin", tt, nsin);
  Value xh = kern::split_heads(f.b, f.in("x", H * HD, S, x), H);
  Value r = kern::rope(f.b, xh, c, s, style);
  Value back = kern::rope(f.b, r, c, ns, style);
  auto y = f.run(f.b.concat({kern::merge_heads(f.b, r), kern::merge_heads(f.b, back)}, 1))[0];
  F64 want(x.size());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < S; ++t) {
      auto X = [&](int64_t d) { return double(x[(h * HD + d) * S + t]); };
      for (int64_t i = 0; i < HD / 2; ++i) {
        const double ang = t * std::pow(10000.0, -2.0 * i / HD);
        const int64_t a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
        const int64_t bb = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + HD / 2;
        want[(h * HD + a) * S + t] = X(a) * std::cos(ang) - X(bb) * std::sin(ang);
        want[(h * HD + bb) * S + t] = X(bb) * std::cos(ang) + X(a) * std::sin(ang);
      }
    }
  F32 got(y.begin(), y.begin() + H * HD * S), inv(y.begin() + H * HD * S, y.end());
  // tables rounded to fp16 (relative u each) + 2 muls + add: k ~ 6
  const double e = nmse(got, want), ei = nmse(inv, to64(x));
  record(std::string("block rope ") + kern::rope_style_name(style), e);
  EXPECT_LT(e, fp16_nmse(6));
  EXPECT_LT(ei, fp16_nmse(12));
}
TEST(KernelNn, RopeAdjacentPairsMatchesLlama2c) { rope_case(RopeStyle::kAdjacentPairs); }
TEST(KernelNn, RopeRotateHalfMatchesHf) { rope_case(RopeStyle::kRotateHalf); }
// Issue 17 item 8: at S=1024, HD=128 the pairs view [1, H, S*HD/2, 2] would have a dimension of 65536
// (the cap, taken as exclusive): the [H, S, HD/2, 2] view must give the same rotation.
TEST(KernelNn, RopeAdjacentPairsPastTheDimensionCap) { rope_case(RopeStyle::kAdjacentPairs, 1, 128, 1024); }

// Issue 17 item 8: gqa_expand / gqa_reduce and the RoPE pairs view at S=1024 keep every dimension of
// every op below 65536 and pass the device checks of every profile.
TEST(KernelNn, GqaAndRopeStayBelowTheDimensionCapAtS1024) {
  const int64_t KVH = 2, REP = 2, HD = 128, SL = 1024;
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  kern::BlobSet blobs;
  Value kv = kern::split_heads(b, b.input("kv", kern::act_type(KVH * HD, SL)), KVH);
  auto tab = kern::rope_tables(SL, HD, 10000.0, RopeStyle::kAdjacentPairs);
  auto tt = mil::tensor_type(DType::kFp16, {1, 1, SL, HD});
  Value r = kern::rope(b, kv, blobs.tensor(b, "cos", tt, tab.cos), blobs.tensor(b, "sin", tt, tab.sin),
                       RopeStyle::kAdjacentPairs);
  Value e = kern::gqa_expand(b, r, REP);
  b.output(kern::merge_heads(b, kern::gqa_reduce(b, e, REP)));
  const mil::Program p = pb.build();
  for (const auto& op : p.functions[0].ops)
    for (int64_t d : op.type.shape) ASSERT_LT(d, 65536) << op.op << " " << op.name << " " << op.type.str();
  for (const std::string& dev : rt::device_profile_names()) {
    mil::Program q = p;
    q.dialect = rt::device_profile(dev).dialect;
    Status st = rt::check_program(q, rt::device_profile(dev));
    EXPECT_TRUE(st.is_ok()) << dev << ": " << st.message();
  }
}

// GQA: query head h must read kv head h / n_rep (contiguous repeat), and gqa_reduce is its adjoint.
TEST(KernelNn, GqaExpandRepeatsEachKvHeadContiguously) {
  const int64_t KVH = 4, REP = 2, HD = 8;
  OneFn f;
  F32 kv(KVH * HD * S);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i % 2000);  // exact in fp16
  Value e = kern::gqa_expand(f.b, kern::split_heads(f.b, f.in("kv", KVH * HD, S, kv), KVH), REP);
  Value r = kern::gqa_reduce(f.b, e, REP);
  auto y = f.run(f.b.concat({kern::merge_heads(f.b, e), kern::merge_heads(f.b, r)}, 1))[0];
  for (int64_t h = 0; h < KVH * REP; ++h)
    for (int64_t d = 0; d < HD; ++d)
      for (int64_t t = 0; t < S; ++t)
        ASSERT_EQ(y[(h * HD + d) * S + t], kv[((h / REP) * HD + d) * S + t]) << "head " << h;
  const int64_t off = KVH * REP * HD * S;
  for (size_t i = 0; i < kv.size(); ++i) ASSERT_EQ(y[off + i], round_fp16(REP * kv[i]));
}

TEST(KernelNn, CausalAttentionWithGqaMatchesFloat64) {
  const int64_t H = 4, KVH = 2, HD = 16;
  OneFn f;
  F32 q = rand_f16(H * HD * S, 1.0, 10), k = rand_f16(KVH * HD * S, 1.0, 11), v = rand_f16(KVH * HD * S, 1.0, 12);
  auto mask = kern::causal_mask(S);
  Value mv = f.blobs.tensor(f.b, "mask", mil::tensor_type(DType::kFp16, {1, 1, S, S}), mask);
  Value qh = kern::split_heads(f.b, f.in("q", H * HD, S, q), H);
  Value kh = kern::gqa_expand(f.b, kern::split_heads(f.b, f.in("k", KVH * HD, S, k), KVH), H / KVH);
  Value vh = kern::gqa_expand(f.b, kern::split_heads(f.b, f.in("v", KVH * HD, S, v), KVH), H / KVH);
  const double scale = 1.0 / std::sqrt(double(HD));
  auto y = f.run(kern::merge_heads(f.b, kern::causal_attention(f.b, qh, kh, vh, mv, scale)))[0];
  F64 want(q.size());
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / KVH);
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> p(static_cast<size_t>(i + 1));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double sc = 0;
        for (int64_t d = 0; d < HD; ++d) sc += double(q[(h * HD + d) * S + i]) * k[(g * HD + d) * S + j];
        p[j] = sc * scale;
        mx = std::max(mx, p[j]);
      }
      for (auto& pj : p) sum += (pj = std::exp(pj - mx));
      for (int64_t d = 0; d < HD; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[j] / sum * v[(g * HD + d) * S + j];
        want[(h * HD + d) * S + i] = acc;
      }
    }
  }
  // scores (2 roundings) feed exp: error u*|score| ~ u*3; probs and output roundings: k ~ 16
  const double e = nmse(y, want);
  record("block causal_attention gqa", e);
  EXPECT_LT(e, fp16_nmse(16));
}

}  // namespace
}  // namespace anelab::test
