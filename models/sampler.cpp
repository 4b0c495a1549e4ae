#include "models/sampler.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace anelab::models {

// The first index of the largest value, NaN values skipped (the scan `x > best` of run.c's argmax; a NaN first value
// stays the answer, as there). Two passes so that the first vectorises (a vocabulary of 152k logits per token: the
// one-value-at-a-time scan's compare-and-select chain took ~0.2 ms, as long as a small model's decode step): the
// largest value through kLanes independent maxima (v > m ? v : m skips NaN, as the scan does), then the first index
// holding it (== also matches a 0 of the other sign, which the scan's > keeps first too).
int32_t argmax(std::span<const float> logits) {
  const size_t n = logits.size();
  if (std::isnan(logits[0])) return 0;
  constexpr size_t kLanes = 16;
  float m[kLanes];
  std::fill(m, m + kLanes, logits[0]);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t l = 0; l < kLanes; ++l) m[l] = logits[i + l] > m[l] ? logits[i + l] : m[l];
  float best = m[0];
  for (size_t l = 1; l < kLanes; ++l) best = m[l] > best ? m[l] : best;
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  return static_cast<int32_t>(std::find(logits.begin(), logits.end(), best) - logits.begin());
}

// ---- run.c ------------------------------------------------------------------------------------

RuncSampler::RuncSampler(int32_t vocab, float temperature, float topp, uint64_t seed)
    : vocab_(vocab), temperature_(temperature), topp_(topp), state_(seed), probindex_(static_cast<size_t>(vocab)) {}

uint32_t RuncSampler::random_u32() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return static_cast<uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
}

float RuncSampler::random_f32() { return static_cast<float>(random_u32() >> 8) / 16777216.0f; }

int32_t RuncSampler::sample(std::span<float> logits) {
  const int32_t n = vocab_;
  if (temperature_ == 0.0f) return argmax(logits.first(static_cast<size_t>(n)));
  for (int32_t q = 0; q < n; ++q) logits[q] /= temperature_;
  // softmax exactly as run.c
  float max_val = logits[0];
  for (int32_t i = 1; i < n; ++i)
    if (logits[i] > max_val) max_val = logits[i];
  float sum = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    logits[i] = expf(logits[i] - max_val);
    sum += logits[i];
  }
  for (int32_t i = 0; i < n; ++i) logits[i] /= sum;
  const float coin = random_f32();
  if (topp_ <= 0 || topp_ >= 1) {
    float cdf = 0.0f;
    for (int32_t i = 0; i < n; ++i) {
      cdf += logits[i];
      if (coin < cdf) return i;
    }
    return n - 1;
  }
  int32_t n0 = 0;
  const float cutoff = (1.0f - topp_) / static_cast<float>(n - 1);
  for (int32_t i = 0; i < n; ++i)
    if (logits[i] >= cutoff) probindex_[static_cast<size_t>(n0++)] = {logits[i], i};
  // glibc qsort is a merge sort (stable) for this size: keep equal probabilities in index order.
  std::stable_sort(probindex_.begin(), probindex_.begin() + n0,
                   [](const ProbIndex& a, const ProbIndex& b) { return a.prob > b.prob; });
  float cumulative_prob = 0.0f;
  int32_t last_idx = n0 - 1;
  for (int32_t i = 0; i < n0; ++i) {
    cumulative_prob += probindex_[static_cast<size_t>(i)].prob;
    if (cumulative_prob > topp_) {
      last_idx = i;
      break;
    }
  }
  const float r = coin * cumulative_prob;
  float cdf = 0.0f;
  for (int32_t i = 0; i <= last_idx; ++i) {
    cdf += probindex_[static_cast<size_t>(i)].prob;
    if (r < cdf) return probindex_[static_cast<size_t>(i)].index;
  }
  return probindex_[static_cast<size_t>(last_idx)].index;
}

// ---- general ------------------------------------------------------------------------------------

Sampler::Sampler(int32_t vocab, const SamplerOptions& o) : o_(o), rng_(o.seed) {
  cand_.reserve(static_cast<size_t>(vocab));
}

double Sampler::uniform() {
  // splitmix64 step -> 53-bit double in [0, 1)
  uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

size_t Sampler::candidates(std::span<float> logits, std::span<const int32_t> history, double& sum) {
  const int32_t n = static_cast<int32_t>(logits.size());
  if (o_.repeat_penalty != 1.0f) {
    const size_t from =
        history.size() > static_cast<size_t>(o_.penalty_last_n) ? history.size() - o_.penalty_last_n : 0;
    std::vector<bool> seen(static_cast<size_t>(n), false);  // small; only when the penalty is on
    for (size_t i = from; i < history.size(); ++i) {
      const int32_t t = history[i];
      if (t < 0 || t >= n || seen[static_cast<size_t>(t)]) continue;
      seen[static_cast<size_t>(t)] = true;
      logits[t] = logits[t] > 0 ? logits[t] / o_.repeat_penalty : logits[t] * o_.repeat_penalty;
    }
  }
  if (o_.frequency_penalty != 0.0f || o_.presence_penalty != 0.0f) {
    const size_t from =
        history.size() > static_cast<size_t>(o_.penalty_last_n) ? history.size() - o_.penalty_last_n : 0;
    std::vector<std::pair<int32_t, int32_t>> counts;  // (token, count) over the window, sorted by token
    for (size_t i = from; i < history.size(); ++i)
      if (history[i] >= 0 && history[i] < n) counts.emplace_back(history[i], 1);
    std::sort(counts.begin(), counts.end());
    for (size_t i = 0; i < counts.size();) {
      size_t j = i;
      while (j < counts.size() && counts[j].first == counts[i].first) ++j;
      logits[counts[i].first] -= static_cast<float>(j - i) * o_.frequency_penalty + o_.presence_penalty;
      i = j;
    }
  }
  if (o_.temperature <= 0.0f) return 0;
  cand_.clear();
  for (int32_t i = 0; i < n; ++i) cand_.emplace_back(logits[i] / o_.temperature, i);
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand_.size();
  if (o_.top_k > 0 && static_cast<size_t>(o_.top_k) < keep) {
    keep = static_cast<size_t>(o_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(keep), cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(keep);
  const float mx = cand_[0].first;
  sum = 0;
  for (auto& c : cand_) sum += (c.first = std::exp(c.first - mx));
  if (o_.min_p > 0.0f) {  // keep tokens with p >= min_p * p_max (p_max = 1/sum after exp(0))
    size_t k = 0;
    while (k < cand_.size() && cand_[k].first >= o_.min_p) ++k;
    cand_.resize(std::max<size_t>(1, k));
    sum = 0;
    for (auto& c : cand_) sum += c.first;
  }
  if (o_.top_p < 1.0f) {
    double cum = 0;
    size_t k = 0;
    while (k < cand_.size()) {
      cum += cand_[k++].first / sum;
      if (cum >= o_.top_p) break;
    }
    cand_.resize(k);
    sum = 0;
    for (auto& c : cand_) sum += c.first;
  }
  return cand_.size();
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  double sum = 0;
  if (candidates(logits, history, sum) == 0) return argmax(logits);
  const double r = uniform() * sum;
  double cdf = 0;
  for (const auto& c : cand_) {
    cdf += c.first;
    if (r < cdf) return c.second;
  }
  return cand_.back().second;
}

void Sampler::distribution(std::span<float> logits, std::span<const int32_t> history, std::span<float> p) {
  std::fill(p.begin(), p.end(), 0.0f);
  double sum = 0;
  if (candidates(logits, history, sum) == 0) {
    p[static_cast<size_t>(argmax(logits))] = 1.0f;
    return;
  }
  for (const auto& c : cand_) p[static_cast<size_t>(c.second)] = static_cast<float>(c.first / sum);
}

int32_t Sampler::draw(std::span<const float> weights) {
  double sum = 0;
  for (float w : weights) sum += w;
  const double r = uniform() * sum;
  double cdf = 0;
  int32_t last = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0f) continue;
    cdf += weights[i];
    last = static_cast<int32_t>(i);
    if (r < cdf) return last;
  }
  return last;
}

}  // namespace anelab::models
