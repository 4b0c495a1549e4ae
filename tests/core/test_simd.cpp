// The SIMD layer (framework/simd) of whichever architecture this build selected, against portable
// references: the exact soft fp16 conversions (all 65536 halves, a sweep of float bit patterns, every
// rounding boundary), std::ldexp / nearbyint / fma lane by lane, partial loads and stores that must not
// touch memory past n (guard values), and horizontal reductions. Every lane-wise operation must be
// bit-exact: that is what makes emulator results independent of the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/simd/simd.h"

namespace anelab {
namespace {

namespace W = simd;
constexpr int VW = W::kWidth;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Same bits, or both NaN with the same sign and quiet bit (payloads are kept by both rules checked here).
bool same(float a, float b) { return bits(a) == bits(b); }

TEST(Simd, ReportsItsArchitecture) {
  std::printf("[simd] %s: %d lanes, GEMM micro-tile %d x %d\n", W::kName, VW, W::kGemmMR, W::kGemmNR);
#if defined(ANELAB_SIMD_VARIANT)  // a twin built for another path (CMakeLists.txt ANELAB_SIMD_VARIANTS) runs that path
  EXPECT_STREQ(W::kName, ANELAB_SIMD_VARIANT);
#elif defined(ANELAB_SIMD_SCALAR)
  EXPECT_STREQ(W::kName, "scalar");
#elif defined(__aarch64__)
  EXPECT_STREQ(W::kName, "neon");
#endif
  EXPECT_EQ(W::kGemmNR, W::kGemmNV * VW);
}

TEST(Simd, HalfToFloatAllValues) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> bulk(65536);
  half_to_float(h.data(), bulk.data(), h.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float ref = W::soft_h2f(h[i]);
    ASSERT_TRUE(same(W::h2f(h[i]), ref)) << std::hex << "h=0x" << i << " got " << bits(W::h2f(h[i]));
    ASSERT_TRUE(same(bulk[i], ref)) << std::hex << "bulk h=0x" << i;
  }
}

TEST(Simd, FloatToHalfSweepAndBoundaries) {
  std::vector<float> xs;
  for (uint64_t u = 0; u < (1ull << 32); u += 9973) xs.push_back(from_bits(static_cast<uint32_t>(u)));
  // Every midpoint between adjacent halves, and one float ulp either side of it.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = W::soft_h2f(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7C00 ? 65536.0 : W::soft_h2f(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 6e-8f,
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()})
    xs.push_back(x);
  std::vector<uint16_t> bulk(xs.size());
  float_to_half(xs.data(), bulk.data(), xs.size());
  std::vector<float> rounded = xs;
  round_fp16_inplace(rounded.data(), rounded.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint16_t ref = W::soft_f2h(xs[i]);
    ASSERT_EQ(W::f2h(xs[i]), ref) << "x bits 0x" << std::hex << bits(xs[i]);
    ASSERT_EQ(bulk[i], ref) << "bulk x bits 0x" << std::hex << bits(xs[i]);
    ASSERT_TRUE(same(rounded[i], W::soft_h2f(ref))) << "round x bits 0x" << std::hex << bits(xs[i]);
  }
}

TEST(Simd, SoftConversionMatchesRoundingDefinition) {
  // soft_f2h itself against the definition: the nearest half, ties to the even significand.
  EXPECT_EQ(W::soft_f2h(1.0f + 0.00048828125f), 0x3C00);  // 1 + 2^-11: tie -> 1.0
  EXPECT_EQ(W::soft_f2h(1.0f + 3 * 0.00048828125f), 0x3C02);
  EXPECT_EQ(W::soft_f2h(65519.0f), 0x7BFF);
  EXPECT_EQ(W::soft_f2h(65520.0f), 0x7C00);
  EXPECT_EQ(W::soft_f2h(2.9802322387695312e-08f), 0x0000);  // 2^-25: tie between 0 and 2^-24 -> 0
  EXPECT_EQ(W::soft_f2h(8.940696716308594e-08f), 0x0002);   // 1.5 * 2^-24: tie -> 2 * 2^-24
  EXPECT_EQ(W::soft_f2h(-0.0f), 0x8000);
  EXPECT_EQ(W::soft_h2f(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(W::soft_h2f(0x7BFF), 65504.0f);
}

// Applies a lane-wise operation to random inputs (plus specials) and compares with a scalar reference.
template <typename Op, typename Ref>
void check_lanes(const char* name, Op op, Ref ref, float lo, float hi) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int it = 0; it < 20000; ++it) {
    float a[VW], b[VW], c[VW], out[VW];
    for (int i = 0; i < VW; ++i) a[i] = d(rng), b[i] = d(rng), c[i] = d(rng);
    W::store(out, op(W::load(a), W::load(b), W::load(c)));
    for (int i = 0; i < VW; ++i) ASSERT_TRUE(same(out[i], ref(a[i], b[i], c[i]))) << name << " " << a[i] << " " << b[i];
  }
}

TEST(Simd, LaneOpsAreExact) {
  check_lanes(
      "fmadd", [](auto a, auto b, auto c) { return W::fmadd(a, b, c); },
      [](float a, float b, float c) { return std::fma(a, b, c); }, -10, 10);
  check_lanes(
      "fnmadd", [](auto a, auto b, auto c) { return W::fnmadd(a, b, c); },
      [](float a, float b, float c) { return std::fma(-a, b, c); }, -10, 10);
  check_lanes(
      "div", [](auto a, auto b, auto) { return W::div(a, b); }, [](float a, float b, float) { return a / b; }, -10, 10);
  check_lanes(
      "round_even", [](auto a, auto, auto) { return W::round_even(a); },
      [](float a, float, float) { return std::nearbyint(a); }, -100, 100);
  check_lanes(
      "round_fp16", [](auto a, auto, auto) { return W::round_fp16(a); },
      [](float a, float, float) { return W::soft_h2f(W::soft_f2h(a)); }, -70000, 70000);
  check_lanes(
      "max", [](auto a, auto b, auto) { return W::max(a, b); }, [](float a, float b, float) { return a > b ? a : b; },
      -1, 1);
  check_lanes(
      "select(ge)", [](auto a, auto b, auto c) { return W::select(W::ge(a, b), c, a); },
      [](float a, float b, float c) { return a >= b ? c : a; }, -1, 1);
  // ties of round_even
  float t[VW], o[VW];
  for (int i = 0; i < VW; ++i) t[i] = 0.5f + static_cast<float>(i % 4);
  W::store(o, W::round_even(W::load(t)));
  for (int i = 0; i < VW; ++i) EXPECT_EQ(o[i], std::nearbyint(t[i])) << t[i];
}

TEST(Simd, LdexpWholeRangeOneRounding) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(0.5f, 2.0f);
  for (int n = -150; n <= 128; ++n) {
    float p[VW], nn[VW], o[VW];
    for (int i = 0; i < VW; ++i) p[i] = d(rng), nn[i] = static_cast<float>(n);
    W::store(o, W::ldexp(W::load(p), W::load(nn)));
    for (int i = 0; i < VW; ++i) ASSERT_TRUE(same(o[i], std::ldexp(p[i], n))) << "p=" << p[i] << " n=" << n;
  }
}

TEST(Simd, PartialLoadsAndStoresStayInBounds) {
  for (int n = 0; n <= VW + 1; ++n) {
    std::vector<float> src(VW + 8, 7.0f), dst(VW + 8, -1.0f);
    std::vector<uint16_t> hsrc(VW + 8, float_to_half(3.0f));
    for (int i = 0; i < VW; ++i) src[static_cast<size_t>(i)] = static_cast<float>(i + 1);
    float l[VW], lh[VW];
    W::store(l, W::load_n(src.data(), n));
    W::store(lh, W::load_h_n(hsrc.data(), n));
    for (int i = 0; i < VW; ++i) {
      EXPECT_EQ(l[i], i < n ? static_cast<float>(i + 1) : 0.0f) << "n=" << n << " lane " << i;
      EXPECT_EQ(lh[i], i < n ? 3.0f : 0.0f) << "n=" << n << " lane " << i;
    }
    W::store_n(dst.data(), W::load(src.data()), n);
    for (int i = 0; i < VW + 8; ++i)
      EXPECT_EQ(dst[static_cast<size_t>(i)], i < std::min(n, VW) ? static_cast<float>(i + 1) : -1.0f)
          << "n=" << n << " index " << i;
  }
}

TEST(Simd, Reductions) {
  float a[VW];
  double sum = 0;
  for (int i = 0; i < VW; ++i) a[i] = static_cast<float>(i * i) - 3.5f, sum += a[i];
  EXPECT_EQ(W::reduce_add(W::load(a)), static_cast<float>(sum));  // small integers + halves: exact
  a[VW / 2] = 1e9f;
  EXPECT_EQ(W::reduce_max(W::load(a)), 1e9f);
}

}  // namespace
}  // namespace anelab
