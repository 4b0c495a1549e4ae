// Perplexity and the cost of a change (quantization, another backend) in the manner of llama.cpp's
// llama-perplexity: the text's tokens are cut into chunks of `ctx` tokens (the last partial chunk is
// dropped); each chunk is run from position 0 with its first token replaced by BOS where the vocabulary
// uses one; the second half of each chunk is scored: the logits at positions j = ctx/2 .. ctx-2 predict
// token j+1, ctx-1-ctx/2 tokens per chunk (the first half gives every scored token some context).
//   PPL = exp(mean NLL); its error, as llama.cpp's: PPL * sqrt((mean(NLL²) - mean(NLL)²) / (N - 1)).
// Against a base run's logits of the same scored positions: mean KL(base || this) of the softmaxes (and
// its standard error), top-1 agreement, max |Δlogit|.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "infer/engine.h"

namespace anelab::infer {

struct PerplexityOptions {
  int64_t ctx = 0;          // tokens per chunk (>= 4)
  int32_t bos = -1;         // >= 0: the first token of every chunk becomes this
  bool keep_logits = false; // keep the scored positions' logits (PerplexityResult::logits)
  int64_t max_chunks = 0;   // 0: every whole chunk
};

struct PerplexityResult {
  int64_t chunks = 0, scored = 0;          // chunks run, tokens scored
  double mean_nll = 0, ppl = 0, ppl_err = 0;
  std::vector<float> logits;               // [scored, vocab] when keep_logits
};

struct KlResult {
  double mean_kl = 0, kl_err = 0, top1 = 0, max_dlogit = 0;  // top1: fraction of positions with the same argmax
};

// Calls progress(chunks done, chunks total, running PPL) after each chunk. Throws "[perplexity] ..." when
// the text has fewer than ctx tokens.
PerplexityResult perplexity(Engine& e, const std::vector<int32_t>& tokens, const PerplexityOptions& o,
                            const std::function<void(int64_t, int64_t, double)>& progress = {});

// base, run: [n, vocab] logits of the same positions.
KlResult compare_logits(const float* base, const float* run, int64_t n, int64_t vocab);

}  // namespace anelab::infer
