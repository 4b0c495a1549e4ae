// Micro benchmark of the frozen base's products (not a test): fp32 (train/cpu_linalg.h) against bf16
// (train/bf16_linalg.h, `train --lora --lora-compute bf16`) at Stories110M's shapes, N = 1024 tokens (B 4 x T 256):
// y = x Wᵀ and dx = dy W for W [out, in] = 768 x 768 (q, k, v, o), 2048 x 768 (gate, up), 768 x 2048 (down),
// 32000 x 768 (the classifier). Prints the median of RUNS timings of each, its GFLOP/s and the ratio bf16 / fp32; first
// checks the AVX512-BF16 kernel against the portable one on one product (bit-equal: yes / no).
//   bench_lora_bf16 THREADS [RUNS]     (one pool size per process: ThreadPool::size_global)
#include <algorithm>
#include <chrono>
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

bool bench_native_matches() {
  const int64_t M = 64, K = 768, n = 256;
  std::vector<float> a(size_t(M * K)), b(size_t(K * n));
  train::Rng rng{5};
  for (float& v : a) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5);
  for (float& v : b) v = float(double(rng.next() >> 11) * 0x1.0p-53 - 0.5);
  std::vector<uint16_t> ab(a.size()), panel(size_t(simd::bf16_panel_size(K, n)));
  for (int64_t m = 0; m < M; ++m) simd::round_bf16_row(a.data() + m * K, ab.data() + m * K, K, false);
  simd::pack_bf16_kn(b.data(), n, K, n, panel.data());
  std::vector<float> c1(size_t(M * n)), c2(c1.size());
  simd::gemm_bf16(ab.data(), K, panel.data(), K, c1.data(), n, M, n, false, simd::Bf16Kernel::kNative);
  simd::gemm_bf16(ab.data(), K, panel.data(), K, c2.data(), n, M, n, false, simd::Bf16Kernel::kPortable);
  return std::memcmp(c1.data(), c2.data(), c1.size() * 4) == 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "[bench_lora_bf16] usage: bench_lora_bf16 THREADS [RUNS]\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]), runs = argc > 2 ? std::atoi(argv[2]) : 5;
  ThreadPool::size_global(threads);
  std::printf("bench_lora_bf16: %d threads, median of %d; SIMD path %s, AVX512-BF16 kernel %s", threads, runs,
              simd::kName, simd::bf16_native() ? "yes" : "no (portable)");
  if (simd::bf16_native()) std::printf(", bit-equal to the portable one: %s", bench_native_matches() ? "yes" : "NO");
  std::printf("\n%-22s %10s %10s %8s %8s %7s\n", "product", "fp32 ms", "bf16 ms", "fp32 GF", "bf16 GF", "ratio");
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
