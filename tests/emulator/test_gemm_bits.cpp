// The emulator's GEMM gives the same bits on every host: each C element must equal one chain of fused
// multiply-adds over k in order (std::fma, carried through the plan's k blocks in fp32), whatever the
// SIMD layer's micro-tile (AVX-512 12x32, AVX2/NEON 6x16, scalar 4x8), the task split or the thread
// count. Shapes cover partial micro-tiles in both dims, k blocks (k > 256), transposed operands, a
// packed const A, alpha, bias and the fp16 epilogue. Also: the emulator's vectorised exp against
// std::exp (truncation 5e-9 on |r| <= ln2/2; bound 2 fp32 ulps for the roundings) and its cutoffs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/core/thread_pool.h"
#include "framework/emulator/plan.h"

namespace anelab::emu {
namespace {

struct Case {
  int64_t m, n, k;
  bool ta, tb, packed, bias, round;
  float alpha;
};

// op(A)[i][kk] and op(B)[kk][j] with A stored [m,k] (or [k,m] when ta) and B [k,n] (or [n,k] when tb).
std::vector<float> reference(const Case& c, const GemmPlan& g, const std::vector<float>& a, const std::vector<float>& b,
                             const std::vector<float>& bias) {
  std::vector<float> out(static_cast<size_t>(c.m * c.n));
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float av = c.ta ? a[static_cast<size_t>(kk * c.m + i)] : a[static_cast<size_t>(i * c.k + kk)];
        const float bv = c.tb ? b[static_cast<size_t>(j * c.k + kk)] : b[static_cast<size_t>(kk * c.n + j)];
        acc = std::fma(av, bv, acc);
      }
      (void)g;
      float v = acc;
      if (c.alpha != 1.0f) v *= c.alpha;
      if (c.bias) v += bias[static_cast<size_t>(i)];
      out[static_cast<size_t>(i * c.n + j)] = c.round ? round_fp16(v) : v;
    }
  return out;
}

void run_case(const Case& c, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(c.m * 131 + c.n * 7 + c.k));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(c.m * c.k)), b(static_cast<size_t>(c.k * c.n)),
      bias(static_cast<size_t>(c.m));
  for (auto& x : a) x = round_fp16(d(rng));
  for (auto& x : b) x = round_fp16(d(rng));
  for (auto& x : bias) x = round_fp16(d(rng));
  GemmPlan g;
  g.m = c.m, g.n = c.n, g.k = c.k, g.ta = c.ta, g.tb = c.tb;
  g.lda = c.ta ? c.m : c.k, g.ldb = c.tb ? c.k : c.n, g.ldc = c.n;
  g.a_off = {0}, g.b_off = {0}, g.c_off = {0};
  g.round_fp16 = c.round, g.alpha = c.alpha;
  if (c.bias) g.bias_off = {0};
  plan_gemm(g);
  if (c.packed) prepack_gemm_a(g, a.data());
  ThreadPool pool(threads);
  ExecCtx ctx;
  ctx.threads = threads, ctx.pool = threads > 1 ? &pool : nullptr;
  AlignedFloats ws(static_cast<size_t>(threads) * (g.ws_a + g.ws_b) + 16);
  for (int t = 0; t < threads; ++t) {
    ctx.ws_a.push_back(ws.data() + static_cast<size_t>(t) * (g.ws_a + g.ws_b));
    ctx.ws_b.push_back(ctx.ws_a.back() + g.ws_a);
  }
  std::vector<float> out(static_cast<size_t>(c.m * c.n), NAN);
  run_gemm(g, a.data(), b.data(), out.data(), ctx, c.bias ? bias.data() : nullptr);
  const auto ref = reference(c, g, a, b, bias);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], ref[i]) << simd::kName << " m=" << c.m << " n=" << c.n << " k=" << c.k << " ta=" << c.ta
                              << " tb=" << c.tb << " packed=" << c.packed << " threads=" << threads << " at " << i;
}

TEST(GemmBits, EqualsInOrderFmaChainOnEveryShape) {
  const Case cases[] = {
      {1, 1, 1, false, false, false, false, false, 1.0f},  {13, 33, 17, false, false, false, false, true, 1.0f},
      {25, 47, 300, false, true, false, true, true, 1.0f}, {31, 70, 600, true, false, true, true, false, 0.125f},
      {64, 96, 64, true, true, false, false, true, 0.3f},  {7, 5, 513, false, false, true, false, true, 1.0f},
      {100, 129, 40, false, true, true, true, true, 1.0f},
  };
  for (const auto& c : cases)
    for (int threads : {1, 2}) run_case(c, threads);
}

TEST(EmulatorExp, MatchesStdExpAndCutoffs) {
  std::vector<float> x;
  for (float v = -90.0f; v <= 88.5f; v += 0.0137f) x.push_back(v);
  std::vector<float> y = x;
  exp_inplace_fp32(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -86.0f) {
      EXPECT_EQ(y[i], 0.0f) << x[i];
      continue;
    }
    const double ref = std::exp(static_cast<double>(x[i]));
    ASSERT_NEAR(y[i] / ref, 1.0, 2.4e-7) << "x=" << x[i];  // 2 fp32 ulps: Horner roundings + the final one
  }
}

}  // namespace
}  // namespace anelab::emu
