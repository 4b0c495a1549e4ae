// Token samplers: logits -> the next token, for generation (infer/generate.h) and the trainer's sample
// text (train/trainer.cpp).
//
// RuncSampler reproduces llama2.c run.c's sampler bit for bit: xorshift* generator (state = the -s
// seed), random_f32 = (u32 >> 8) / 16777216.0f, argmax at temperature 0; otherwise logits /= T,
// softmax (max-subtracted, float), one coin per step, and sample_topp (cutoff (1-p)/(n-1) prefilter,
// sort by probability descending, cumulative prob until > p, then coin * cumprob) when 0 < p < 1,
// else sample_mult. The float operations happen in run.c's order.
//
// Sampler is the general one: repetition penalty (HF/llama.cpp style: positive logits divided,
// negative multiplied, over the last `penalty_last_n` tokens), frequency/presence penalties, temperature, top-k, top-p,
// min-p, then a draw from std::mt19937_64(seed). Temperature 0 = greedy (argmax, lowest id on ties).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace anelab::models {

int32_t argmax(std::span<const float> logits);

class RuncSampler {
 public:
  RuncSampler(int32_t vocab, float temperature, float topp, uint64_t seed);
  // Samples from logits (modified in place, like run.c).
  int32_t sample(std::span<float> logits);
  float random_f32();

 private:
  uint32_t random_u32();
  struct ProbIndex {
    float prob;
    int32_t index;
  };
  int32_t vocab_;
  float temperature_, topp_;
  uint64_t state_;
  std::vector<ProbIndex> probindex_;
};

struct SamplerOptions {
  float temperature = 1.0f;
  int32_t top_k = 0;   // 0 = off
  float top_p = 1.0f;  // 1 = off
  float min_p = 0.0f;  // 0 = off
  float repeat_penalty = 1.0f;
  // OpenAI's penalties (llama.cpp's window): logit -= count * frequency_penalty + (count > 0) * presence_penalty,
  // count over the last penalty_last_n tokens, after the repetition penalty.
  float frequency_penalty = 0.0f, presence_penalty = 0.0f;
  int32_t penalty_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  Sampler(int32_t vocab, const SamplerOptions& o);
  // history: tokens so far (for the repetition penalty); logits modified in place.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  // The distribution sample() draws from, dense over the vocabulary: p[i] the probability of token i after the
  // penalties, temperature, top-k, min-p and top-p (0 for the tokens they drop); temperature 0: 1 at the argmax.
  // logits are modified in place as by sample(); nothing is drawn.
  void distribution(std::span<float> logits, std::span<const int32_t> history, std::span<float> p);
  // A token drawn with probability weights[i] / sum(weights) (weights >= 0, not all 0): one uniform().
  int32_t draw(std::span<const float> weights);
  double uniform();  // the generator's next value in [0, 1)
  float temperature() const { return o_.temperature; }

 private:
  // Penalties into logits, then (temperature > 0) the kept candidates in cand_ as (exp(logit / T - max), id), most
  // likely first, their sum in `sum`; returns how many (0 at temperature 0: the argmax of logits is the token).
  size_t candidates(std::span<float> logits, std::span<const int32_t> history, double& sum);
  SamplerOptions o_;
  uint64_t rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace anelab::models
