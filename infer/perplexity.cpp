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

KlResult compare_with_base(const KlBase& base, const float* run) {
  const int64_t V = base.vocab;
  KlResult k;
  double kl = 0, kl2 = 0;
  int64_t same = 0;
  std::vector<double> lb(static_cast<size_t>(V));  // [vocab] the base's log-probabilities of one position
  for (int64_t t = 0; t < base.n; ++t) {
    const float* r = run + t * V;
    const double clamp = base.log_probs(t, lb.data());
    const double lr = log_sum_exp(r, V);
    const float* rmax = std::max_element(r, r + V);  // the first maximum, like the base's argmax below
    const float* rmin = std::min_element(r, r + V);
    double d = 0, worst = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (lb[i] <= clamp) continue;
      const double log_pb = lb[i], log_pr = r[i] - lr;
      d += std::exp(log_pb) * (log_pb - log_pr);
      worst = std::max(worst, std::fabs(log_pb - log_pr));
    }
    kl += d;
    kl2 += d * d;
    k.max_dlogp = std::max(k.max_dlogp, worst);
    if (*rmax > *rmin) k.max_rel = std::max(k.max_rel, worst / (static_cast<double>(*rmax) - *rmin));
    k.base_step = std::max(k.base_step, static_cast<double>(base.half_step(t)));
    same += std::max_element(lb.begin(), lb.end()) - lb.begin() == rmax - r;
  }
  const double m = static_cast<double>(base.n);
  k.mean_kl = kl / m;
  const double var = kl2 / m - k.mean_kl * k.mean_kl;
  k.kl_err = var > 0 && base.n > 1 ? std::sqrt(var / (m - 1)) : 0.0;
  k.top1 = static_cast<double>(same) / m;
  return k;
}

}  // namespace anelab::infer
