// scripts/gemv_batch_bench/run.sh with PROG=split: where the engine's batched decode step (infer::Engine::decode_batch)
// spends its time, per component, for B = 1 and 8 rows: the q/k/v, output, gate/up and down GEMVs of every layer and
// the LM head, each run alone through infer::gemv_batch on the engine's own matrices (as decode_batch calls it), the
// whole step, and the rest (step minus the GEMVs: attention, norms, RoPE, the elementwise ops, the pool's dispatches).
// A GGUF read into private memory (Q8_0 / Q4_K as row tiles), 8 slots prefilled with 8 tokens; medians of REPS runs.
//
//   split MODEL.gguf [THREADS=8] [REPS=15]
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "framework/quant/blocks.h"
#include "framework/quant/qdot.h"
#include "infer/cpu_math.h"
#include "infer/engine.h"
#include "infer/load.h"

using namespace anelab;
using Clock = std::chrono::steady_clock;

namespace {

double median_ms(int reps, const auto& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: split MODEL.gguf [THREADS] [REPS]\n");
    return 2;
  }
  infer::LoadOptions lo;
  lo.model = argv[1];
  lo.threads = argc > 2 ? std::atoi(argv[2]) : 8;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 15;
  lo.ctx = 1024;
  lo.mmap = "off";
  lo.quiet = true;
  lo.backend = "cpu";
  infer::LoadedModel lm = infer::load_model(lo, infer::TokenizerUse::kNone);
  lm.engine.slots = 8;
  infer::Engine e(std::move(lm.model), lm.engine);
  const auto& c = e.config();
  // The LM head as the engine holds it: the tied embedding (rewritten as row tiles in place when the engine tiles) or
  // the output matrix.
  const models::Model& m = e.model();
  const models::Tensor& ht = m.tensor(e.desc().head.tied ? e.desc().embed.tokens : e.desc().head.weight);
  quant::Mat head;
  head.rows = ht.rows(), head.cols = ht.cols(), head.data = ht.data;
  if (const auto bt = models::block_type_of(ht.dtype)) {
    head.type = quant::wtype_of(*bt);
    head.tiled_rows =
        e.tiled_bytes() > 0 && quant::has_row_tiles(*bt) ? head.rows / quant::kTileRows * quant::kTileRows : 0;
  } else {
    head.type = ht.dtype == models::DType::kF16 ? quant::WType::kF16 : quant::WType::kF32;
  }
  std::printf("%s, %d threads, %s weights (%.0f of %.0f MiB as row tiles), head %lld x %lld\n", argv[1], lo.threads,
              quant::wtype_name(head.type), double(e.tiled_bytes()) / (1 << 20), double(e.weight_bytes()) / (1 << 20),
              static_cast<long long>(head.rows), static_cast<long long>(head.cols));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int64_t s = 0; s < 8; ++s) e.use_slot(s), e.prefill(prompt, 0);
  const int64_t L = static_cast<int64_t>(e.desc().layers.size()), D = c.dim, H = c.hidden_dim;
  std::vector<float> x(static_cast<size_t>(8 * std::max(D, H)), 0.01f), y(static_cast<size_t>(8 * head.rows));
  std::vector<float> q(static_cast<size_t>(8 * c.q_dim())), k(static_cast<size_t>(8 * c.kv_dim())),
      v(static_cast<size_t>(8 * c.kv_dim())), h1(static_cast<size_t>(8 * H)), h3(static_cast<size_t>(8 * H));
  ThreadPool& pool = e.pool();
  int64_t next = 8;
  for (int64_t B : {1, 8}) {
    const auto nb = [](std::span<const float> b) { return b.empty() ? nullptr : b.data(); };
    // The GEMVs in the step's order (layer by layer, then the head), each timed: the weights stream from memory as in
    // the step, not from a cache warmed by repeating one matrix.
    std::vector<std::array<double, 5>> runs;
    for (int r = 0; r < reps; ++r) {
      std::array<double, 5> t{};
      auto timed = [&](int i, const auto& fn) {
        const auto t0 = Clock::now();
        fn();
        t[static_cast<size_t>(i)] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      };
      for (int64_t l = 0; l < L; ++l) {
        const kern::LayerWeights& w = e.layer(l);
        timed(0, [&] {
          infer::gemv_batch(pool,
                            {{&w.wq, nb(w.bq), q.data()}, {&w.wk, nb(w.bk), k.data()}, {&w.wv, nb(w.bv), v.data()}},
                            x.data(), B);
        });
        timed(1, [&] { infer::gemv_batch(pool, {{&w.wo, nullptr, h1.data()}}, x.data(), B); });
        timed(2, [&] {
          infer::gemv_batch(pool, {{&w.w1, nullptr, h1.data()}, {&w.w3, nullptr, h3.data()}}, x.data(), B);
        });
        timed(3, [&] { infer::gemv_batch(pool, {{&w.w2, nullptr, h3.data()}}, x.data(), B); });
      }
      timed(4, [&] { infer::gemv_batch(pool, {{&head, nullptr, y.data()}}, x.data(), B); });
      runs.push_back(t);
    }
    std::array<double, 5> med{};
    for (size_t i = 0; i < med.size(); ++i) {
      std::vector<double> v1;
      for (const auto& t : runs) v1.push_back(t[i]);
      std::sort(v1.begin(), v1.end());
      med[i] = v1[v1.size() / 2];
    }
    const double qkv = med[0], wo = med[1], gu = med[2], down = med[3], hd = med[4];
    std::vector<int32_t> tok(static_cast<size_t>(B), 11);
    std::vector<int64_t> pos(static_cast<size_t>(B)), slots(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) slots[static_cast<size_t>(i)] = i;
    const double step = median_ms(reps, [&] {
      std::fill(pos.begin(), pos.end(), next++);
      e.decode_batch(tok, pos, slots);
    });
    const double rest = step - qkv - wo - gu - down - hd;
    std::printf(
        "  B=%lld step %7.2f ms (%6.1f tok/s): qkv %6.2f  o %6.2f  gate/up %6.2f  down %6.2f  head %6.2f  "
        "rest %6.2f\n",
        static_cast<long long>(B), step, 1000.0 * double(B) / step, qkv, wo, gu, down, hd, rest);
  }
  // Two parts of the rest at B = 8, per step (once per layer each, as decode_batch runs them): the SwiGLU product
  // over 8 x hidden values on the pool (Engine::elementwise), and an empty dispatch of the pool (the cost each of the
  // step's pool calls pays besides its work; the attention's rows_batch is one such call per layer).
  const double silu = median_ms(reps, [&] {
    for (int64_t l = 0; l < L; ++l)
      pool.parallel_for(8 * H, 16, [&](int64_t b, int64_t e) { infer::silu_mul(h1.data() + b, h3.data() + b, e - b); });
  });
  const double dispatch = median_ms(reps, [&] {
    for (int64_t l = 0; l < L; ++l) pool.parallel_for(8, 1, [](int64_t, int64_t) {});
  });
  std::printf("  rest at B=8: SwiGLU product %6.2f ms, an empty pool dispatch per layer %6.2f ms\n", silu, dispatch);
}
