// Micro benchmark of the frozen base's products (not a test): fp32 (train/cpu_linalg.h) against bf16
// (train/bf16_linalg.h, `train --lora --lora-compute bf16`) at Stories110M's shapes, N = 1024 tokens (B 4 x T 256):
// y = x Wᵀ and dx = dy W for W [out, in] = 768 x 768 (q, k, v, o), 2048 x 768 (gate, up), 768 x 2048 (down),
// 32000 x 768 (the classifier). Prints the median of RUNS timings of each, its GFLOP/s and the ratio bf16 / fp32; first
// checks the AVX512-BF16 and AMX kernels (where this CPU has them) against chains written here (bench_check). The bf16
// products run on simd::bf16_default_kernel (ANELAB_BF16_KERNEL=amx|native|portable picks one).
//   bench_lora_bf16 THREADS [RUNS]     (one pool size per process: ThreadPool::size_global)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "framework/core/thread_pool.h"
#include "framework/simd/bf16_gemm.h"
#include "train/bf16_linalg.h"
#include "train/cpu_linalg.h"
#include "train/data.h"

namespace {
using namespace anelab;

template <class F>
double bench_median_ms(int runs, F f) {
  f();  // warm: pages, caches
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// One product with every tail (M % 16, n % 16, K odd and K % 32 != 0), from 0 and accumulated onto C, by `kernel`
// against three chains written here over each output's k pairs, from C's start value: odd element first (the portable
// chain, vdpbf16ps), even element first (TDPBF16PS's order in Intel's SDM), and each pair's two products summed
// exactly then added with one rounding. Prints, for each, the outputs that differ and max |Δ| / Σ_k |a_k| |b_k|; then
// whether K split in two accumulated calls at k = 74 and at k = 64 gives the one call's bits.
void bench_check(simd::Bf16Kernel kernel, const char* name) {
  const int64_t M = 50, K = 777, n = 200, lda = K + 1, Kp = (K + 1) / 2;
  std::vector<float> a(size_t(M * K)), b(size_t(K * n)), c0(size_t(M * n));
  train::Rng rng{5};
  for (float& v : a) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5);
  for (float& v : b) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5);
  for (float& v : c0) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5) * 4.0f;
  std::vector<uint16_t> ab(size_t(M * lda)), bb(size_t(2 * Kp * n), 0), panel(size_t(simd::bf16_panel_size(K, n)));
  for (int64_t m = 0; m < M; ++m) simd::round_bf16_row(a.data() + m * K, ab.data() + m * lda, K, true);
  for (int64_t i = 0; i < K * n; ++i) bb[size_t(i)] = simd::round_bf16(b[size_t(i)]);
  simd::pack_bf16_kn(b.data(), n, K, n, panel.data());
  for (const bool acc : {false, true}) {
    std::vector<float> c = c0;
    simd::gemm_bf16(ab.data(), lda, panel.data(), K, c.data(), n, M, n, acc, kernel);
    int64_t differ[3] = {0, 0, 0};
    double worst[3] = {0, 0, 0};
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < n; ++j) {
        const float start = acc ? c0[size_t(m * n + j)] : 0.0f;
        float r[3] = {start, start, start};
        double sum_abs = std::fabs(double(start));
        for (int64_t p = 0; p < Kp; ++p) {
          const float a0 = simd::bf16_to_f32(ab[size_t(m * lda + 2 * p)]);
          const float a1 = simd::bf16_to_f32(ab[size_t(m * lda + 2 * p + 1)]);
          const float b0 = simd::bf16_to_f32(bb[size_t(2 * p * n + j)]);
          const float b1 = 2 * p + 1 < K ? simd::bf16_to_f32(bb[size_t((2 * p + 1) * n + j)]) : 0.0f;
          r[0] = std::fma(a0, b0, std::fma(a1, b1, r[0]));
          r[1] = std::fma(a1, b1, std::fma(a0, b0, r[1]));
          r[2] = float(double(r[2]) + (double(a0) * b0 + double(a1) * b1));
          sum_abs += std::fabs(double(a0) * b0) + std::fabs(double(a1) * b1);
        }
        const float got = c[size_t(m * n + j)];
        for (int i = 0; i < 3; ++i)
          if (std::memcmp(&got, &r[i], 4) != 0) {
            ++differ[i];
            worst[i] = std::max(worst[i], std::fabs(double(got) - double(r[i])) / sum_abs);
          }
      }
    std::printf(
        "check %s (M %lld, K %lld, n %lld, %s): outputs differing from the odd-first chain (portable) %lld, "
        "max |d|/sum|ab| %.3g; even-first chain %lld, %.3g; pair-summed %lld, %.3g (of %lld)\n",
        name, (long long)M, (long long)K, (long long)n, acc ? "accumulate" : "from 0", (long long)differ[0], worst[0],
        (long long)differ[1], worst[1], (long long)differ[2], worst[2], (long long)(M * n));
  }
  // K split: rows [0, k1) of B then [k1, K) accumulated, as train/bf16_linalg's dx splits the chain: at 74 (not a
  // multiple of 32, the AMX kernel's k step) and at 64.
  for (const int64_t k1 : {int64_t(74), int64_t(64)}) {
    std::vector<uint16_t> p1(size_t(simd::bf16_panel_size(k1, n))), p2(size_t(simd::bf16_panel_size(K - k1, n)));
    simd::pack_bf16_kn(b.data(), n, k1, n, p1.data());
    simd::pack_bf16_kn(b.data() + k1 * n, n, K - k1, n, p2.data());
    std::vector<float> one(c0.size()), two(c0.size());
    simd::gemm_bf16(ab.data(), lda, panel.data(), K, one.data(), n, M, n, false, kernel);
    simd::gemm_bf16(ab.data(), lda, p1.data(), k1, two.data(), n, M, n, false, kernel);
    simd::gemm_bf16(ab.data() + k1, lda, p2.data(), K - k1, two.data(), n, M, n, true, kernel);
    std::printf("check %s: K split at %lld gives the one call's bits: %s\n", name, (long long)k1,
                std::memcmp(one.data(), two.data(), one.size() * 4) == 0 ? "yes" : "NO");
  }
}

const char* bench_kernel_name(simd::Bf16Kernel k) {
  switch (k) {
    case simd::Bf16Kernel::kNative:
      return simd::bf16_native() ? "native (vdpbf16ps)" : "native (no AVX512-BF16 here: portable)";
    case simd::Bf16Kernel::kPortable:
      return "portable";
    case simd::Bf16Kernel::kAmx:
      return simd::bf16_amx() ? "amx (tdpbf16ps)" : "amx (no AMX here: native)";
  }
  return "?";
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "[bench_lora_bf16] usage: bench_lora_bf16 THREADS [RUNS]\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]), runs = argc > 2 ? std::atoi(argv[2]) : 5;
  ThreadPool::size_global(threads);
  std::printf(
      "bench_lora_bf16: %d threads, median of %d; SIMD path %s, AVX512-BF16 kernel %s, AMX %s; bf16 products "
      "on: %s\n",
      threads, runs, simd::kName, simd::bf16_native() ? "yes" : "no", simd::bf16_amx() ? "yes" : "no",
      bench_kernel_name(simd::bf16_default_kernel()));
  if (simd::bf16_native()) bench_check(simd::Bf16Kernel::kNative, "native");
  if (simd::bf16_amx()) bench_check(simd::Bf16Kernel::kAmx, "amx");
  std::printf("%-22s %10s %10s %8s %8s %7s\n", "product", "fp32 ms", "bf16 ms", "fp32 GF", "bf16 GF", "ratio");
  const int64_t N = 1024;
  const int64_t shapes[][2] = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};  // W [out, in]
  double tot32 = 0, tot16 = 0;
  for (const auto& s : shapes) {
    const int64_t out = s[0], in = s[1];
    std::vector<float> W(size_t(out * in)), x(size_t(N * in)), dy(size_t(N * out)), y(size_t(N * out)),
        dx(size_t(N * in));
    train::Rng rng{7};
    for (float& v : W) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5) * 0.05f;
    for (float& v : x) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5);
    for (float& v : dy) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5);
    const double gf = 2.0 * double(N) * double(in) * double(out) / 1e6;  // per ms
    const double wt32 = bench_median_ms(runs, [&] { train::matmul_wt(x.data(), W.data(), y.data(), N, in, out); });
    const double wt16 = bench_median_ms(runs, [&] { train::matmul_wt_bf16(x.data(), W.data(), y.data(), N, in, out); });
    const double dx32 =
        bench_median_ms(runs, [&] { train::matmul_dx(dy.data(), W.data(), dx.data(), N, in, out, false); });
    const double dx16 =
        bench_median_ms(runs, [&] { train::matmul_dx_bf16(dy.data(), W.data(), dx.data(), N, in, out, false); });
    char name[64];
    std::snprintf(name, sizeof name, "y=xW^T %lldx%lld", (long long)out, (long long)in);
    std::printf("%-22s %10.2f %10.2f %8.0f %8.0f %7.2f\n", name, wt32, wt16, gf / wt32, gf / wt16, wt16 / wt32);
    std::snprintf(name, sizeof name, "dx=dyW %lldx%lld", (long long)out, (long long)in);
    std::printf("%-22s %10.2f %10.2f %8.0f %8.0f %7.2f\n", name, dx32, dx16, gf / dx32, gf / dx16, dx16 / dx32);
    // a Stories110M step has 12 layers of q, k, v, o (768 x 768), gate, up (2048 x 768), down (768 x 2048), one head
    const double per_step = out == 32000 ? 1 : out == 768 && in == 768 ? 48 : out == 2048 ? 24 : 12;
    tot32 += per_step * (wt32 + dx32), tot16 += per_step * (wt16 + dx16);
  }
  std::printf(
      "Stories110M step's base products (forward + dX, 12 layers + head): fp32 %.1f ms, bf16 %.1f ms, ratio "
      "%.2f\n",
      tot32, tot16, tot16 / tot32);
  return 0;
}
