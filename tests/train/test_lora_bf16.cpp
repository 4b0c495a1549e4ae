// `train --lora --lora-compute bf16`: the frozen base's products with bf16 operands and fp32 sums.
// - The GEMM (framework/simd/bf16_gemm.h): the native/portable kernels: the AVX512-BF16 kernel bit-equal to the
//   portable one on random data, both equal to the pair chain written out here on the unpacked operands; the
//   instruction's flush of denormals. The AMX kernel (where the CPU has it): within the fp32 sums' bound of the chain
//   (another pair order), and flushing like vdpbf16ps.
// - The products (train/bf16_linalg.h) on fp32, bf16 and Q8_0 weights: against the fp64 product of the exact operands
//   within (2^-7 + 2^-16 + 2 γ_K) Σ|x||w| (each operand rounded to bf16: 2^-8 relative; K fp32 sums: γ_K), and against
//   the fp64 product of the bf16-rounded operands within γ_K Σ|x||w| (the sums alone).
// - The adapter gradients against PyTorch (scripts/lora_reference.py, base_compute bf16: the same bf16 rounding of the
//   base's operands, everything else fp64), and against the fp32 path; a 20-step run whose loss falls like fp32's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/npy.h"
#include "framework/simd/bf16_gemm.h"
#include "models/io/export.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/bf16_linalg.h"
#include "train/cpu_model.h"
#include "train/data.h"
#include "train/frozen_base.h"
#include "train/lora_run.h"
#include "train/parallel.h"
#include "train/trainer.h"

namespace anelab {
namespace {

namespace sd = simd;

// Uniform in (-1, 1) times 2^e with e in [-lo, hi]: values over a few binades, all normal.
float bf16t_value(train::Rng& rng, int lo, int hi) {
  const double u = double(rng.next() >> 11) * 0x1.0p-53 * 2 - 1;
  const int e = int(rng.next() % uint64_t(lo + hi + 1)) - lo;
  return float(std::ldexp(u, e));
}

// One GEMM case: A [M, K] bf16 (rows padded to even), B [K, n] bf16, C [M, n] fp32 start values.
struct Bf16tCase {
  int64_t M, K, n, lda;
  std::vector<uint16_t> a, b, panel;  // b row-major [K, n]
  std::vector<float> c0;
};

Bf16tCase bf16t_case(int64_t M, int64_t K, int64_t n, uint64_t seed) {
  Bf16tCase t{M, K, n, (K + 1) / 2 * 2, {}, {}, {}, {}};
  train::Rng rng{seed};
  t.a.assign(size_t(M * t.lda), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) t.a[size_t(m * t.lda + k)] = sd::round_bf16(bf16t_value(rng, 6, 3));
  std::vector<float> bf(size_t(K * n));
  for (float& v : bf) v = bf16t_value(rng, 6, 3);
  t.b.resize(bf.size());
  for (size_t i = 0; i < bf.size(); ++i) t.b[i] = sd::round_bf16(bf[i]);
  t.panel.assign(size_t(sd::bf16_panel_size(K, n)), 0xFFFF);
  sd::pack_bf16_kn(bf.data(), n, K, n, t.panel.data());
  t.c0.resize(size_t(M * n));
  for (float& v : t.c0) v = bf16t_value(rng, 2, 2);
  return t;
}

std::vector<float> bf16t_run(const Bf16tCase& t, bool accumulate, sd::Bf16Kernel k) {
  std::vector<float> c = t.c0;
  sd::gemm_bf16(t.a.data(), t.lda, t.panel.data(), t.K, c.data(), t.n, t.M, t.n, accumulate, k);
  return c;
}

// The chain of bf16_gemm.h on the unpacked operands: acc = fma(a[2p], b[2p], fma(a[2p+1], b[2p+1], acc)).
std::vector<float> bf16t_chain(const Bf16tCase& t, bool accumulate) {
  std::vector<float> c(t.c0.size());
  for (int64_t m = 0; m < t.M; ++m)
    for (int64_t j = 0; j < t.n; ++j) {
      float acc = accumulate ? t.c0[size_t(m * t.n + j)] : 0.0f;
      for (int64_t k = 0; k < t.K; k += 2) {
        const float a0 = sd::bf16_to_f32(t.a[size_t(m * t.lda + k)]), b0 = sd::bf16_to_f32(t.b[size_t(k * t.n + j)]);
        const float a1 = k + 1 < t.K ? sd::bf16_to_f32(t.a[size_t(m * t.lda + k + 1)]) : 0.0f;
        const float b1 = k + 1 < t.K ? sd::bf16_to_f32(t.b[size_t((k + 1) * t.n + j)]) : 0.0f;
        acc = std::fma(a0, b0, std::fma(a1, b1, acc));
      }
      c[size_t(m * t.n + j)] = acc;
    }
  return c;
}

bool bf16t_same_bits(const std::vector<float>& x, const std::vector<float>& y, int64_t* differ) {
  *differ = 0;
  for (size_t i = 0; i < x.size(); ++i) *differ += std::memcmp(&x[i], &y[i], 4) != 0;
  return *differ == 0;
}

// Tails of every kind: rows past a 6-row tile, column groups past 4, a partial group, odd K, K = 1.
const int64_t kBf16tShapes[][3] = {{1, 1, 1}, {7, 33, 70}, {13, 64, 64}, {6, 255, 17}, {25, 128, 200}, {3, 2, 129}};

TEST(LoraBf16, PortableKernelIsThePairChain) {
  std::printf("[bf16 gemm] path %s, native kernel %s\n", sd::kName, sd::bf16_native() ? "AVX512-BF16" : "none");
  for (const auto& s : kBf16tShapes)
    for (const bool acc : {false, true}) {
      const Bf16tCase t = bf16t_case(s[0], s[1], s[2], uint64_t(s[0] * 1000 + s[1] * 10 + s[2]));
      int64_t differ = 0;
      EXPECT_TRUE(bf16t_same_bits(bf16t_run(t, acc, sd::Bf16Kernel::kPortable), bf16t_chain(t, acc), &differ))
          << s[0] << "x" << s[1] << "x" << s[2] << " accumulate " << acc << ": " << differ << " outputs differ";
    }
}

TEST(LoraBf16, NativeKernelBitEqualsPortable) {
  if (!sd::bf16_native()) GTEST_SKIP() << "this build has no AVX512-BF16 kernel (path " << sd::kName << ")";
  int64_t outputs = 0;
  for (const auto& s : kBf16tShapes)
    for (const bool acc : {false, true}) {
      const Bf16tCase t = bf16t_case(s[0], s[1], s[2], uint64_t(s[0] * 7 + s[1] * 3 + s[2]));
      int64_t differ = 0;
      EXPECT_TRUE(bf16t_same_bits(bf16t_run(t, acc, sd::Bf16Kernel::kNative),
                                  bf16t_run(t, acc, sd::Bf16Kernel::kPortable), &differ))
          << s[0] << "x" << s[1] << "x" << s[2] << " accumulate " << acc << ": " << differ << " outputs differ";
      outputs += int64_t(t.c0.size());
    }
  std::printf("[bf16 gemm] vdpbf16ps == portable chain on %lld outputs\n", (long long)outputs);
}

// vdpbf16ps flushes denormal results (and inputs) to zero; the portable chain keeps them: the one documented
// difference. 2^-70 * 2^-70 = 2^-140 is an fp32 denormal.
TEST(LoraBf16, NativeKernelFlushesDenormalsThePortableOneKeeps) {
  if (!sd::bf16_native()) GTEST_SKIP() << "this build has no AVX512-BF16 kernel (path " << sd::kName << ")";
  Bf16tCase t{1, 2, 1, 2, {sd::round_bf16(0x1p-70f), 0}, {sd::round_bf16(0x1p-70f), 0}, {}, {0.0f}};
  const float bcol[2] = {0x1p-70f, 0.0f};
  t.panel.assign(size_t(sd::bf16_panel_size(2, 1)), 0);
  sd::pack_bf16_kn(bcol, 1, 2, 1, t.panel.data());
  EXPECT_EQ(bf16t_run(t, false, sd::Bf16Kernel::kPortable)[0], 0x1p-140f);
  EXPECT_EQ(bf16t_run(t, false, sd::Bf16Kernel::kNative)[0], 0.0f);
}

// kAmx flushes like vdpbf16ps: TDPBF16PS with DAZ/FTZ (Intel SDM) where the CPU has AMX, else kNative itself.
TEST(LoraBf16, AmxKernelFlushesDenormalsLikeNative) {
  if (!sd::bf16_native()) GTEST_SKIP() << "this build has no AVX512-BF16 kernel (path " << sd::kName << ")";
  std::printf("[bf16 gemm] AMX %s, default kernel %d\n", sd::bf16_amx() ? "yes" : "no (kAmx runs kNative)",
              int(sd::bf16_default_kernel()));
  Bf16tCase t{1, 2, 1, 2, {sd::round_bf16(0x1p-70f), 0}, {sd::round_bf16(0x1p-70f), 0}, {}, {0.0f}};
  const float bcol[2] = {0x1p-70f, 0.0f};
  t.panel.assign(size_t(sd::bf16_panel_size(2, 1)), 0);
  sd::pack_bf16_kn(bcol, 1, 2, 1, t.panel.data());
  EXPECT_EQ(bf16t_run(t, false, sd::Bf16Kernel::kAmx)[0], 0.0f);
}

// The AMX kernel (the device's Xeon; skipped elsewhere) against the portable chain: TDPBF16PS sums the same exact
// products in another pair order, so each output is within 2 γ_{K+1} (|c| + Σ_k |a_k| |b_k|) of the chain (each of
// the two sums: K + 1 fp32 roundings at most, a pad pair included). Shapes: the tails of kBf16tShapes, and two tile
// rows and 13 column groups with every tail (M % 16, n % 16, K odd and K % 32 != 0).
TEST(LoraBf16, AmxKernelWithinTheChainBound) {
  if (!sd::bf16_amx())
    GTEST_SKIP() << "no AMX kernel here (needs x86-64 Linux, AMX-TILE + AMX-BF16 and the OS's grant)";
  int64_t outputs = 0, differ_total = 0;
  std::vector<std::array<int64_t, 3>> shapes = {{50, 777, 200}, {32, 64, 32}};
  for (const auto& s : kBf16tShapes) shapes.push_back({s[0], s[1], s[2]});
  for (const auto& s : shapes)
    for (const bool acc : {false, true}) {
      const Bf16tCase t = bf16t_case(s[0], s[1], s[2], uint64_t(s[0] * 5 + s[1] * 11 + s[2]));
      const std::vector<float> got = bf16t_run(t, acc, sd::Bf16Kernel::kAmx), want = bf16t_chain(t, acc);
      const double u = 0x1p-24, gamma = double(t.K + 1) * u / (1 - double(t.K + 1) * u);
      for (int64_t m = 0; m < t.M; ++m)
        for (int64_t j = 0; j < t.n; ++j) {
          double sum = acc ? std::fabs(double(t.c0[size_t(m * t.n + j)])) : 0.0;
          for (int64_t k = 0; k < t.K; ++k)
            sum += std::fabs(double(sd::bf16_to_f32(t.a[size_t(m * t.lda + k)])) *
                             double(sd::bf16_to_f32(t.b[size_t(k * t.n + j)])));
          const size_t i = size_t(m * t.n + j);
          differ_total += std::memcmp(&got[i], &want[i], 4) != 0;
          ASSERT_LE(std::fabs(double(got[i]) - double(want[i])), 2 * gamma * sum)
              << s[0] << "x" << s[1] << "x" << s[2] << " accumulate " << acc << " at " << m << "," << j;
        }
      outputs += int64_t(got.size());
    }
  std::printf("[bf16 gemm] tdpbf16ps vs the portable chain: %lld of %lld outputs differ (all within the bound)\n",
              (long long)differ_total, (long long)outputs);
}

// v rounded to bf16's 8 significant bits, nearest even, written here without the bit trick of round_bf16: the
// significand scaled to [128, 256) and rounded by nearbyint (the default rounding mode: to nearest, ties to even).
double bf16t_round(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e = 0;
  const double m = std::frexp(v, &e);  // |m| in [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

// round_bf16 against the reference above: random values over many binades, and exact ties (odd and even last bit).
TEST(LoraBf16, RoundingIsNearestEven) {
  train::Rng rng{41};
  int64_t bad = 0;
  for (int i = 0; i < 200000; ++i) {
    const float v = bf16t_value(rng, 60, 60);
    bad += double(sd::bf16_to_f32(sd::round_bf16(v))) != bf16t_round(v);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(sd::bf16_to_f32(sd::round_bf16(1.0f + 0x1p-8f)), 1.0f);                // tie, even below
  EXPECT_EQ(sd::bf16_to_f32(sd::round_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);  // tie, even above
  EXPECT_EQ(sd::bf16_to_f32(sd::round_bf16(-(1.0f + 0x1p-8f + 0x1p-20f))), -(1.0f + 0x1p-7f));
  EXPECT_TRUE(std::isnan(sd::bf16_to_f32(sd::round_bf16(std::nanf("")))));
  EXPECT_EQ(sd::bf16_to_f32(sd::round_bf16(3.4e38f)), INFINITY);  // past bf16's largest finite value
}

// got [N, J] against the fp64 products Σ_k A[n, k] B[k, j] (A [N, K], B(k, j) given): within
// (2^-7 + 2^-16 + 2 γ_K) Σ|a||b| of the exact operands and within γ_K Σ|â||b̂| of the bf16-rounded ones; returns the
// largest error / bound of each.
template <class BAt>
void bf16t_expect_bound(const std::vector<float>& got, const float* a, const std::vector<float>& start, int64_t N,
                        int64_t K, int64_t J, BAt b, const std::string& what) {
  const double u = std::ldexp(1.0, -24), gamma = double(K) * u / (1 - double(K) * u);
  const double rel = std::ldexp(1.0, -7) + std::ldexp(1.0, -16) + 2 * gamma;
  double worst_exact = 0, worst_rounded = 0;
  int64_t bad = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < J; ++j) {
      const double s0 = start.empty() ? 0.0 : start[size_t(n * J + j)];
      double exact = s0, absum = std::abs(s0), rounded = s0, rabsum = std::abs(s0);
      for (int64_t k = 0; k < K; ++k) {
        const double x = a[n * K + k], w = b(k, j);
        const double xr = bf16t_round(x), wr = bf16t_round(w);
        exact += x * w, absum += std::abs(x * w), rounded += xr * wr, rabsum += std::abs(xr * wr);
      }
      const double g = got[size_t(n * J + j)];
      const double e1 = std::abs(g - exact) / (rel * absum), e2 = std::abs(g - rounded) / (gamma * rabsum);
      bad += e1 > 1 || e2 > 1;
      worst_exact = std::max(worst_exact, e1), worst_rounded = std::max(worst_rounded, e2);
    }
  EXPECT_EQ(bad, 0) << what;
  std::printf("[bf16 product] %s: worst error / bound: %.3f (exact operands), %.3f (bf16 operands, sums only)\n",
              what.c_str(), worst_exact, worst_rounded);
}

// The operands of a product test: W [out, in] in dt (its fp32 values in wd, seeded by w_seed), x [N, in] and dy
// [N, out] of bf16t_value(4, 1) from rng (seeded by x_seed, x first), rng left for the test's further values.
struct Bf16tOperands {
  std::vector<float> wd;
  models::Tensor W;
  std::vector<float> x, dy;
  train::Rng rng;
};
Bf16tOperands bf16t_operands(int64_t N, int64_t in, int64_t out, models::DType dt, uint64_t w_seed, uint64_t x_seed) {
  Bf16tOperands o;
  o.W = test::typed_test_matrix(out, in, dt, w_seed, &o.wd);
  o.x.resize(size_t(N * in));
  o.dy.resize(size_t(N * out));
  o.rng = train::Rng{x_seed};
  for (float& v : o.x) v = bf16t_value(o.rng, 4, 1);
  for (float& v : o.dy) v = bf16t_value(o.rng, 4, 1);
  return o;
}

// y = x Wᵀ and dx (+)= dy W with W [1000, 768] fp32 / bf16 / Q8_0: several panels along each side (a panel is 256 KiB
// of bf16: 170 rows of W for y; for dx the rows of a column block in chunks), an odd row count.
TEST(LoraBf16, ProductsWithinTheBf16Bound) {
  const int64_t N = 7, in = 768, out = 1000;
  for (const models::DType dt : {models::DType::kF32, models::DType::kBF16, models::DType::kQ8_0}) {
    Bf16tOperands o = bf16t_operands(N, in, out, dt, 5 + uint64_t(dt), 23);
    const std::vector<float>&wd = o.wd, &x = o.x, &dy = o.dy;
    const models::Tensor& W = o.W;
    train::Rng& rng = o.rng;
    const std::string name = models::dtype_name(dt);
    std::vector<float> y(size_t(N * out));
    train::matmul_wt_bf16(x.data(), W, y.data(), N, in, out);
    bf16t_expect_bound(
        y, x.data(), {}, N, in, out, [&](int64_t k, int64_t j) { return wd[size_t(j * in + k)]; }, name + " y = x W^T");
    for (const bool add : {false, true}) {
      std::vector<float> start(size_t(N * in));
      for (float& v : start) v = bf16t_value(rng, 1, 1);
      std::vector<float> dx = start;
      train::matmul_dx_bf16(dy.data(), W, dx.data(), N, in, out, add);
      bf16t_expect_bound(
          dx, dy.data(), add ? start : std::vector<float>{}, N, out, in,
          [&](int64_t k, int64_t j) { return wd[size_t(k * in + j)]; }, name + (add ? " dx += dy W" : " dx = dy W"));
    }
    if (dt == models::DType::kF32) {  // the fp32-pointer overloads (a dense base) give the tensor's bits
      std::vector<float> y2(y.size());
      train::matmul_wt_bf16(x.data(), wd.data(), y2.data(), N, in, out);
      EXPECT_EQ(y2, y);
    }
  }
}

// The products split over the thread pool (column blocks; for dx each block's own chunks of k) give the bits of one
// block on one thread (SerialScope): each output is the same chain of sums whatever the split.
TEST(LoraBf16, ProductsDoNotDependOnTheSplit) {
  const int64_t N = 9, in = 768, out = 1000;
  for (const models::DType dt : {models::DType::kF32, models::DType::kQ8_0}) {
    const Bf16tOperands o = bf16t_operands(N, in, out, dt, 31 + uint64_t(dt), 29);
    const std::vector<float>&x = o.x, &dy = o.dy;
    const models::Tensor& W = o.W;
    std::vector<float> y(size_t(N * out)), y1(y.size()), dx(size_t(N * in)), dx1(dx.size());
    train::matmul_wt_bf16(x.data(), W, y.data(), N, in, out);
    train::matmul_dx_bf16(dy.data(), W, dx.data(), N, in, out, false);
    {
      const train::SerialScope one_block;
      train::matmul_wt_bf16(x.data(), W, y1.data(), N, in, out);
      train::matmul_dx_bf16(dy.data(), W, dx1.data(), N, in, out, false);
    }
    int64_t differ = 0;
    EXPECT_TRUE(bf16t_same_bits(y, y1, &differ)) << models::dtype_name(dt) << " y: " << differ << " outputs differ";
    EXPECT_TRUE(bf16t_same_bits(dx, dx1, &differ)) << models::dtype_name(dt) << " dx: " << differ << " outputs differ";
  }
  std::printf("[bf16 product] pool of %d threads == one block\n", ThreadPool::global().size());
}

// The adapter gradients of a model whose base products are in bf16 against PyTorch doing the same rounding
// (lora_reference.py, base_compute bf16) and against the fp32 path. Against PyTorch: the two compute the activations
// that get rounded in different arithmetic (anelab fp32, PyTorch fp64), so an operand whose two values straddle a bf16
// rounding boundary rounds to neighbouring bf16 values in the two. With δ the operands' relative fp32 error (at most
// the 1e-4 the fp32 path keeps against fp64, test_lora.cpp) and a bf16 spacing of 2^-8 to 2^-7 relative, a fraction
// p <= δ / 2^-8 = 0.026 of the operands flip, each by at most 2^-7 relative: in a product of random-signed terms
// sqrt(p) 2^-7 = 1.25e-3 relative, plus the 1e-4 of the arithmetic: 2e-3. Against the fp32 path, the bf16 rounding
// itself: each base product off by at most 2^-7 relative, through a few products: under 2^-4.
TEST(LoraBf16, GradientsMatchTorchRoundingTheBaseToBf16) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const auto dir = test::temp_dir("lora_bf16_grads").string();
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = test::init_with_norm_noise(layout, 7);
  train::LoraConfig lc;
  lc.rank = 4, lc.alpha = 8, lc.targets = train::parse_lora_targets("q,k,v,o,gate,up,down");
  const train::LoraLayout ll(cfg, lc);
  const auto [a, b] = test::lora_grad_case(ll, 2, 64, cfg.vocab_size);
  std::vector<float> g16(a.size(), 0.0f), g32(a.size(), 0.0f);
  double loss16 = 0, loss32 = 0;
  for (const bool bf16 : {true, false}) {
    train::CpuModel model(layout);
    model.set_base_bf16(bf16);
    const train::LoraStep st{&ll, a.data(), (bf16 ? g16 : g32).data(), 0, 0, true};
    model.set_lora(&st);
    (bf16 ? loss16 : loss32) = model.forward_backward(w.data(), b, 1.0f, nullptr);
  }
  std::filesystem::create_directories(dir + "/lora");
  for (const auto& p : ll.params()) write_npy(dir + "/lora/" + p.name + ".npy", p.shape, a.data() + p.offset);
  std::string log;
  ASSERT_TRUE(test::run_torch_reference(dir, layout, w, {b},
                                        {{"lora", {{"rank", lc.rank}, {"alpha", lc.alpha}, {"base_compute", "bf16"}}}},
                                        "grads", &log, "lora_reference.py"))
      << log;
  const double ref_loss = read_npy(dir + "/out/loss.npy").data.at(0);
  EXPECT_NEAR(loss16, ref_loss, 1e-5 * ref_loss);
  double worst_torch = 0, worst_fp32 = 0;
  for (const auto& p : ll.params()) {
    const NpyArray ref = read_npy(dir + "/out/grad." + p.name + ".npy");
    ASSERT_EQ(ref.numel(), p.numel) << p.name;
    const double et = test::rel_err(g16.data() + p.offset, ref.data.data(), p.numel);
    const double e32 = test::rel_err(g16.data() + p.offset, g32.data() + p.offset, p.numel);
    EXPECT_LT(et, 2e-3) << p.name;
    EXPECT_LT(e32, 0x1p-4) << p.name;
    worst_torch = std::max(worst_torch, et), worst_fp32 = std::max(worst_fp32, e32);
  }
  std::printf(
      "[lora bf16] loss %.6f (torch bf16 base %.6f, fp32 path %.6f); worst relative L2: vs torch %.2e, vs the "
      "fp32 path %.2e\n",
      loss16, ref_loss, loss32, worst_torch, worst_fp32);
  std::filesystem::remove_all(dir);
}

// 20 steps of `train --lora --lora-compute bf16` against the same run in fp32: the loss falls the same way (each
// step's loss within 2^-7 relative of fp32's, the bound of one product's relative error with bf16 operands; the fall
// over the run at least half fp32's), and the memory event says the products are bf16.
TEST(LoraBf16, TrainingLossFallsLikeFp32) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const auto dir = test::temp_dir("lora_bf16_run").string();
  const std::string init = dir + "/init.anelab";
  models::write_random_model(cfg, init, 11);
  std::vector<std::vector<double>> losses;
  for (const char* compute : {"fp32", "bf16"}) {
    train::TrainConfig c;
    c.init = init, c.data = test::write_tokens(dir, 6000, cfg.vocab_size, 5);
    c.run_dir = dir + "/run_" + compute, c.run = compute;
    c.steps = 20, c.batch_size = 2, c.seq_len = 32, c.lr = 1e-2, c.warmup_steps = 2;
    c.batching = "sequential", c.eval_batches = 0;
    c.lora = true, c.lora_rank = 4, c.lora_alpha = 8, c.lora_compute = compute;
    train::validate(c);
    train::run_training(c, {false, false});
    losses.push_back(test::losses(c.run_dir));
    const auto mem = test::read_events(c.run_dir, "memory");
    ASSERT_EQ(mem.size(), 1u);
    EXPECT_EQ(mem[0]["base_compute"].get<std::string>(), compute);
  }
  ASSERT_EQ(losses[0].size(), 20u);
  ASSERT_EQ(losses[1].size(), 20u);
  double worst = 0;
  for (size_t i = 0; i < 20; ++i) worst = std::max(worst, std::abs(losses[1][i] - losses[0][i]) / losses[0][i]);
  EXPECT_LT(worst, 0x1p-7);
  const double fall32 = losses[0].front() - losses[0].back(), fall16 = losses[1].front() - losses[1].back();
  EXPECT_GT(fall32, 0.1);
  EXPECT_GT(fall16, 0.5 * fall32);
  std::printf("[lora bf16 run] loss %.4f -> %.4f (fp32 %.4f -> %.4f), worst relative step difference %.2e\n",
              losses[1].front(), losses[1].back(), losses[0].front(), losses[0].back(), worst);
  std::filesystem::remove_all(dir);
}

TEST(LoraBf16, FlagRefusedOutsideLoraCpu) {
  const auto refused = [](train::TrainConfig c) {
    try {
      train::validate(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  train::TrainConfig c;
  c.preset = "stories260k", c.data = "x.bin", c.lora = true, c.strategy = "cpu", c.lora_compute = "bf16";
  EXPECT_EQ(refused(c), "");
  c.lora_compute = "fp16";
  EXPECT_NE(refused(c).find("--lora-compute fp16: must be fp32 or bf16"), std::string::npos) << refused(c);
  c.lora_compute = "bf16", c.strategy = "static";
  EXPECT_NE(refused(c).find("--lora-compute bf16: needs --lora --strategy cpu"), std::string::npos) << refused(c);
  c.strategy = "cpu", c.lora = false;
  EXPECT_NE(refused(c).find("--lora-compute bf16: needs --lora --strategy cpu"), std::string::npos) << refused(c);
}

}  // namespace
}  // namespace anelab
