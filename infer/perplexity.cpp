#include "infer/perplexity.h"

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "infer/logits.h"

namespace anelab::infer {

namespace {

// log(sum(exp(row))) in double, stable.
double log_sum_exp(const float* row, int64_t n) {
  const double mx = *std::max_element(row, row + n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(row[i]) - mx);
  return mx + std::log(s);
}

}  // namespace

PerplexityResult perplexity(Engine& e, const std::vector<int32_t>& tokens, const PerplexityOptions& o,
                            const std::function<void(int64_t, int64_t, double)>& progress) {
  const int64_t ctx = o.ctx, V = e.config().vocab_size;
  ANELAB_CHECK(ctx >= 4, "perplexity", "--ctx ", ctx, " is too small (at least 4 tokens per chunk)");
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / ctx;
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
  if (n_chunks < 1)
    fail("perplexity", "the text has ", tokens.size(), " tokens, fewer than one chunk of --ctx ", ctx,
         " (use a longer text or a smaller --ctx)");
  const int64_t first = ctx / 2;
  PerplexityResult r;
  double nll = 0, nll2 = 0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * ctx, tokens.begin() + (c + 1) * ctx);
    if (o.bos >= 0) chunk[0] = o.bos;
    const std::vector<float> logits = teacher_forced_logits(e, chunk);  // [ctx, V]
    for (int64_t j = first; j < ctx - 1; ++j) {
      const float* row = logits.data() + j * V;
      const double v = log_sum_exp(row, V) - row[chunk[static_cast<size_t>(j + 1)]];
      nll += v;
      nll2 += v * v;
      ++r.scored;
      if (o.keep_logits) r.logits.insert(r.logits.end(), row, row + V);
    }
    r.chunks = c + 1;
    if (progress) progress(r.chunks, n_chunks, std::exp(nll / static_cast<double>(r.scored)));
  }
  const double n = static_cast<double>(r.scored);
  r.mean_nll = nll / n;
  r.ppl = std::exp(r.mean_nll);
  const double var = nll2 / n - r.mean_nll * r.mean_nll;
  r.ppl_err = var > 0 && n > 1 ? r.ppl * std::sqrt(var / (n - 1)) : 0.0;
  return r;
}

KlResult compare_logits(const float* base, const float* run, int64_t n, int64_t vocab) {
  KlResult k;
  double kl = 0, kl2 = 0;
  int64_t same = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* b = base + t * vocab;
    const float* r = run + t * vocab;
    const double lb = log_sum_exp(b, vocab), lr = log_sum_exp(r, vocab);
    double d = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double log_pb = b[i] - lb, log_pr = r[i] - lr;
      d += std::exp(log_pb) * (log_pb - log_pr);
      k.max_dlogit = std::max(k.max_dlogit, std::fabs(static_cast<double>(b[i]) - r[i]));
    }
    kl += d;
    kl2 += d * d;
    same += std::max_element(b, b + vocab) - b == std::max_element(r, r + vocab) - r;
  }
  const double m = static_cast<double>(n);
  k.mean_kl = kl / m;
  const double var = kl2 / m - k.mean_kl * k.mean_kl;
  k.kl_err = var > 0 && n > 1 ? std::sqrt(var / (m - 1)) : 0.0;
  k.top1 = static_cast<double>(same) / m;
  return k;
}

}  // namespace anelab::infer
