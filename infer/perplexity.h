// Perplexity and the cost of a change (quantization, another backend) in the manner of llama.cpp's
// llama-perplexity: the text's tokens are cut into chunks of `ctx` tokens (the last partial chunk is
// dropped); each chunk is run from position 0 with its first token replaced by BOS where the vocabulary
// uses one; the second half of each chunk is scored: the logits at positions j = ctx/2 .. ctx-2 predict
// token j+1, ctx-1-ctx/2 tokens per chunk (the first half gives every scored token some context).
//   PPL = exp(mean NLL); its error, as llama.cpp's: PPL * sqrt((mean(NLL²) - mean(NLL)²) / (N - 1)).
// Chunking and BOS follow llama-perplexity too: the text is tokenized with BOS first where the vocabulary
// adds one (so chunk c is tokens[c*ctx, (c+1)*ctx) of the same ids llama.cpp cuts).
// Against a base run of the same scored positions (infer/kl_base.h: anelab's saved logits or llama.cpp's
// --kl-divergence-base file): mean KL(base || this) of the softmaxes (and its standard error), top-1
// agreement, max |Δ log p| (logits compared after removing each row's log-sum-exp, the shift that softmax
// ignores) alone and relative to the row's logit range (max - min).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "infer/engine.h"
#include "infer/kl_base.h"

namespace anelab::infer {

struct PerplexityOptions {
  int64_t ctx = 0;           // tokens per chunk (>= 4)
  int32_t bos = -1;          // >= 0: the first token of every chunk becomes this
  bool keep_logits = false;  // keep the scored positions' logits (PerplexityResult::logits)
  int64_t max_chunks = 0;    // 0: every whole chunk
};

struct PerplexityResult {
  int64_t chunks = 0, scored = 0;  // chunks run, tokens scored
  double mean_nll = 0, ppl = 0, ppl_err = 0;
  std::vector<float> logits;  // [scored, vocab] when keep_logits
};

struct KlResult {
  double mean_kl = 0, kl_err = 0;
  double top1 = 0;       // fraction of positions with the same argmax
  double max_dlogp = 0;  // max |Δ log p| over the entries the base holds unclamped
  double max_rel = 0;    // max over positions of max |Δ log p| / (max - min of this run's logits there)
  double base_step = 0;  // the base's own rounding: max half quantization step of its log-probs (0 for .npy)
};

// Calls progress(chunks done, chunks total, running PPL) after each chunk. Throws "[perplexity] ..." when
// the text has fewer than ctx tokens.
PerplexityResult perplexity(Engine& e, const std::vector<int32_t>& tokens, const PerplexityOptions& o,
                            const std::function<void(int64_t, int64_t, double)>& progress = {});

// run: [base.n, base.vocab] logits of the base's positions. Base entries at its clamp level (llama.cpp
// stores log-probabilities more than 16 below the top as that level) are left out of the KL sum and of
// max |Δ log p|, as llama.cpp's own KL leaves out log-probabilities below -16.
KlResult compare_with_base(const KlBase& base, const float* run);

}  // namespace anelab::infer
