// The vectorised activation quantizers (quantize_acts, framework/quant/qdot.h) against plain scalar references
// written here from ggml's formulas: the Q8_0 form of its x86 quantize_row_q8_0 (amax, fp16 d = amax / 127,
// q = cvtps2dq(x * 127 / amax) packed with saturation) and the Q8_K form of quantize_row_q8_K_ref (the first
// value of largest magnitude with its sign, iscale = -127 / max, q = min(127, round(x iscale)), sums per 16).
// Rounding is written out (floor and a tie test, in double) rather than taken from nearbyint. Every field
// must match bit for bit: random vectors of many scales, and blocks built to hit ties at .5, zeros, equal
// values, denormals, huge values, infinities and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "framework/quant/qdot.h"
#include "framework/simd/simd.h"

namespace anelab::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- the reference ----

// Round half to even of a finite v, exact: v - floor(v) needs no rounding in double.
double round_half_even(double v) {
  const double f = std::floor(v), frac = v - f;
  if (frac > 0.5) return f + 1;
  if (frac < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}
// x86 cvtps2dq: the rounded value, or 0x80000000 for NaN and anything outside int32.
int64_t cvtps2dq(float v) {
  if (std::isnan(v)) return INT32_MIN;
  const double r = round_half_even(double(v));
  return r >= -2147483648.0 && r <= 2147483647.0 ? static_cast<int64_t>(r) : INT32_MIN;
}
int8_t sat8(int64_t v) { return static_cast<int8_t>(v < -128 ? -128 : v > 127 ? 127 : v); }

struct Ref {
  std::vector<int8_t> q, qk;
  std::vector<float> d, dk;
  std::vector<int32_t> sums16, sums32;
  std::vector<int16_t> bsums, bsums32;
};

void ref_q8_0(const std::vector<float>& x, Ref& r) {
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;  // NaN compares false: skipped
    for (size_t i = 0; i < 32; ++i) amax = std::fabs(x[32 * b + i]) > amax ? std::fabs(x[32 * b + i]) : amax;
    r.d.push_back(simd::soft_h2f(simd::soft_f2h(amax / 127.0f)));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t s[2] = {0, 0};
    for (size_t i = 0; i < 32; ++i) {
      r.q.push_back(sat8(cvtps2dq(x[32 * b + i] * id)));
      s[i / 16] += r.q.back();
    }
    r.sums16.push_back(s[0]), r.sums16.push_back(s[1]), r.sums32.push_back(s[0] + s[1]);
  }
}

void ref_q8_k(const std::vector<float>& x, Ref& r) {
  for (size_t b = 0; b < x.size() / 256; ++b) {
    const float* xb = x.data() + 256 * b;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; ++i)
      if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
    const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
    r.dk.push_back(amax != 0.0f ? 1.0f / iscale : 0.0f);
    for (int s = 0; s < 16; ++s) {
      int32_t sum = 0;
      for (int i = 16 * s; i < 16 * s + 16; ++i) {
        const float p = iscale * xb[i];
        r.qk.push_back(sat8(cvtps2dq(p < 127.0f ? p : 127.0f)));  // min(127, .): NaN -> 127
        sum += r.qk.back();
      }
      r.bsums.push_back(static_cast<int16_t>(sum));
      if (s % 2) r.bsums32.push_back(static_cast<int16_t>(r.bsums[r.bsums.size() - 2] + sum));
    }
  }
}

// ---- comparison ----

template <typename T>
void expect_prefix(const std::vector<T>& got, const std::vector<T>& want, const char* field, const std::string& what) {
  ASSERT_GE(got.size(), want.size()) << field;
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << ": " << field << "[" << i << "]";
}
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const char* field,
                 const std::string& what) {
  ASSERT_GE(got.size(), want.size()) << field;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(bits(got[i]), bits(want[i])) << what << ": " << field << "[" << i << "] " << got[i] << " vs " << want[i];
}

// Both forms of x (n a multiple of 256) against the reference, through one reused Q8Acts as decode does.
void check(const std::vector<float>& x, Q8Acts& a, const std::string& what) {
  Ref r;
  ref_q8_0(x, r);
  ref_q8_k(x, r);
  quantize_acts(x.data(), static_cast<int64_t>(x.size()), a);
  ASSERT_EQ(a.forms, unsigned{kActsAll}) << what;
  expect_prefix(a.q, r.q, "q", what);
  expect_bits(a.d, r.d, "d", what);
  expect_prefix(a.sums16, r.sums16, "sums16", what);
  expect_prefix(a.sums32, r.sums32, "sums32", what);
  expect_prefix(a.qk, r.qk, "qk", what);
  expect_bits(a.dk, r.dk, "dk", what);
  expect_prefix(a.bsums, r.bsums, "bsums", what);
  expect_prefix(a.bsums32, r.bsums32, "bsums32", what);
}

// ---- tests ----

// The primitives alone: abs clears the sign bit; cvt_i32 rounds half to even and gives INT32_MIN for NaN and
// beyond int32; pack_i8 saturates and keeps memory order; sum16_i8 sums each half as int8.
TEST(QuantActs, SimdConversionPrimitives) {
  namespace S = simd;
  constexpr int W = S::kWidth;
  std::vector<float> v = {0.5f,          1.5f,           2.5f,           -0.5f,      -1.5f,      -2.5f,   126.5f,
                          -127.5f,       0.49999997f,    -0.0f,          kNaN,       kInf,       -kInf,   2147483648.0f,
                          2147483520.0f, -2147483648.0f, -2147483904.0f, kDenormMin, 200.0f,     -129.0f, 128.0f,
                          -128.0f,       127.0f,         3e9f,           8388609.0f, 4194304.5f, -7.5f,   1e-30f,
                          -kNaN,         13.5f,          127.4f,         -300.0f};
  ASSERT_EQ(v.size(), 32u);
  for (int k = 0; k < 32 / W; ++k) {  // abs clears the sign bit only (NaN, -0 and -inf included)
    float f[W];
    S::store(f, S::abs(S::load(v.data() + W * k)));
    for (int l = 0; l < W; ++l) EXPECT_EQ(bits(f[l]), bits(v[static_cast<size_t>(W * k + l)]) & 0x7FFFFFFFu);
  }
  S::GI32 q[32 / W];
  for (int k = 0; k < 32 / W; ++k) q[k] = S::cvt_i32(S::load(v.data() + W * k));
  for (int k = 0; k < 32 / W; ++k) {  // int32 values back through fp32 (exact for these)
    float f[W];
    S::store(f, S::to_f32(q[k]));
    for (int l = 0; l < W; ++l)
      EXPECT_EQ(double(f[l]), double(cvtps2dq(v[static_cast<size_t>(W * k + l)]))) << "lane " << W * k + l;
  }
  int8_t got[32];
  const S::I8 p = S::pack_i8(q);
  S::store_i8(got, p);
  int32_t want_s[2] = {0, 0}, s[2];
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(got[i], sat8(cvtps2dq(v[static_cast<size_t>(i)]))) << "byte " << i;
    want_s[i / 16] += got[i];
  }
  S::sum16_i8(p, s);
  EXPECT_EQ(s[0], want_s[0]);
  EXPECT_EQ(s[1], want_s[1]);
  // The extremes of the sums: 16 x -128 and 16 x 127.
  std::vector<float> e(32);
  for (int i = 0; i < 32; ++i) e[static_cast<size_t>(i)] = i < 16 ? -1000.0f : 1000.0f;
  for (int k = 0; k < 32 / W; ++k) q[k] = S::cvt_i32(S::load(e.data() + W * k));
  S::sum16_i8(S::pack_i8(q), s);
  EXPECT_EQ(s[0], -2048);
  EXPECT_EQ(s[1], 16 * 127);
}

// Random activations: normal, heavy-tailed and sparse, block scales from 2^-30 to 2^30.
TEST(QuantActs, RandomVectorsMatchReference) {
  std::mt19937 rng(20261124);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 30), pick(0, 9);
  Q8Acts a;
  for (int rep = 0; rep < 300; ++rep) {
    const int64_t n = 256 * (1 + rep % 6);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t b = 0; b < n / 32; ++b) {
      const float scale = std::ldexp(1.0f, e(rng));
      const int kind = pick(rng);
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
        float v = g(rng) * scale;
        if (kind == 0) v = v * v * v;                    // heavy tails
        if (kind == 1 && pick(rng) < 7) v = 0.0f;        // sparse
        if (kind == 2) v = std::round(v * 4.0f) / 4.0f;  // coarse values, repeated magnitudes
        x[static_cast<size_t>(i)] = v;
      }
    }
    check(x, a, "rep " + std::to_string(rep));
    if (HasFatalFailure()) return;
  }
}

// Blocks where x * 127 / amax (and x * -127 / max) lands exactly on k + 1/2: amax = 127 2^k makes the scale
// an exact power of two, and the other values are half-integers times 2^k.
TEST(QuantActs, TiesRoundHalfToEven) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> half(-127, 126), e(-20, 20), sign(0, 1);
  Q8Acts a;
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<float> x(512);
    for (size_t b = 0; b < x.size() / 32; ++b) {
      const float s = std::ldexp(1.0f, e(rng));
      for (size_t i = 0; i < 32; ++i) x[32 * b + i] = (static_cast<float>(half(rng)) + 0.5f) * s;
      x[32 * b + (b % 32)] = (sign(rng) ? 127.0f : -127.0f) * s;         // amax, at a varying place
      if (b % 8 == 0) x[32 * b + 31] = std::fabs(x[32 * b + (b % 32)]);  // Q8_K: the first of +-amax sets the sign
    }
    check(x, a, "rep " + std::to_string(rep));
    if (HasFatalFailure()) return;
  }
}

// Hand-made blocks, one super-block of 256 each (Q8_0 sees 8 blocks of 32 of the same pattern).
TEST(QuantActs, EdgeBlocksMatchReference) {
  const float huge = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::min();
  std::vector<std::pair<std::string, std::vector<float>>> cases;
  auto add = [&](const std::string& name, auto f) {
    std::vector<float> x(256);
    for (int i = 0; i < 256; ++i) x[static_cast<size_t>(i)] = f(i);
    cases.emplace_back(name, x);
  };
  add("zeros", [](int) { return 0.0f; });
  add("negative zeros", [](int i) { return i % 2 ? -0.0f : 0.0f; });
  add("all equal", [](int) { return 3.7f; });
  add("all equal negative", [](int) { return -3.7f; });
  add("one value", [](int i) { return i == 77 ? -0.3f : 0.0f; });
  add("+-max, minus first", [](int i) {
    return i == 40 ? -5.0f : i == 200 ? 5.0f : 0.01f * static_cast<float>(i % 7);
  });
  add("+-max, same block", [](int i) { return i == 65 ? 5.0f : i == 66 ? -5.0f : -0.02f * static_cast<float>(i % 5); });
  add("denormals", [](int i) { return kDenormMin * static_cast<float>(i - 128); });
  add("below 2^-121", [tiny](int i) { return tiny * static_cast<float>(i % 9 - 4); });
  add("normal max, denormal rest", [](int i) { return i % 32 == 5 ? 1e-30f : kDenormMin * static_cast<float>(i); });
  add("huge", [huge](int i) { return i % 3 == 0 ? huge : -huge * 0.25f * static_cast<float>(i % 5); });
  add("huge and tiny", [huge](int i) { return i % 32 == 0 ? -huge : 1e-30f * static_cast<float>(i); });
  add("inf", [](int i) { return i == 3 ? kInf : static_cast<float>(i); });
  add("-inf first", [](int i) { return i == 0 ? -kInf : i == 1 ? kInf : 1.0f; });
  add("NaN", [](int i) { return i % 16 == 2 ? kNaN : 0.1f * static_cast<float>(i - 100); });
  add("NaN and zeros", [](int i) { return i % 5 == 0 ? kNaN : 0.0f; });
  Q8Acts a;
  for (const auto& [name, x] : cases) {
    check(x, a, name);
    if (HasFatalFailure()) return;
  }
}

// The sums for the prefill GEMM exist for the Q8_0 form alone, and n need not be a multiple of 256 then.
TEST(QuantActs, Q8_0SumsWithoutQ8_K) {
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 11) - 5.0f;
  Q8Acts a;
  quantize_acts(x.data(), 96, a);
  ASSERT_EQ(a.forms, unsigned{kActsQ8_0});
  Ref r;
  ref_q8_0(x, r);
  expect_prefix(a.q, r.q, "q", "n 96");
  expect_prefix(a.sums16, r.sums16, "sums16", "n 96");
  expect_prefix(a.sums32, r.sums32, "sums32", "n 96");
}

}  // namespace
}  // namespace anelab::quant
