// fp16 conversion: round-to-nearest-even, overflow to inf, subnormals, bulk == scalar.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "framework/core/fp16.h"

namespace anelab {
namespace {

// Independent reference: round a double to binary16 by explicit mantissa arithmetic (RNE).
double ref_round_fp16(double x) {
  if (std::isnan(x)) return x;
  double a = std::fabs(x);
  if (a >= 65520.0) return std::copysign(INFINITY, x);  // >= max + half ulp rounds to inf
  int e;
  std::frexp(a, &e);               // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, -14);  // unbiased exponent, clamped to the subnormal range
  double ulp = std::ldexp(1.0, exp - 10);
  double q = a / ulp;
  double r = std::nearbyint(q);  // default rounding mode: nearest-even
  return std::copysign(r * ulp, x);
}

TEST(Fp16, ScalarMatchesReferenceRounding) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> ex(-26, 17);
  for (int i = 0; i < 200000; ++i) {
    double x = std::ldexp(mant(rng), ex(rng));
    float f = static_cast<float>(x);
    EXPECT_EQ(round_fp16(f), static_cast<float>(ref_round_fp16(f))) << "x=" << f;
  }
}

TEST(Fp16, TiesToEvenOverflowAndSpecials) {
  EXPECT_EQ(round_fp16(1.0f + 0.00048828125f), 1.0f);              // halfway 1 + 2^-11 -> even (1.0)
  EXPECT_EQ(round_fp16(1.0f + 3 * 0.00048828125f), 1.001953125f);  // halfway up -> even (1 + 2^-9)
  EXPECT_EQ(round_fp16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_fp16(65520.0f)));
  EXPECT_EQ(round_fp16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_fp16(-1e6f)) && round_fp16(-1e6f) < 0);
  EXPECT_TRUE(std::isnan(round_fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(round_fp16(5.9604644775390625e-08f), 5.9604644775390625e-08f);  // smallest subnormal
  EXPECT_EQ(round_fp16(2.0e-8f), 0.0f);
}

TEST(Fp16, BulkEqualsScalarForAllBitPatterns) {
  std::vector<half_bits> h(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<half_bits>(i);
  std::vector<float> f(65536);
  half_to_float(h.data(), f.data(), h.size());
  for (int i = 0; i < 65536; ++i) {
    float s = half_to_float(h[i]);
    if (std::isnan(s)) {
      EXPECT_TRUE(std::isnan(f[i]));
    } else {
      EXPECT_EQ(f[i], s) << i;
    }
  }
  std::vector<half_bits> back(65536);
  float_to_half(f.data(), back.data(), f.size());
  for (int i = 0; i < 65536; ++i)
    if (!std::isnan(f[i])) {
      EXPECT_EQ(back[i], h[i]) << i;
    }
  // Odd length exercises the scalar tail.
  std::vector<float> r(f.begin(), f.begin() + 37);
  std::vector<float> src(37);
  for (int i = 0; i < 37; ++i) src[i] = 0.1f * i + 0.0001f;
  r = src;
  round_fp16_inplace(r.data(), r.size());
  for (int i = 0; i < 37; ++i) EXPECT_EQ(r[i], round_fp16(src[i]));
}

}  // namespace
}  // namespace anelab
