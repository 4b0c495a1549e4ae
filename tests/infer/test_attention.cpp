// CPU attention (infer/cpu_attention.h), both paths, against a double-precision loop: odd token counts and
// start positions (tiles and 64-key blocks cut anywhere), sliding windows narrower and wider than a tile,
// grouped-query heads, head_dim 64, 128 and 256, 1 and 2 threads, workspaces reused across shapes; with an
// fp32 and an fp16 KV cache (the fp16 one checked against the double loop over its fp16-rounded values, and
// for the same bits as the fp32 kernels over those values: the kernels widen each element, then do fp32
// arithmetic in the same order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "framework/core/fp16.h"
#include "infer/cpu_attention.h"

namespace anelab::infer {
namespace {

struct Case {
  int64_t n_heads, n_kv_heads, head_dim, window, pos, n;
};

std::vector<float> normal(size_t count, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(count);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Checks out [n, q_dim] against attention in double precision. Per (token, head) the bound is the fp32
// error of the computation, to first order in u = 2^-24: each score (a head_dim-long fp32 dot product, then
// the scale) is off by <= (hd + 1) u A, A = the largest scale * sum_d |q_d k_d| over the row's keys, which
// moves each softmax weight by up to twice that relatively; exp (~1 ulp), the sum of L weights and the
// reciprocal add (L + 4) u to each weight; the P V sum of L terms adds L u. Relative to max |v| that is
// u (2 (hd + 1) A + 2 L + 4); the bound below doubles it for second-order terms.
void check(const Case& c, const float* q, const float* k, const float* v, const float* out) {
  const int64_t hd = c.head_dim, qd = c.n_heads * hd, kvd = c.n_kv_heads * hd, group = c.n_heads / c.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd)), u = std::ldexp(1.0, -24);
  double vmax = 0;
  for (int64_t i = 0; i < (c.pos + c.n) * kvd; ++i) vmax = std::max(vmax, std::abs(static_cast<double>(v[i])));
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t p = c.pos + i, t0 = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0, g = h / group;
      const float* qi = q + i * qd + h * hd;
      std::vector<double> s(static_cast<size_t>(p + 1 - t0));
      double a_max = 0, m = -1e300, sum = 0;
      for (int64_t t = t0; t <= p; ++t) {
        double dot = 0, abs_dot = 0;
        for (int64_t d = 0; d < hd; ++d) {
          dot += static_cast<double>(qi[d]) * k[t * kvd + g * hd + d];
          abs_dot += std::abs(static_cast<double>(qi[d]) * k[t * kvd + g * hd + d]);
        }
        s[static_cast<size_t>(t - t0)] = dot * scale;
        a_max = std::max(a_max, abs_dot * scale);
        m = std::max(m, dot * scale);
      }
      for (double& x : s) sum += (x = std::exp(x - m));
      const double len = static_cast<double>(s.size());
      const double tol = 2 * vmax * u * (2 * (static_cast<double>(hd) + 1) * a_max + 2 * len + 4);
      for (int64_t d = 0; d < hd; ++d) {
        double ref = 0;
        for (int64_t t = t0; t <= p; ++t) ref += s[static_cast<size_t>(t - t0)] / sum * v[t * kvd + g * hd + d];
        const double got = out[i * qd + h * hd + d];
        ASSERT_LE(std::abs(got - ref), tol)
            << "token " << i << " head " << h << " dim " << d << " (n " << c.n << ", pos " << c.pos << ", window "
            << c.window << ", head_dim " << hd << ", kv heads " << c.n_kv_heads << ")";
      }
    }
}

// The cache rows as the kernels read them: the fp32 values, or their fp16 bits (kept in `bits`).
KvView cache_view(const std::vector<float>& k, const std::vector<float>& v, KvType type,
                  std::vector<half_bits> (&bits)[2]) {
  if (type == KvType::kF32) return {k.data(), v.data(), KvType::kF32};
  for (int i = 0; i < 2; ++i) {
    const std::vector<float>& x = i == 0 ? k : v;
    bits[i].resize(x.size());
    float_to_half(x.data(), bits[i].data(), x.size());
  }
  return {bits[0].data(), bits[1].data(), KvType::kF16};
}

std::vector<float> fp16_rounded(std::vector<float> x) {
  round_fp16_inplace(x.data(), x.size());
  return x;
}

void run_cases(bool blocked, KvType type) {
  const Case cases[] = {
      {4, 4, 64, 0, 0, 8},      // one partial tile, keys in the first block
      {12, 12, 64, 0, 0, 37},   // tiles of every length, the last one partial
      {14, 2, 64, 0, 5, 29},    // GQA 7:1, a start position inside a block
      {8, 4, 128, 0, 17, 23},   // head_dim 128
      {4, 1, 128, 0, 63, 66},   // keys crossing 64-key blocks from the first tile on
      {4, 2, 64, 16, 40, 45},   // a window shorter than the context: the first key blocks skipped
      {4, 2, 128, 5, 3, 19},    // a window narrower than a tile's span of positions
      {2, 1, 64, 1, 9, 11},     // window 1: each token sees itself only
      {6, 3, 64, 200, 70, 75},  // a window wider than every row's history
      {8, 4, 256, 12, 30, 41},  // head_dim 256 with a window (Gemma 3's sliding layers)
      {12, 12, 64, 0, 0, 8},    // a short call after long ones: workspaces reused
  };
  CpuAttention attn;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    uint32_t seed = 1;
    for (const Case& c : cases) {
      const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                             c.window};
      const int64_t np = c.pos + c.n;
      // q, k of spread 2 so the softmax is peaked as in trained models, not nearly uniform.
      const auto q = normal(static_cast<size_t>(c.n * s.q_dim()), seed++, 2.0f);
      // k, v: the values the cache holds (fp16-representable with an fp16 cache).
      auto k = normal(static_cast<size_t>(np * s.kv_dim()), seed++, 2.0f);
      auto v = normal(static_cast<size_t>(np * s.kv_dim()), seed++, 1.0f);
      if (type == KvType::kF16) k = fp16_rounded(k), v = fp16_rounded(v);
      std::vector<half_bits> bits[2];
      const KvView kv = cache_view(k, v, type, bits);
      // One guard row past the output: nothing may be written there.
      std::vector<float> out(static_cast<size_t>((c.n + 1) * s.q_dim()), std::numeric_limits<float>::quiet_NaN());
      const float guard = 12345.0f;
      std::fill(out.begin() + c.n * s.q_dim(), out.end(), guard);
      auto attend = [&](const KvView& view, std::vector<float>& o) {
        if (blocked)
          attn.blocked(pool, s, q.data(), view, c.pos, c.n, o.data());
        else
          attn.rows(pool, s, q.data(), view, c.pos, c.n, o.data());
      };
      attend(kv, out);
      check(c, q.data(), k.data(), v.data(), out.data());
      for (int64_t d = c.n * s.q_dim(); d < (c.n + 1) * s.q_dim(); ++d) ASSERT_EQ(out[static_cast<size_t>(d)], guard);
      if (type == KvType::kF16) {  // the fp32 kernels over the same values: the same bits
        std::vector<float> out32(out.size());
        attend({k.data(), v.data(), KvType::kF32}, out32);
        for (int64_t d = 0; d < c.n * s.q_dim(); ++d)
          ASSERT_EQ(out[static_cast<size_t>(d)], out32[static_cast<size_t>(d)])
              << "element " << d << " (n " << c.n << ", pos " << c.pos << ")";
      }
    }
  }
}

TEST(InferAttention, BlockedMatchesDoubleReference) { run_cases(true, KvType::kF32); }
TEST(InferAttention, RowsMatchDoubleReference) { run_cases(false, KvType::kF32); }
TEST(InferAttention, BlockedFp16CacheMatchesDoubleReference) { run_cases(true, KvType::kF16); }
TEST(InferAttention, RowsFp16CacheMatchesDoubleReference) { run_cases(false, KvType::kF16); }

TEST(InferAttention, KvTypeNames) {
  EXPECT_EQ(parse_kv_type("f32"), KvType::kF32);
  EXPECT_EQ(parse_kv_type("f16"), KvType::kF16);
  EXPECT_STREQ(kv_type_name(KvType::kF16), "f16");
  EXPECT_EQ(kv_type_bytes(KvType::kF16), 2);
  try {
    parse_kv_type("f8");
    FAIL() << "f8 accepted";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "[infer] unknown --kv-type 'f8' (choices: f32, f16)");
  }
}

TEST(InferAttention, BlockedFits) {
  EXPECT_TRUE(CpuAttention::blocked_fits(8, 64));
  EXPECT_TRUE(CpuAttention::blocked_fits(512, 128));
  EXPECT_FALSE(CpuAttention::blocked_fits(7, 64));
  EXPECT_TRUE(CpuAttention::blocked_fits(512, 256));
  EXPECT_FALSE(CpuAttention::blocked_fits(64, 96));
  EXPECT_FALSE(CpuAttention::blocked_fits(64, 320));
}

}  // namespace
}  // namespace anelab::infer
