// scripts/gemv_batch_bench/run.sh BUILD THREADS ... with PROG=step: the engine's batched decode step alone
// (infer::Engine::decode_batch, no server): a GGUF read into private memory (Q8_0 / Q4_K row tiles), 8 slots prefilled
// with 8 tokens each, then for B = 1, 2, 4, 8 the best of 12 steps of B rows (one token per slot). Prints the step's
// time, per token and tok/s, so that a server's batched figures can be split into the engine's part and the rest.
//
//   step MODEL.gguf [THREADS=8]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "infer/engine.h"
#include "infer/load.h"

using namespace anelab;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: step MODEL.gguf [THREADS]\n");
    return 2;
  }
  infer::LoadOptions lo;
  lo.model = argv[1];
  lo.threads = argc > 2 ? std::atoi(argv[2]) : 8;
  lo.ctx = 512;
  lo.mmap = "off";
  lo.quiet = true;
  lo.backend = "cpu";
  infer::LoadedModel lm = infer::load_model(lo, infer::TokenizerUse::kNone);
  lm.engine.slots = 8;
  infer::Engine e(std::move(lm.model), lm.engine);
  std::printf("%s, %d threads: %.0f of %.0f MiB of weights as row tiles\n", argv[1], lo.threads,
              double(e.tiled_bytes()) / (1 << 20), double(e.weight_bytes()) / (1 << 20));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int64_t s = 0; s < 8; ++s) e.use_slot(s), e.prefill(prompt, 0);
  int64_t next = 8;
  for (int64_t B : {1, 2, 4, 8}) {
    std::vector<int32_t> tok(static_cast<size_t>(B), 11);
    std::vector<int64_t> pos(static_cast<size_t>(B)), slots(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) slots[static_cast<size_t>(i)] = i;
    double best = 1e30;
    for (int step = 0; step < 12; ++step, ++next) {
      std::fill(pos.begin(), pos.end(), next);
      const auto t0 = std::chrono::steady_clock::now();
      e.decode_batch(tok, pos, slots);
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("  B=%lld  step %7.2f ms  per token %6.2f ms  %7.1f tok/s\n", static_cast<long long>(B), best,
                best / double(B), 1000.0 * double(B) / best);
  }
}
