// scripts/typed_products_bench/run.sh: the CPU training products with a typed frozen base (train/cpu_linalg.h:
// matmul_wt / matmul_dx on a bf16 models::Tensor, what `anelab train --lora --strategy cpu` runs on a bf16 file)
// against the same products on the fp32 weights, on the Qwen2.5-0.5B shape: the tied head (N 256, in 896,
// out 151936) and the FFN's gate/up (in 896, out 4864) and down (in 4864, out 896). For dX it times each split of
// the typed product (rows, columns, and the one kAuto picks). Prints per product the best of REPS calls in ms and
// the ratio typed / fp32, at the thread count given (the process's pool); the calls of one product alternate
// between the variants. A benchmark, not a test: times depend on
// the machine; the outputs are only checked against the fp32 product loosely (a wrong split shows).
//
//   typed_products_bench THREADS [REPS=3]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/thread_pool.h"
#include "models/formats/model.h"
#include "train/cpu_linalg.h"

using namespace anelab;
using Clock = std::chrono::steady_clock;

namespace {

// The best of `reps` calls of each of fns, called in turn (a, b, c, a, b, c, ...) so that the machine's drift
// (a shared VM's neighbours, its clock) hits each alike.
std::vector<double> best_ms(int reps, const std::vector<std::function<void()>>& fns) {
  std::vector<double> best(fns.size(), 1e30);
  for (int i = 0; i < reps; ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto t0 = Clock::now();
      fns[f]();
      best[f] = std::min(best[f], std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  return best;
}

// Largest |a - b| / max|b| (a sanity check of the typed result against the fp32 one on the same bf16 weights).
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, double(std::abs(a[i] - b[i]))), m = std::max(m, double(std::abs(b[i])));
  return d / std::max(m, 1e-30);
}

void run_shape(const char* name, int64_t N, int64_t in, int64_t out, int reps) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> wf(size_t(in * out)), x(size_t(N * in)), dy(size_t(N * out));
  for (float& v : wf) v = u(rng) * 0.05f;
  for (float& v : x) v = u(rng);
  for (float& v : dy) v = u(rng);
  std::vector<uint8_t> bytes(size_t(models::dtype_nbytes(models::DType::kBF16, in * out)));
  models::f32_to_dtype(wf.data(), models::DType::kBF16, bytes.data(), in * out);
  models::bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data()), wf.data(), in * out);  // the same weights
  models::Model m;
  m.add_owned("w", models::DType::kBF16, {out, in}, std::move(bytes));
  const models::Tensor& W = m.tensor("w");

  std::vector<float> y(size_t(N * out)), yref(y.size()), dx(size_t(N * in)), dxref(dx.size());
  const std::vector<double> fwd =
      best_ms(reps, {[&] { train::matmul_wt(x.data(), wf.data(), yref.data(), N, in, out); },
                     [&] { train::matmul_wt(x.data(), W, y.data(), N, in, out); }});
  std::printf(
      "%-8s N %lld in %lld out %lld  forward    fp32 %8.2f ms  bf16 %8.2f ms  ratio %.3f  (max rel diff %.1e)\n", name,
      (long long)N, (long long)in, (long long)out, fwd[0], fwd[1], fwd[1] / fwd[0], max_rel(y, yref));
  const std::pair<train::TypedDxSplit, const char*> splits[] = {{train::TypedDxSplit::kAuto, "auto"},
                                                                {train::TypedDxSplit::kRows, "rows"},
                                                                {train::TypedDxSplit::kColumns, "columns"}};
  std::vector<std::vector<float>> dxs(3, std::vector<float>(dx.size()));
  std::vector<std::function<void()>> fns = {
      [&] { train::matmul_dx(dy.data(), wf.data(), dxref.data(), N, in, out, false); }};
  for (int k = 0; k < 3; ++k)
    fns.push_back(
        [&, k] { train::matmul_dx(dy.data(), W, dxs[size_t(k)].data(), N, in, out, false, splits[k].first); });
  const std::vector<double> t = best_ms(reps, fns);
  for (int k = 0; k < 3; ++k)
    std::printf("%-8s N %lld in %lld out %lld  dX %-7s fp32 %8.2f ms  bf16 %8.2f ms  ratio %.3f  (max rel diff %.1e)\n",
                name, (long long)N, (long long)in, (long long)out, splits[k].second, t[0], t[size_t(k) + 1],
                t[size_t(k) + 1] / t[0], max_rel(dxs[size_t(k)], dxref));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: typed_products_bench THREADS [REPS=3]\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]), reps = argc > 2 ? std::atoi(argv[2]) : 3;
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "[typed_products_bench] THREADS and REPS must be >= 1 (got %s, %d)\n", argv[1], reps);
    return 2;
  }
  ThreadPool::size_global(threads);
  std::printf("threads %d, best of %d\n", ThreadPool::global().size(), reps);
  run_shape("ffn_up", 256, 896, 4864, reps);
  run_shape("ffn_down", 256, 4864, 896, reps);
  run_shape("head", 256, 896, 151936, reps);
  return 0;
}
