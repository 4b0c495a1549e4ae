// anelab perplexity: what a change costs in quality, in the manner of llama.cpp's llama-perplexity
// (infer/perplexity.h): PPL ± its error estimate over chunks of --ctx tokens of --text, scoring the second
// half of each chunk from teacher-forced logits (infer/logits.h); --save-logits keeps the scored
// positions' logits ([N, vocab] float32 .npy); --kl-base compares this run with such a file or with
// llama-perplexity's --kl-divergence-base file (infer/kl_base.h; then its tokens and chunk length are
// scored, and --text, if given, is checked to tokenize to the same ids): mean KL divergence, top-1
// agreement, max |Δ log p|. A progress bar goes to stderr, the figures to stdout.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "framework/core/platform.h"
#include "infer/engine.h"
#include "infer/kl_base.h"
#include "infer/load.h"
#include "infer/perplexity.h"

namespace anelab::cli {
namespace {

struct PerplexityArgs {
  infer::LoadOptions load;
  std::string text, save_logits, kl_base;
  int64_t ctx = 0, chunks = 0;
};

// Redrawn in place on a terminal; elsewhere (a log file) one line per tenth of the chunks.
void ppl_progress_bar(int64_t done, int64_t total, double ppl) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  const bool tty = platform::is_terminal(2);
  if (!tty && done < total && done * 10 / total == (done - 1) * 10 / total) return;
  std::fprintf(stderr, "%s[%s%s] %lld/%lld chunks, PPL %.4f%s", tty ? "\r" : "", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, ' ').c_str(), static_cast<long long>(done), static_cast<long long>(total),
               ppl, tty && done < total ? "" : "\n");
  std::fflush(stderr);
}

// The base file's tokens are what both runs score; says whether the text tokenizes to the same ids here.
void report_tokenization(const std::vector<int32_t>& text_ids, const std::vector<int32_t>& base_ids) {
  const size_t n = std::min(text_ids.size(), base_ids.size());
  const size_t i = static_cast<size_t>(
      std::mismatch(base_ids.begin(), base_ids.begin() + static_cast<std::ptrdiff_t>(n), text_ids.begin()).first -
      base_ids.begin());
  if (i == n && n == base_ids.size())
    std::printf("tokenization: the text's first %zu ids (of %zu) are the base file's\n", n, text_ids.size());
  else if (i == n)
    std::printf("tokenization: the text has %zu ids, the base file %zu; the first %zu agree\n", text_ids.size(),
                base_ids.size(), n);
  else
    std::printf(
        "tokenization DIFFERS from the base file's at id %zu of %zu: here %d, there %d (scoring the base "
        "file's ids)\n",
        i, base_ids.size(), text_ids[i], base_ids[i]);
}

// --ctx, or the base file's chunk length (llama.cpp's), or 512 / the model's context.
int64_t chunk_length(const PerplexityArgs& a, const infer::KlBase* llama_base, int64_t context) {
  if (llama_base && a.ctx > 0 && a.ctx != llama_base->ctx)
    fail("perplexity", "--ctx ", a.ctx, " differs from the n_ctx ", llama_base->ctx, " of --kl-base ", a.kl_base);
  const int64_t ctx = llama_base ? llama_base->ctx : a.ctx > 0 ? a.ctx : std::min<int64_t>(512, context);
  ANELAB_CHECK(ctx <= context, "perplexity", "--ctx ", ctx, " exceeds the model's context of ", context, " positions");
  return ctx;
}

void print_kl(const PerplexityArgs& a, infer::KlBase& base, const infer::PerplexityResult& r, int64_t V) {
  const bool llama = base.kind == infer::KlBase::Kind::kLlamaCpp;
  if (llama && r.scored < base.n) base.n = r.scored;  // --chunks: the base file's first chunks
  if (base.n != r.scored || base.vocab != V)
    fail("perplexity", "--kl-base ", a.kl_base, ": shape [", base.n, ", ", base.vocab, "] is not this run's [",
         r.scored, ", ", V, "] (the base run needs the same --text, --ctx, --chunks and vocabulary)");
  const infer::KlResult k = infer::compare_with_base(base, r.logits.data());
  std::printf(
      "KL divergence vs %s: mean %.6f +/- %.6f, top-1 agreement %.3f%%, max |dlogp| %.6g (%.3g of the "
      "logit range; the base's own rounding %.2g)\n",
      a.kl_base.c_str(), k.mean_kl, k.kl_err, 100.0 * k.top1, k.max_dlogp, k.max_rel, k.base_step);
}

void run_perplexity(PerplexityArgs a) {
  a.load.component = "perplexity";
  std::optional<infer::KlBase> base;  // read first: a bad file is refused before the model loads
  if (!a.kl_base.empty()) base = infer::read_kl_base(a.kl_base);
  const infer::KlBase* llama_base = base && base->kind == infer::KlBase::Kind::kLlamaCpp ? &*base : nullptr;
  if (a.text.empty() && !llama_base)
    fail("perplexity", "--text is required (only a llama.cpp --kl-base file brings its own tokens)");
  infer::LoadedModel l = infer::load_model(a.load, infer::TokenizerUse::kRequired);
  const tok::Tokenizer& tk = *l.tokenizer;
  const bool bos = tk.vocab().kind == tok::TokenizerKind::kSentencePiece || tk.vocab().add_bos;
  infer::Engine e(std::move(l.model), l.engine);
  const int64_t V = e.config().vocab_size;
  if (llama_base && llama_base->vocab != V)
    fail("perplexity", "--kl-base ", a.kl_base, ": n_vocab ", llama_base->vocab, " is not the model's ", V);
  const int64_t ctx = chunk_length(a, llama_base, e.context());
  tok::EncodeOptions eo;
  eo.add_bos = bos;  // llama-perplexity's tokenization; each chunk's first token becomes BOS as well
  std::vector<int32_t> tokens = a.text.empty() ? std::vector<int32_t>() : tk.encode(read_file_text(a.text), eo);
  if (llama_base) {
    if (!a.text.empty()) report_tokenization(tokens, llama_base->tokens);
    tokens = llama_base->tokens;
  }

  infer::PerplexityOptions po;
  po.ctx = ctx;
  po.bos = bos ? tk.bos_id() : -1;
  po.keep_logits = !a.save_logits.empty() || base.has_value();
  po.max_chunks = a.chunks;
  const infer::PerplexityResult r = infer::perplexity(
      e, tokens, po, a.load.quiet ? std::function<void(int64_t, int64_t, double)>() : ppl_progress_bar);
  const std::string source = llama_base ? a.kl_base + "'s tokens" : a.text;
  std::printf("perplexity of %s on %s: %lld tokens, %lld chunks of %lld, %lld scored (%s prefill)\n",
              a.load.model.c_str(), source.c_str(), static_cast<long long>(tokens.size()),
              static_cast<long long>(r.chunks), static_cast<long long>(ctx), static_cast<long long>(r.scored),
              e.last_prefill().path.c_str());
  std::printf("PPL = %.6f +/- %.6f (mean NLL %.8f)\n", r.ppl, r.ppl_err, r.mean_nll);
  if (!a.save_logits.empty()) {
    write_npy(a.save_logits, {r.scored, V}, r.logits.data());
    std::printf("logits of the %lld scored positions -> %s\n", static_cast<long long>(r.scored), a.save_logits.c_str());
  }
  if (base) print_kl(a, *base, r, V);
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  auto* p = app.add_subcommand("perplexity",
                               "Perplexity of a text (llama-perplexity's method), and KL divergence "
                               "against a saved base run");
  add_model_options(p, a->load);
  p->add_option("--text,-f", a->text, "Text file to score (with a llama.cpp --kl-base file: compared with its tokens)");
  p->add_option("--ctx,-c", a->ctx, "Tokens per chunk (0: 512 or the model's context if smaller)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  p->add_option("--chunks", a->chunks, "At most this many chunks (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  p->add_option("--save-logits", a->save_logits, "Write the scored positions' logits ([N, vocab] float32 .npy)");
  p->add_option("--kl-base", a->kl_base,
                "Compare with a base run: a --save-logits file, or llama-perplexity's "
                "--kl-divergence-base file (its tokens and n_ctx are used): KL, top-1, "
                "max |dlogp|");
  p->add_flag("--quiet,-q", a->load.quiet, "No progress bar");
  p->callback([a] { run_perplexity(*a); });
}

}  // namespace anelab::cli
