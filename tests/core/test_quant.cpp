// Block formats (framework/quant/blocks.h): sizes, hand-built blocks with known values, and quantize ->
// dequantize round trips. The round-trip checks are the quantizers' defining property: every value becomes
// the nearest level its block can represent (levels from the block's stored scales), so the error of a value
// inside the block's range is at most half that block's step, and a value outside it lands on the end level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "framework/quant/blocks.h"
#include "framework/quant/qdot.h"
#include "framework/quant/types.h"
#include "framework/simd/simd.h"
#include "tests/core/quant_golden_input.h"

namespace anelab::quant {
namespace {

float h2f(uint16_t h) { return simd::soft_h2f(h); }
uint16_t f2h(float x) { return simd::soft_f2h(x); }

TEST(QuantBlocks, LayoutSizes) {
  EXPECT_EQ(block_info(BlockType::kQ8_0).bytes, 34);
  EXPECT_EQ(block_info(BlockType::kQ4_0).bytes, 18);
  EXPECT_EQ(block_info(BlockType::kQ5_0).bytes, 22);
  EXPECT_EQ(offsetof(BlockQ5_0, qh), 2u);
  EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
  EXPECT_EQ(block_info(BlockType::kQ5_1).bytes, 24);
  EXPECT_EQ(offsetof(BlockQ5_1, m), 2u);
  EXPECT_EQ(offsetof(BlockQ5_1, qh), 4u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
  EXPECT_EQ(block_info(BlockType::kQ4_K).bytes, 144);
  EXPECT_EQ(block_info(BlockType::kQ5_K).bytes, 176);
  EXPECT_EQ(offsetof(BlockQ5_K, scales), 4u);
  EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
  EXPECT_EQ(block_info(BlockType::kQ5_K).values, 256);
  EXPECT_EQ(block_info(BlockType::kQ6_K).bytes, 210);
  EXPECT_EQ(block_info(BlockType::kQ8_0).values, 32);
  EXPECT_EQ(block_info(BlockType::kQ4_0).values, 32);
  EXPECT_EQ(block_info(BlockType::kQ4_K).values, 256);
  EXPECT_EQ(block_info(BlockType::kQ6_K).values, 256);
  // Field offsets as in ggml-common.h.
  EXPECT_EQ(offsetof(BlockQ4_K, scales), 4u);
  EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ6_K, qh), 128u);
  EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
  std::vector<float> y(33);
  std::vector<uint8_t> b(34);
  EXPECT_ANY_THROW(dequantize(BlockType::kQ8_0, b.data(), y.data(), 33));
}

TEST(QuantBlocks, HandBuiltQ8_0AndQ4_0) {
  BlockQ8_0 a{};
  a.d = f2h(0.5f);
  for (int j = 0; j < 32; ++j) a.qs[j] = static_cast<int8_t>(j - 16);
  float y[32];
  dequantize(BlockType::kQ8_0, reinterpret_cast<const uint8_t*>(&a), y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 16));
  BlockQ4_0 b{};
  b.d = f2h(-0.25f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  dequantize(BlockType::kQ4_0, reinterpret_cast<const uint8_t*>(&b), y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -0.25f * static_cast<float>(j - 8));            // low nibble: values 0..15
    EXPECT_EQ(y[j + 16], -0.25f * static_cast<float>(15 - j - 8));  // high nibble: values 16..31
  }
}

// Q5_0 by hand: value v takes the low nibble (v < 16) or high nibble (v >= 16) of qs[v % 16] and bit v of the
// little-endian qh as its 5th bit. The quantizer (llama.cpp's: d = max / -16, q = min(31, trunc(x / d + 16.5)))
// on x = v - 16 has max -16, so d = 1 and q = v: the expected bytes follow from the layout alone.
TEST(QuantBlocks, HandBuiltQ5_0) {
  float x[32];
  for (int v = 0; v < 32; ++v) x[v] = static_cast<float>(v - 16);
  x[6] = -9.5f;   // x / d + 16.5 = 7.0: half rounds up, q = 7
  x[7] = -9.51f;  // 6.99: q = 6
  BlockQ5_0 b{};
  quantize(BlockType::kQ5_0, x, reinterpret_cast<uint8_t*>(&b), 32);
  EXPECT_EQ(b.d, 0x3C00);                               // fp16 1.0
  const uint8_t want_qh[4] = {0x00, 0x00, 0xFF, 0xFF};  // q >= 16 exactly for v >= 16
  for (int k = 0; k < 4; ++k) EXPECT_EQ(b.qh[k], want_qh[k]) << k;
  for (int j = 0; j < 16; ++j) {
    const int lo = j == 6 ? 7 : j == 7 ? 6 : j;                  // q of value j
    EXPECT_EQ(b.qs[j], static_cast<uint8_t>(lo | j << 4)) << j;  // value j + 16 has q = j + 16: nibble j
  }
  float y[32];
  dequantize(BlockType::kQ5_0, reinterpret_cast<const uint8_t*>(&b), y, 32);
  for (int v = 0; v < 32; ++v) EXPECT_EQ(y[v], static_cast<float>((v == 6 ? 7 : v == 7 ? 6 : v) - 16)) << v;
  // A negative scale from a positive max: d = 16 / -16 = -1, so q = 16 - x.
  for (int v = 0; v < 32; ++v) x[v] = static_cast<float>(16 - v) / 2.0f;
  x[0] = 16.0f;
  quantize(BlockType::kQ5_0, x, reinterpret_cast<uint8_t*>(&b), 32);
  EXPECT_EQ(b.d, 0xBC00);  // fp16 -1.0
  dequantize(BlockType::kQ5_0, reinterpret_cast<const uint8_t*>(&b), y, 32);
  EXPECT_EQ(y[0], 16.0f);  // q = 0
  EXPECT_EQ(y[1], 7.0f);   // x = 7.5: x / d + 16.5 = 9.0, q = 9, -1 * (9 - 16)
}

// Packs sub-block j's 6-bit scale sc and min m into Q4_K's / Q5_K's scales[12] (the layout blocks.h writes out).
void pack_k_scale(uint8_t* scales, int j, int sc, int m) {
  if (j < 4) {
    scales[j] = static_cast<uint8_t>(sc), scales[j + 4] = static_cast<uint8_t>(m);
  } else {
    scales[j + 4] = static_cast<uint8_t>((sc & 15) | (m & 15) << 4);
    scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | (sc >> 4) << 6);
    scales[j] = static_cast<uint8_t>(scales[j] | (m >> 4) << 6);
  }
}

// Q5_1: x = -3 + v / 2 spans [-3, 12.5], so d = 15.5 / 31 = 0.5 and m = -3 are exact in fp16 and every value
// sits on level v; one value moved to a tie rounds up, one just below it down.
TEST(QuantBlocks, HandBuiltQ5_1) {
  float x[32];
  for (int v = 0; v < 32; ++v) x[v] = -3.0f + 0.5f * static_cast<float>(v);
  x[6] = -3.0f + 0.5f * 6.5f;   // (x - m) / d + 0.5 = 7.0: q = 7
  x[7] = -3.0f + 0.5f * 5.49f;  // 5.99: q = 5
  BlockQ5_1 b{};
  quantize(BlockType::kQ5_1, x, reinterpret_cast<uint8_t*>(&b), 32);
  EXPECT_EQ(b.d, 0x3800);                               // fp16 0.5
  EXPECT_EQ(b.m, 0xC200);                               // fp16 -3.0
  const uint8_t want_qh[4] = {0x00, 0x00, 0xFF, 0xFF};  // q >= 16 exactly for v >= 16
  for (int k = 0; k < 4; ++k) EXPECT_EQ(b.qh[k], want_qh[k]) << k;
  auto q_of = [](int v) { return v == 6 ? 7 : v == 7 ? 5 : v; };
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], static_cast<uint8_t>(q_of(j) | (q_of(j + 16) & 15) << 4)) << j;
  float y[32];
  dequantize(BlockType::kQ5_1, reinterpret_cast<const uint8_t*>(&b), y, 32);
  for (int v = 0; v < 32; ++v) EXPECT_EQ(y[v], -3.0f + 0.5f * static_cast<float>(q_of(v))) << v;
}

TEST(QuantBlocks, HandBuiltQ5_K) {
  BlockQ5_K b{};
  b.d = f2h(0.25f);
  b.dmin = f2h(0.5f);
  for (int j = 0; j < 8; ++j) pack_k_scale(b.scales, j, 9 + 6 * j, 50 - 5 * j);
  // 5-bit q of value v: (v * 13 + 5) % 32. Value v = 64c + 32h + i: low 4 bits in nibble h of qs[32c + i], the
  // 5th bit as bit 2c + h of qh[i].
  auto q_of = [](int v) { return (v * 13 + 5) % 32; };
  for (int v = 0; v < 256; ++v) {
    const int c = v / 64, h = (v % 64) / 32, i = v % 32;
    b.qs[32 * c + i] = static_cast<uint8_t>(b.qs[32 * c + i] | (q_of(v) & 15) << (4 * h));
    b.qh[i] = static_cast<uint8_t>(b.qh[i] | (q_of(v) >> 4) << (2 * c + h));
  }
  std::vector<float> y(256);
  dequantize(BlockType::kQ5_K, reinterpret_cast<const uint8_t*>(&b), y.data(), 256);
  for (int v = 0; v < 256; ++v) {
    const int j = v / 32;
    const float want =
        0.25f * static_cast<float>(9 + 6 * j) * static_cast<float>(q_of(v)) - 0.5f * static_cast<float>(50 - 5 * j);
    ASSERT_EQ(y[static_cast<size_t>(v)], want) << v;
  }
}

TEST(QuantBlocks, HandBuiltQ4_K) {
  BlockQ4_K b{};
  b.d = f2h(0.5f);
  b.dmin = f2h(0.25f);
  // Sub-block j gets scale sc = 10 + 7j and min m = 40 - 3j (sub-blocks 4..7 need the high bits: sc >= 16, m >= 16).
  for (int j = 0; j < 8; ++j) pack_k_scale(b.scales, j, 10 + 7 * j, 40 - 3 * j);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((i * 7) % 16) << 4);
  std::vector<float> y(256);
  dequantize(BlockType::kQ4_K, reinterpret_cast<const uint8_t*>(&b), y.data(), 256);
  for (int v = 0; v < 256; ++v) {
    const int chunk = v / 64, i = v % 32, j = v / 32;  // sub-block j; byte 32 * chunk + i
    const uint8_t byte = b.qs[32 * chunk + i];
    const int q = (v % 64) < 32 ? byte & 15 : byte >> 4;
    const float want =
        0.5f * static_cast<float>(10 + 7 * j) * static_cast<float>(q) - 0.25f * static_cast<float>(40 - 3 * j);
    ASSERT_EQ(y[static_cast<size_t>(v)], want) << v;
  }
}

TEST(QuantBlocks, HandBuiltQ6_K) {
  BlockQ6_K b{};
  b.d = f2h(0.125f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? -(s + 1) : s + 1);
  // 6-bit q of value v: (v * 37) % 64, packed as the layout says.
  auto q_of = [](int v) { return (v * 37) % 64; };
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int base = 128 * h;
      const int q0 = q_of(base + l), q1 = q_of(base + l + 32), q2 = q_of(base + l + 64), q3 = q_of(base + l + 96);
      b.ql[64 * h + l] = static_cast<uint8_t>((q0 & 15) | (q2 & 15) << 4);
      b.ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 15) | (q3 & 15) << 4);
      b.qh[32 * h + l] = static_cast<uint8_t>(q0 >> 4 | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
    }
  std::vector<float> y(256);
  dequantize(BlockType::kQ6_K, reinterpret_cast<const uint8_t*>(&b), y.data(), 256);
  for (int v = 0; v < 256; ++v)
    ASSERT_EQ(y[static_cast<size_t>(v)],
              0.125f * static_cast<float>(b.scales[v / 16]) * static_cast<float>(q_of(v) - 32))
        << v;
}

std::vector<float> test_values(int64_t n, uint32_t seed) {  // n >= 1280
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = g(rng) * (1.0f + static_cast<float>((i / 256) % 5));  // varying block scales
  x[7] = 9.0f, x[300] = -12.0f, x[600] = 0.0f;                                                 // outliers
  for (int i = 0; i < 256; ++i) x[1024 + i] = 0.0f;  // an all-zero super-block
  return x;
}

// Every x̂ is the level (among `levels` of its group) nearest to x, up to fp32 rounding of the level arithmetic.
// slack: how far the quantizer's own rounding grid may sit from the stored levels.
void expect_nearest(const std::vector<float>& x, const std::vector<float>& y, int64_t i,
                    const std::vector<float>& levels, float slack = 0.0f) {
  float best = INFINITY;
  for (float l : levels) best = std::min(best, std::fabs(x[i] - l));
  float span = 0.0f;
  for (float l : levels) span = std::max(span, std::fabs(l));
  ASSERT_LE(std::fabs(x[i] - y[i]), best + slack + 4e-7f * (span + std::fabs(x[i])))
      << "value " << i << " x " << x[i] << " got " << y[i];
}

TEST(QuantBlocks, Q8_0Q4_0Q5_0RoundToNearestLevel) {
  const std::vector<float> x = test_values(2048, 1);
  for (BlockType t : {BlockType::kQ8_0, BlockType::kQ4_0, BlockType::kQ5_0}) {
    const BlockInfo bi = block_info(t);
    std::vector<uint8_t> q(static_cast<size_t>(x.size() / 32 * bi.bytes));
    std::vector<float> y(x.size());
    quantize(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
    dequantize(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t b = 0; b < x.size() / 32; ++b) {
      uint16_t dh;
      std::memcpy(&dh, q.data() + b * bi.bytes, 2);
      const float d = h2f(dh);
      std::vector<float> levels;
      if (t == BlockType::kQ8_0) {
        for (int k = -127; k <= 127; ++k) levels.push_back(d * static_cast<float>(k));
      } else {
        const int half = t == BlockType::kQ4_0 ? 8 : 16;
        for (int k = 0; k < 2 * half; ++k) levels.push_back(d * static_cast<float>(k - half));
      }
      // These quantizers round x / d with the fp32 d (as ggml's do) and store d as fp16, which moves level k by
      // up to |k d| 2^-11 <= amax 2^-11 (the block's amax sits at 127 / 8 / 16 units): the chosen level can be that
      // much (twice, for the two neighbours) farther than the nearest stored one.
      const float amax = std::fabs(d) * (t == BlockType::kQ8_0 ? 127.0f : t == BlockType::kQ4_0 ? 8.0f : 16.0f);
      for (size_t j = 0; j < 32; ++j) {
        const int64_t i = static_cast<int64_t>(b * 32 + j);
        if (std::fabs(x[i]) <= amax * (1.0f - 1.0f / 1024)) expect_nearest(x, y, i, levels, 2.0f * amax / 2048);
        ASSERT_LE(std::fabs(x[i] - y[i]), std::fabs(d) * (t == BlockType::kQ8_0 ? 0.5f : 1.0f) + amax / 1024) << i;
      }
    }
  }
}

// Q5_1 rounds (x - min) / d with the fp32 d and min and stores both as fp16, which moves level k by up to
// (k |d| + |m|) 2^-11: the chosen level can be twice that farther than the nearest stored one. Values outside
// [min, max] do not exist (the block's own extremes set them).
TEST(QuantBlocks, Q5_1RoundsToNearestLevel) {
  const std::vector<float> x = test_values(2048, 4);
  std::vector<uint8_t> q(2048 / 32 * 24);
  std::vector<float> y(2048);
  quantize(BlockType::kQ5_1, x.data(), q.data(), 2048);
  dequantize(BlockType::kQ5_1, q.data(), y.data(), 2048);
  double err2 = 0, sig2 = 0;
  for (int64_t b = 0; b < 64; ++b) {
    const auto* blk = reinterpret_cast<const BlockQ5_1*>(q.data() + b * 24);
    const float d = h2f(blk->d), m = h2f(blk->m);
    std::vector<float> levels;
    for (int k = 0; k < 32; ++k) levels.push_back(d * static_cast<float>(k) + m);
    const float slack = 2.0f * (31.0f * std::fabs(d) + std::fabs(m)) / 2048;
    for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
      expect_nearest(x, y, i, levels, slack);
      err2 += (x[i] - y[i]) * (x[i] - y[i]), sig2 += x[i] * x[i];
    }
  }
  // 5 bits over the block's range (~4.4 sigma for 32 Gaussian values): step ~0.14 sigma, NMSE ~step^2 / 12 = 0.0017.
  EXPECT_LT(err2 / sig2, 0.004);
}

// Q4_K and Q5_K (B, 16 or 32 levels per sub-block of 32): every value on the nearest level of its sub-block; the
// NMSE under nmse_max.
template <typename B>
void expect_k_affine_nearest(BlockType t, int levels_per_sub, uint32_t seed, double nmse_max) {
  const std::vector<float> x = test_values(2048, seed);
  std::vector<uint8_t> q(2048 / 256 * sizeof(B));
  std::vector<float> y(2048);
  quantize(t, x.data(), q.data(), 2048);
  dequantize(t, q.data(), y.data(), 2048);
  double err2 = 0, sig2 = 0;
  for (int64_t sb = 0; sb < 8; ++sb) {
    const auto* b = reinterpret_cast<const B*>(q.data()) + sb;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      q4k_scale_min(j, b->scales, sc, m);
      std::vector<float> levels;
      for (int k = 0; k < levels_per_sub; ++k)
        levels.push_back(h2f(b->d) * static_cast<float>(sc) * static_cast<float>(k) -
                         h2f(b->dmin) * static_cast<float>(m));
      for (int i = 0; i < 32; ++i) {
        const int64_t v = sb * 256 + j * 32 + i;
        if (sc > 0) expect_nearest(x, y, v, levels);
        err2 += (x[v] - y[v]) * (x[v] - y[v]), sig2 += x[v] * x[v];
      }
    }
  }
  for (int i = 1024; i < 1280; ++i) EXPECT_EQ(y[i], 0.0f);
  EXPECT_LT(err2 / sig2, nmse_max);
}

// 4 bits over a 32-value range of ~4.4 sigma (Gaussian): step ~0.29 sigma, uniform rounding error step^2/12,
// NMSE ~0.007; the 6-bit scales, the clipped extremes and the outliers at most double it. Q5_K: twice the
// levels, a quarter of that NMSE (0.0017), at most doubled the same way.
TEST(QuantBlocks, Q4_KAndQ5_KRoundToNearestLevelOfTheirSubBlock) {
  expect_k_affine_nearest<BlockQ4_K>(BlockType::kQ4_K, 16, 2, 0.015);
  expect_k_affine_nearest<BlockQ5_K>(BlockType::kQ5_K, 32, 5, 0.004);
}

TEST(QuantBlocks, Q6_KRoundsToNearestLevelOfItsSubBlock) {
  const std::vector<float> x = test_values(2048, 3);
  std::vector<uint8_t> q(2048 / 256 * 210);
  std::vector<float> y(2048);
  quantize(BlockType::kQ6_K, x.data(), q.data(), 2048);
  dequantize(BlockType::kQ6_K, q.data(), y.data(), 2048);
  double err2 = 0, sig2 = 0;
  for (int64_t sb = 0; sb < 8; ++sb) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(q.data() + sb * 210);
    for (int s = 0; s < 16; ++s) {
      const float ds = h2f(b->d) * static_cast<float>(b->scales[s]);
      std::vector<float> levels;
      for (int k = -32; k < 32; ++k) levels.push_back(ds * static_cast<float>(k));
      for (int i = 0; i < 16; ++i) {
        const int64_t v = sb * 256 + s * 16 + i;
        if (ds != 0.0f) expect_nearest(x, y, v, levels);
        err2 += (x[v] - y[v]) * (x[v] - y[v]), sig2 += x[v] * x[v];
      }
    }
  }
  for (int i = 1024; i < 1280; ++i) EXPECT_EQ(y[i], 0.0f);
  // 6 bits symmetric over +-amax of 16 values (~1.8 sigma): step ~0.057 sigma, NMSE ~3e-4; int8 scales add <1%.
  EXPECT_LT(err2 / sig2, 1e-3);
}

// The quantizers write llama-quantize's bytes: every type on a fixed input (quant_golden_input.h, the same values on
// every platform) hashes to what llama.cpp's reference quantizers (ggml's quantize_row_*_ref, llama-quantize
// without an importance matrix) give on it. The constants come from scripts/quant_reference_hashes.sh, run against
// the llama.cpp build of 2026-08 (unslothai/llama.cpp) on x86-64. Every CI build (native AVX-512, AVX2, scalar,
// aarch64 under qemu) checks them, so a platform whose arithmetic moves one rounding fails here.
TEST(QuantBlocks, QuantizersMatchLlamaQuantizeBytes) {
  namespace g = quant_golden;
  const std::vector<float> x = g::values();
  const struct {
    BlockType t;
    uint64_t want;
  } cases[] = {{BlockType::kQ8_0, 0xebb3537a04c4028eull}, {BlockType::kQ4_0, 0xafabc692394eb9caull},
               {BlockType::kQ5_0, 0x2d76cb88702c854dull}, {BlockType::kQ5_1, 0xb3a3c9b054aaeb24ull},
               {BlockType::kQ4_K, 0x17c1b56b18171b17ull}, {BlockType::kQ5_K, 0x79563740975b2882ull},
               {BlockType::kQ6_K, 0x623178edd92378bcull}};
  for (const auto& c : cases) {
    const BlockInfo bi = block_info(c.t);
    std::vector<uint8_t> q(static_cast<size_t>(g::kValues / bi.values * bi.bytes));
    quantize(c.t, x.data(), q.data(), g::kValues);
    EXPECT_EQ(g::fnv1a(q.data(), q.size()), c.want) << bi.name;
  }
}

// The SIMD int8 vectors (simd I8/I32) equal plain integer loops, at the extremes of their ranges too.
TEST(QuantDot, SimdPrimitivesAreExact) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> s8(-128, 127), b8(-127, 127), u7(0, 127), u6(0, 63), u8(0, 255);
  for (int rep = 0; rep < 300; ++rep) {
    alignas(32) int8_t a[32], b[32], sc[8];
    alignas(32) uint8_t u[32], v[32], p[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = static_cast<int8_t>(rep == 0 ? -128 : s8(rng));
      b[i] = static_cast<int8_t>(rep == 0 ? (i % 2 ? 127 : -127) : b8(rng));
      u[i] = static_cast<uint8_t>(rep == 0 ? 127 : u7(rng));
      v[i] = static_cast<uint8_t>(rep == 0 ? 63 : u6(rng));
    }
    for (int i = 0; i < 16; ++i) p[i] = static_cast<uint8_t>(u8(rng));
    for (int i = 0; i < 8; ++i) sc[i] = static_cast<int8_t>(rep == 0 ? -128 : s8(rng));
    const auto bits = static_cast<uint32_t>(rng());
    const int si = rep % 8, sj = (rep * 3 + 1) % 8;
    int32_t ss = 0, us = 0, scaled = 0;
    for (int i = 0; i < 32; ++i) {
      ss += a[i] * b[i], us += u[i] * a[i];
      scaled += v[i] * a[i] * (i < 16 ? sc[si] : sc[sj]);
    }
    const simd::I32 z = simd::zero_i32();
    const simd::I8 va = simd::load_i8(a), vb = simd::load_i8(b), vu = simd::load_i8(u), vv = simd::load_i8(v);
    ASSERT_EQ(simd::reduce_i32(simd::dot_ss(z, va, vb)), ss) << simd::kName << " rep " << rep;
    ASSERT_EQ(simd::reduce_i32(simd::dot_us(z, vu, va)), us) << simd::kName << " rep " << rep;
    ASSERT_EQ(simd::reduce_i32(simd::dot_us_scaled(z, vv, va, simd::scale_pair(simd::load_scales(sc), si, sj))), scaled)
        << simd::kName << " rep " << rep;
    // The scale-times-bsum helpers (int16 b up to 16 x 127 in magnitude).
    alignas(32) int16_t bs[16];
    for (int i = 0; i < 16; ++i) bs[i] = static_cast<int16_t>(rep == 0 ? -2032 : (s8(rng) * 16));
    int32_t m8 = 0, m16 = 0;
    for (int i = 0; i < 8; ++i) m8 += p[i] * bs[i];
    for (int i = 0; i < 16; ++i) m16 += a[i] * bs[i];
    ASSERT_EQ(simd::reduce_i32(simd::madd_u8_i16x8(p, bs)), m8) << rep;
    const simd::I32 p16 = simd::madd_s8_i16x16(a, bs);
    ASSERT_EQ(simd::reduce_i32(simd::sub_i32(p16, simd::shl_i32<5>(p16))), -31 * m16) << rep;
    // Byte-wise helpers, read back through a dot product with unit vectors.
    alignas(32) uint8_t got[32];
    auto bytes_of = [&](simd::I8 x) {
      for (int i = 0; i < 32; ++i) {
        alignas(32) int8_t e[32] = {};
        e[i] = 1;
        got[i] = static_cast<uint8_t>(simd::reduce_i32(simd::dot_ss(z, x, simd::load_i8(e))));
      }
    };
    bytes_of(simd::nib16(p));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(got[i], i < 16 ? p[i] & 15 : p[i - 16] >> 4) << i;
    bytes_of(simd::bit_bytes(bits));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(got[i], (bits >> i) & 1 ? 0xFF : 0) << i;
    bytes_of(simd::or8(simd::shr8<3>(vu), simd::and8(simd::shl8<5>(vv), 0xE0)));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(got[i], (u[i] >> 3) | ((v[i] << 5) & 0xE0)) << i;
    bytes_of(simd::andnot8(simd::bit_bytes(bits), 0xF0));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(got[i], (bits >> i) & 1 ? 0 : 0xF0) << i;
    bytes_of(simd::sub8(vv, 16));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(static_cast<int8_t>(got[i]), v[i] - 16) << i;
  }
}

// The activation quantizers on hand-made blocks: llama.cpp's Q8_0 form (fp16 scale amax / 127, q = x 127 / amax
// rounded half to even) and Q8_K form (d = max / -127 for the first value of largest magnitude, bsums per 16).
TEST(QuantDot, ActivationFormsFollowLlamaCpp) {
  std::vector<float> x(256, 0.0f);
  x[3] = 127.0f, x[4] = -127.0f;  // the first of two equal magnitudes sets the sign of the Q8_K scale
  x[10] = 0.5f, x[11] = 1.5f, x[12] = 2.5f, x[13] = -2.5f, x[40] = 1.0f, x[41] = 0.25f;
  Q8Acts a;
  quantize_acts(x.data(), 256, a);
  ASSERT_EQ(a.forms, unsigned{kActsAll});
  // Q8_0 form, block 0: amax 127, so q = x rounded half to even, d = 1.
  const int8_t want0[] = {127, -127, 0, 2, 2, -2};
  const int at[] = {3, 4, 10, 11, 12, 13};
  for (int k = 0; k < 6; ++k) EXPECT_EQ(a.q[static_cast<size_t>(at[k])], want0[k]) << at[k];
  EXPECT_EQ(a.d[0], 1.0f);
  // Block 1: amax 1, d = fp16(1 / 127) (not 1 / 127 itself), q = x * 127 rounded.
  EXPECT_EQ(a.d[1], h2f(f2h(1.0f / 127.0f)));
  EXPECT_NE(a.d[1], 1.0f / 127.0f);
  EXPECT_EQ(a.q[40], 127);
  EXPECT_EQ(a.q[41], 32);  // 31.75
  // Q8_K form: max = 127 (x[3]), iscale = -127 / max = -1, so q = -x rounded half to even, d = -1.
  EXPECT_EQ(a.dk[0], -1.0f);
  const int8_t wantk[] = {-127, 127, 0, -2, -2, 2};
  for (int k = 0; k < 6; ++k) EXPECT_EQ(a.qk[static_cast<size_t>(at[k])], wantk[k]) << at[k];
  EXPECT_EQ(a.qk[40], -1);
  EXPECT_EQ(a.qk[41], 0);
  EXPECT_EQ(a.bsums[0], -127 + 127 + 0 - 2 - 2 + 2);  // values 0..15
  EXPECT_EQ(a.bsums[1], 0);
  EXPECT_EQ(a.bsums[2], -1);  // values 32..47
  // Only the asked form; a Q4_K row then refuses Q8_0-only activations.
  Q8Acts b;
  quantize_acts(x.data(), 256, kActsQ8_0, b);
  std::vector<uint8_t> row(144);
  EXPECT_ANY_THROW(dot_row(BlockType::kQ4_K, row.data(), b));
  EXPECT_ANY_THROW(quantize_acts(x.data(), 96, kActsQ8_K, b));
}

// dot_row against the dequantized row in double: the difference is the activation rounding alone, at most
// sum_i |w_i| e_i with e_i = acts_rounding_bound (d_a / 2 for Q8_K, fp16 scale included for Q8_0), plus fp32
// accumulation (n 2^-24 sum |w x|). dot_rows gives dot_row's bits.
TEST(QuantDot, MatchesDequantizedRowWithinActivationRounding) {
  const int64_t n = 2048, rows = 7;
  const std::vector<float> x = test_values(n, 11), w_src = test_values(n * rows, 12);
  Q8Acts a;
  quantize_acts(x.data(), n, a);
  for (const TypeTraits& row : kTypes) {  // every row of the type table
    const BlockType t = row.type;
    const BlockInfo bi = block_info(t);
    const int64_t row_bytes = n / bi.values * bi.bytes;
    std::vector<uint8_t> q(static_cast<size_t>(rows * row_bytes));
    quantize(t, w_src.data(), q.data(), n * rows);
    std::vector<float> many(static_cast<size_t>(rows));
    dot_rows(t, q.data(), row_bytes, rows, a, many.data());
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> w(static_cast<size_t>(n));
      dequantize(t, q.data() + r * row_bytes, w.data(), n);
      double ref = 0, bound = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += double(w[i]) * double(x[i]);
        bound += std::fabs(double(w[i])) * acts_rounding_bound(a, t, i);
        mag += std::fabs(double(w[i]) * double(x[i]));
      }
      // Q5_1's offset term m s_a uses s_a = fp16((amax / 127) sum q) (Q8_1's s), not fp16(amax / 127) sum q: both
      // roundings, 2^-11 each of d_a sum |q| (d_a itself within 2^-10 of amax / 127).
      if (t == BlockType::kQ5_1)
        for (int64_t b = 0; b < n / 32; ++b) {
          const auto* blk = reinterpret_cast<const BlockQ5_1*>(q.data() + r * row_bytes) + b;
          double sq = 0;
          for (int64_t i = 32 * b; i < 32 * b + 32; ++i) sq += std::abs(a.q[static_cast<size_t>(i)]);
          bound += std::fabs(double(h2f(blk->m))) * 0x1p-10 * (1.0 + 0x1p-10) * a.d[static_cast<size_t>(b)] * sq;
        }
      const double got = dot_row(t, q.data() + r * row_bytes, a);
      EXPECT_LE(std::fabs(got - ref), bound + double(n) * 0x1p-24 * mag) << bi.name << " row " << r;
      EXPECT_GT(bound, 0.0);
      EXPECT_EQ(many[static_cast<size_t>(r)], static_cast<float>(got)) << bi.name << " row " << r;
    }
  }
}

// dot_tiles_tokens (the batched decode GEMV's tile kernel) against dot_tiles of each token alone: every output the same
// bits, for 1 to 2 kBatchTokens + 1 tokens (more than kBatchTokens run in groups), tokens of different scales.
TEST(QuantDot, TileTokensEqualEachTokenAlone) {
  const int64_t cols = 512, n_tiles = 3, rows = n_tiles * kTileRows, max_tok = 2 * kBatchTokens + 1;
  const std::vector<float> w = test_values(rows * cols, 31);
  for (BlockType t : {BlockType::kQ8_0, BlockType::kQ4_K}) {
    const BlockInfo& bi = block_info(t);
    SCOPED_TRACE(bi.name);
    std::vector<uint8_t> tiles(static_cast<size_t>(rows * cols / bi.values * bi.bytes));
    quantize(t, w.data(), tiles.data(), rows * cols);
    tile_rows(t, tiles.data(), n_tiles, cols);
    std::vector<Q8Acts> acts(static_cast<size_t>(max_tok));
    for (int64_t k = 0; k < max_tok; ++k) {
      std::vector<float> x = test_values(std::max<int64_t>(cols, 1280), 40 + static_cast<uint32_t>(k));
      for (float& v : x) v *= 1.0f + 0.25f * static_cast<float>(k);
      quantize_acts(x.data(), cols, acts[static_cast<size_t>(k)]);
    }
    for (int64_t n_tok = 1; n_tok <= max_tok; ++n_tok) {
      const int64_t ldy = rows + 5;  // a stride past the rows: outputs land at k ldy + row
      std::vector<float> got(static_cast<size_t>(n_tok * ldy), -1.0f), one(static_cast<size_t>(rows));
      dot_tiles_tokens(t, tiles.data(), n_tiles, acts.data(), n_tok, got.data(), ldy);
      for (int64_t k = 0; k < n_tok; ++k) {
        dot_tiles(t, tiles.data(), n_tiles, acts[static_cast<size_t>(k)], one.data());
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(got[static_cast<size_t>(k * ldy + r)], one[static_cast<size_t>(r)])
              << n_tok << " tokens: token " << k << " row " << r;
        for (int64_t r = rows; r < ldy && k + 1 < n_tok; ++r) ASSERT_EQ(got[static_cast<size_t>(k * ldy + r)], -1.0f);
      }
    }
  }
}

// ---- the type table (framework/quant/types.h): every row, so a new row is covered without editing these ----------

// A row's name and GGUF id find it; block_info is the row; quantize writes exactly block_bytes per block_values
// values (guard bytes after the output stay as they were); the row-tile flag says whether the tile kernels take it.
TEST(QuantTable, RowsDescribeTheirBlocks) {
  EXPECT_EQ(find_type("q9_9"), std::nullopt);
  EXPECT_EQ(find_ggml_type(0), std::nullopt);  // F32 is no block type
  for (const TypeTraits& r : kTypes) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(&traits(r.type), &r);
    EXPECT_EQ(find_type(r.name), r.type);
    std::string upper = r.name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(find_type(upper), r.type);
    EXPECT_EQ(find_ggml_type(r.ggml_type), r.type);
    EXPECT_EQ(block_info(r.type).values, r.block_values);
    EXPECT_EQ(block_info(r.type).bytes, r.block_bytes);
    const int64_t n = 2 * r.block_values, guard = 64;
    const std::vector<float> x = test_values(std::max<int64_t>(n, 1280), 21);
    std::vector<uint8_t> q(static_cast<size_t>(2 * r.block_bytes + guard), 0xA5);
    quantize(r.type, x.data(), q.data(), n);
    for (int64_t i = 2 * r.block_bytes; i < 2 * r.block_bytes + guard; ++i)
      ASSERT_EQ(q[static_cast<size_t>(i)], 0xA5) << "byte " << i << " past 2 blocks was written";
    EXPECT_ANY_THROW(quantize(r.type, x.data(), q.data(), r.block_values + 16));  // not whole blocks
    // Row tiles: kTileRows rows of 1 block each become a tile, and tile_row gives each row's blocks back.
    std::vector<uint8_t> rows(static_cast<size_t>(kTileRows * r.block_bytes));
    std::vector<float> xr(static_cast<size_t>(kTileRows * r.block_values));
    for (size_t i = 0; i < xr.size(); ++i) xr[i] = x[i % x.size()] * (1.0f + static_cast<float>(i % 7));
    quantize(r.type, xr.data(), rows.data(), static_cast<int64_t>(xr.size()));
    std::vector<uint8_t> tiles = rows, back(static_cast<size_t>(r.block_bytes));
    EXPECT_EQ(has_row_tiles(r.type), takes(r.type, kExecCpuRowTiles));
    if (!has_row_tiles(r.type)) {
      EXPECT_ANY_THROW(tile_rows(r.type, tiles.data(), 1, r.block_values));
      continue;
    }
    tile_rows(r.type, tiles.data(), 1, r.block_values);
    for (int l = 0; l < kTileRows; ++l) {
      tile_row(r.type, tiles.data(), r.block_values, l, back.data());
      ASSERT_EQ(0, std::memcmp(back.data(), rows.data() + l * r.block_bytes, back.size())) << "tile row " << l;
    }
  }
}

// dequantize(quantize(x)) per block of block_values values: nearest-level rounding on a grid of 2^bits levels
// spanning at most [-amax, amax] (amax: the block's largest |x|) is off by at most half a step, step = 2 amax /
// (2^bits - 1). The bound allows a whole step: the other half covers the fp16 scales, the K types' 6-bit (8-bit for
// Q6_K) sub-block scales and mins, and a value clipped to the end level (Q4_0 / Q5_0: the grid ends at 7/8 / 15/16
// of amax on the side opposite the largest value, an error of amax / 8 = 15/16 step / amax / 16 = 31/32 step).
TEST(QuantTable, RoundTripWithinOneStepOfTheLevelGrid) {
  const int64_t n = 4096;
  const std::vector<float> x = test_values(n, 22);
  for (const TypeTraits& r : kTypes) {
    SCOPED_TRACE(r.name);
    std::vector<uint8_t> q(static_cast<size_t>(n / r.block_values * r.block_bytes));
    std::vector<float> y(static_cast<size_t>(n));
    quantize(r.type, x.data(), q.data(), n);
    dequantize(r.type, q.data(), y.data(), n);
    double worst = 0;  // the largest error as a fraction of the bound
    for (int64_t b = 0; b < n / r.block_values; ++b) {
      double amax = 0;
      for (int64_t i = b * r.block_values; i < (b + 1) * r.block_values; ++i)
        amax = std::max(amax, std::fabs(double(x[i])));
      const double step = 2 * amax / double((1 << r.bits) - 1);
      for (int64_t i = b * r.block_values; i < (b + 1) * r.block_values; ++i) {
        const double e = std::fabs(double(y[i]) - double(x[i]));
        ASSERT_LE(e, step) << "value " << i << " x " << x[i] << " got " << y[i];
        if (step > 0) worst = std::max(worst, e / step);
      }
    }
    EXPECT_GT(worst, 0.0);  // the blocks round something
    std::printf("[quant table] %s: largest round-trip error %.3f steps\n", r.name, worst);
  }
}

}  // namespace
}  // namespace anelab::quant
