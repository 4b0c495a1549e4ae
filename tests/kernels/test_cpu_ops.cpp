// The CPU RoPE and norms shared by the inference engine and the training reference
// (framework/kernels/cpu_ops.h): each precision reproduces its reference's formula bit for bit
// (llama2.c run.c in fp32, the fp64-angle / fp64-sum training reference), RoPE rotates the pairs of its
// style and sign -1 undoes it.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "framework/kernels/cpu_ops.h"
#include "tests/kernels/kern_util.h"

namespace anelab::test {
namespace {

using kern::cpu::Numerics;

TEST(CpuOps, RopeTablesFollowRuncInFp32AndTheReferenceInFp64) {
  const int64_t n = 40, hd = 64, half = hd / 2, pos0 = 1000;
  const float theta = 10000.0f;
  F32 c32(n * half), s32(c32.size()), c64(c32.size()), s64(c32.size());
  kern::cpu::rope_half_tables(n, hd, theta, pos0, Numerics::kRunc, c32.data(), s32.data());
  kern::cpu::rope_half_tables(n, hd, theta, pos0, Numerics::kReference, c64.data(), s64.data());
  int differ = 0;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const size_t k = size_t(p * half + i);
      // run.c: float freq = 1.0f / powf(10000.0f, head_dim / (float)head_size); float val = pos * freq;
      const float freq = 1.0f / std::pow(theta, float(2 * i) / float(hd)), val = float(pos0 + p) * freq;
      EXPECT_EQ(c32[k], std::cos(val)) << p << " " << i;
      EXPECT_EQ(s32[k], std::sin(val)) << p << " " << i;
      const double ang = double(pos0 + p) * std::pow(double(theta), -2.0 * double(i) / double(hd));
      EXPECT_EQ(c64[k], float(std::cos(ang))) << p << " " << i;
      EXPECT_EQ(s64[k], float(std::sin(ang))) << p << " " << i;
      differ += c32[k] != c64[k];
    }
  EXPECT_GT(differ, 0);  // at position 1000 the fp32 angle is off by ulps of 1000 rad: the two differ
}

// Llama 3 scaling with Llama 3.2's parameters (theta 500000, HD 64, factor 32, low 1, high 4, original 8192):
// frequencies whose wavelength 2*pi/f is under 8192/4 = 2048 positions are kept, over 8192/1 divided by 32,
// between them blended; the tables use the scaled frequencies in both precisions.
TEST(CpuOps, Llama3ScalingKeepsHighDividesLowAndBlendsBetween) {
  const int64_t hd = 64;
  const double theta = 500000.0;
  const RopeScaling s{RopeScalingType::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double plain = std::pow(theta, -2.0 * double(i) / double(hd)), wavelen = 2 * std::numbers::pi / plain;
    const double f = kern::cpu::rope_inv_freq(i, hd, theta, s, Numerics::kReference);
    EXPECT_EQ(kern::cpu::rope_inv_freq(i, hd, theta, {}, Numerics::kReference), plain);
    if (wavelen < 2048) {
      EXPECT_EQ(f, plain) << i;
      ++kept;
    } else if (wavelen > 8192) {
      EXPECT_EQ(f, plain / 32) << i;
      ++divided;
    } else {
      EXPECT_GT(f, plain / 32) << i;
      EXPECT_LT(f, plain) << i;
      ++blended;
    }
    // fp32: pow, the division and the blend, < 10 roundings of 2^-24 relative each
    EXPECT_NEAR(kern::cpu::rope_inv_freq(i, hd, theta, s, Numerics::kRunc), f, 1e-6 * f) << i;
  }
  EXPECT_EQ(kept, 15);  // 2*pi * 500000^(i/32) < 2048 for i <= 14; > 8192 from i = 18
  EXPECT_EQ(blended, 3);
  EXPECT_EQ(divided, 14);
  F32 c(4 * 32), sn(c.size());
  kern::cpu::rope_half_tables(4, hd, theta, 100, Numerics::kReference, c.data(), sn.data(), s);
  EXPECT_EQ(c[3 * 32 + 31], float(std::cos(103 * kern::cpu::rope_inv_freq(31, hd, theta, s, Numerics::kReference))));
}

TEST(CpuOps, RopeRowRotatesThePairsOfItsStyleAndSignMinusOneUndoesIt) {
  const int64_t heads = 3, hd = 8, half = hd / 2;
  F32 cs(half), sn(half);
  kern::cpu::rope_half_tables(1, hd, 10000.0, 7, Numerics::kReference, cs.data(), sn.data());
  const F32 x = rand_f16(size_t(heads * hd), 1.0, 5);
  for (kern::RopeStyle st : {kern::RopeStyle::kAdjacentPairs, kern::RopeStyle::kRotateHalf})
    for (Numerics num : {Numerics::kRunc, Numerics::kReference}) {
      F32 y = x;
      kern::cpu::rope_row(y.data(), heads, hd, st, cs.data(), sn.data(), num);
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = h * hd + (st == kern::RopeStyle::kAdjacentPairs ? 2 * i : i);
          const int64_t b = h * hd + (st == kern::RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half);
          // |x| <= 1: each product (< 1) rounded by <= 2^-25 unless fused (FMA), the sum (<= 1.42) by <= 2^-24
          EXPECT_NEAR(y[a], double(x[a]) * cs[i] - double(x[b]) * sn[i], 0x1p-23) << kern::rope_style_name(st);
          EXPECT_NEAR(y[b], double(x[a]) * sn[i] + double(x[b]) * cs[i], 0x1p-23) << kern::rope_style_name(st);
        }
      // back: each output is two products and a sum of values <= sqrt(2) |x|: a few ulps of 1
      kern::cpu::rope_row(y.data(), heads, hd, st, cs.data(), sn.data(), num, -1.0f);
      for (size_t k = 0; k < x.size(); ++k)
        EXPECT_NEAR(y[k], x[k], 4 * 0x1p-24) << kern::rope_style_name(st) << " " << k;
    }
}

TEST(CpuOps, NormsSumInTheNumericsAsked) {
  const int64_t n = 288;
  const F32 x = rand_f16(size_t(n), 3.0, 9), w = rand_f16(size_t(n), 1.0, 10), b = rand_f16(size_t(n), 1.0, 11);
  const float eps = 1e-5f;
  F32 y32(n), y64(n);
  const float r32 = kern::cpu::rms_norm(x.data(), w.data(), eps, n, y32.data(), Numerics::kRunc);
  const float r64 = kern::cpu::rms_norm(x.data(), w.data(), eps, n, y64.data(), Numerics::kReference);
  float ss = 0.0f;  // run.c rmsnorm
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  ss /= float(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  double sd = 0.0;
  for (int64_t i = 0; i < n; ++i) sd += double(x[i]) * x[i];
  EXPECT_EQ(r32, ss);
  EXPECT_EQ(r64, float(1.0 / std::sqrt(sd / double(n) + double(eps))));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(y32[i], w[i] * (ss * x[i])) << i;
    EXPECT_EQ(y64[i], x[i] * r64 * w[i]) << i;
  }
  // LayerNorm with w = 1, b = 0: mean 0 and variance var/(var + eps) in fp64, each output one fp32 rounding
  F32 ones(n, 1.0f), ln(n);
  kern::cpu::layer_norm(x.data(), ones.data(), nullptr, eps, n, ln.data());
  double m = 0, v = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) m += x[i], mx += double(x[i]) * x[i];
  m /= double(n), mx = mx / double(n) - m * m;
  for (int64_t i = 0; i < n; ++i) v += double(ln[i]) * ln[i];
  EXPECT_NEAR(v / double(n), mx / (mx + eps), 1e-6);
  // with a bias: every output moves by exactly its bias (up to one rounding of the sum)
  F32 lb(n);
  kern::cpu::layer_norm(x.data(), ones.data(), b.data(), eps, n, lb.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(lb[i], ln[i] + b[i]) << i;
}

}  // namespace
}  // namespace anelab::test
