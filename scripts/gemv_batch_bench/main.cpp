// scripts/gemv_batch_bench/run.sh: the batched decode GEMV (infer::gemv_batch: B tokens, each weight block read once
// and multiplied with every token) against B single-token GEMVs (infer::gemv, decode's), on one matrix of the
// Qwen2.5-0.5B shape (FFN down: 896 x 4864) per weight type (Q8_0 and Q4_K as row tiles, fp16), one thread by
// default. Prints per B the time of the batched call, of B single calls, and their ratio (single / batched: how many
// times faster the batch is); the outputs of both are compared bit for bit. A benchmark, not a test: times depend
// on the machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "framework/core/thread_pool.h"
#include "framework/quant/blocks.h"
#include "framework/quant/qdot.h"
#include "infer/cpu_math.h"

using namespace anelab;
using Clock = std::chrono::steady_clock;

namespace {

double best_of(int reps, const auto& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int64_t rows = argc > 3 ? std::atoll(argv[3]) : 896, cols = argc > 4 ? std::atoll(argv[4]) : 4864;
  ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(8 * cols));
  for (float& v : w) v = g(rng);
  for (float& v : x) v = g(rng);
  for (const quant::WType type : {quant::WType::kQ8_0, quant::WType::kQ4_K, quant::WType::kF16}) {
    std::vector<uint8_t> bytes;
    quant::Mat m;
    m.type = type, m.rows = rows, m.cols = cols;
    if (type == quant::WType::kF16) {
      bytes.resize(static_cast<size_t>(rows * cols * 2));
      float_to_half(w.data(), reinterpret_cast<half_bits*>(bytes.data()), w.size());
    } else {
      const quant::BlockType bt = quant::block_type(type);
      bytes.resize(static_cast<size_t>(rows * cols / quant::block_info(bt).values * quant::block_info(bt).bytes));
      quant::quantize(bt, w.data(), bytes.data(), rows * cols);
      quant::tile_rows(bt, bytes.data(), rows / quant::kTileRows, cols);
      m.tiled_rows = rows / quant::kTileRows * quant::kTileRows;
    }
    m.data = bytes.data();
    std::printf("%-5s %lld x %lld, %d thread(s), %.1f MiB\n", quant::wtype_name(type), static_cast<long long>(rows),
                static_cast<long long>(cols), threads, double(bytes.size()) / (1 << 20));
    for (int64_t B : {1, 2, 4, 8}) {
      std::vector<float> yb(static_cast<size_t>(B * rows)), ys(static_cast<size_t>(B * rows));
      const auto batched = [&] { infer::gemv_batch(pool, {infer::GemvOut{&m, nullptr, yb.data()}}, x.data(), B); };
      const auto single = [&] {
        for (int64_t t = 0; t < B; ++t) infer::gemv(pool, m, nullptr, x.data() + t * cols, ys.data() + t * rows);
      };
      const double tb = best_of(reps, batched), ts = best_of(reps, single);
      const bool same = std::memcmp(yb.data(), ys.data(), yb.size() * sizeof(float)) == 0;
      std::printf("  B=%lld  batched %8.1f us  %lld single %8.1f us  single/batched %.2fx  per token %.1f us%s\n",
                  static_cast<long long>(B), tb * 1e6, static_cast<long long>(B), ts * 1e6, ts / tb, tb * 1e6 / B,
                  same ? "" : "  OUTPUTS DIFFER");
    }
  }
}
