// anelab perplexity: what a change costs in quality, in the manner of llama.cpp's llama-perplexity
// (infer/perplexity.h): PPL ± its error estimate over chunks of --ctx tokens of --text, scoring the second
// half of each chunk from teacher-forced logits (infer/logits.h); --save-logits keeps the scored
// positions' logits ([N, vocab] float32 .npy); --kl-base compares this run with such a file: mean KL
// divergence, top-1 agreement, max |Δlogit|. A progress bar goes to stderr, the figures to stdout.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "infer/engine.h"
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
void progress_bar(int64_t done, int64_t total, double ppl) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  const bool tty = ::isatty(2);
  if (!tty && done < total && done * 10 / total == (done - 1) * 10 / total) return;
  std::fprintf(stderr, "%s[%s%s] %lld/%lld chunks, PPL %.4f%s", tty ? "\r" : "", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, ' ').c_str(), static_cast<long long>(done), static_cast<long long>(total),
               ppl, tty && done < total ? "" : "\n");
  std::fflush(stderr);
}

void run_perplexity(PerplexityArgs a) {
  a.load.component = "perplexity";
  infer::LoadedModel l = infer::load_model(a.load, infer::TokenizerUse::kRequired);
  const tok::Tokenizer& tk = *l.tokenizer;
  const bool bos = tk.vocab().kind == tok::TokenizerKind::kSentencePiece || tk.vocab().add_bos;
  infer::Engine e(std::move(l.model), l.engine);
  const int64_t ctx = a.ctx > 0 ? a.ctx : std::min<int64_t>(512, e.context());
  ANELAB_CHECK(ctx <= e.context(), "perplexity", "--ctx ", ctx, " exceeds the model's context of ", e.context(),
               " positions");
  tok::EncodeOptions eo;
  eo.add_bos = false;  // each chunk starts with BOS instead (where the vocabulary uses one)
  const std::vector<int32_t> tokens = tk.encode(read_file_text(a.text), eo);

  infer::PerplexityOptions po;
  po.ctx = ctx;
  po.bos = bos ? tk.bos_id() : -1;
  po.keep_logits = !a.save_logits.empty() || !a.kl_base.empty();
  po.max_chunks = a.chunks;
  const infer::PerplexityResult r =
      infer::perplexity(e, tokens, po, a.load.quiet ? std::function<void(int64_t, int64_t, double)>() : progress_bar);
  const int64_t V = e.config().vocab_size;
  std::printf("perplexity of %s on %s: %lld tokens, %lld chunks of %lld, %lld scored (%s prefill)\n",
              a.load.model.c_str(), a.text.c_str(), static_cast<long long>(tokens.size()),
              static_cast<long long>(r.chunks), static_cast<long long>(ctx), static_cast<long long>(r.scored),
              e.last_prefill().path.c_str());
  std::printf("PPL = %.6f +/- %.6f (mean NLL %.8f)\n", r.ppl, r.ppl_err, r.mean_nll);
  if (!a.save_logits.empty()) {
    write_npy(a.save_logits, {r.scored, V}, r.logits.data());
    std::printf("logits of the %lld scored positions -> %s\n", static_cast<long long>(r.scored), a.save_logits.c_str());
  }
  if (!a.kl_base.empty()) {
    const NpyArray base = read_npy(a.kl_base);
    if (base.shape != std::vector<int64_t>{r.scored, V})
      fail("perplexity", "--kl-base ", a.kl_base, ": shape [", base.shape.empty() ? 0 : base.shape[0], ", ",
           base.shape.size() > 1 ? base.shape[1] : 0, "] is not this run's [", r.scored, ", ", V,
           "] (the base run needs the same --text, --ctx, --chunks and vocabulary)");
    const infer::KlResult k = infer::compare_logits(base.data.data(), r.logits.data(), r.scored, V);
    std::printf("KL divergence vs %s: mean %.6f +/- %.6f, top-1 agreement %.3f%%, max |dlogit| %.6g\n",
                a.kl_base.c_str(), k.mean_kl, k.kl_err, 100.0 * k.top1, k.max_dlogit);
  }
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  auto* p = app.add_subcommand("perplexity", "Perplexity of a text (llama-perplexity's method), and KL divergence "
                                             "against a saved base run");
  p->add_option("--model,-m", a->load.model, "Model file (any format infer reads)")->required();
  p->add_option("--tokenizer", a->load.tokenizer, "Tokenizer (when the model file has none)");
  p->add_option("--text,-f", a->text, "Text file to score")->required();
  p->add_option("--ctx,-c", a->ctx, "Tokens per chunk (0: 512 or the model's context if smaller)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  p->add_option("--chunks", a->chunks, "At most this many chunks (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  p->add_option("--save-logits", a->save_logits, "Write the scored positions' logits ([N, vocab] float32 .npy)");
  p->add_option("--kl-base", a->kl_base, "Compare with a base run's --save-logits file: KL, top-1, max |dlogit|");
  p->add_option("--backend", a->load.backend, infer::kPrefillBackendHelp)->capture_default_str();
  p->add_option("--device", a->load.device, "Device profile for emulator/ane (m1..m5)")->capture_default_str();
  p->add_option("--dtype", a->load.dtype, "Compute dtype of the weight matrices: fp16, fp32 or auto")->capture_default_str();
  p->add_option("--threads", a->load.threads, "CPU threads")->capture_default_str()->check(CLI::PositiveNumber);
  p->add_flag("--quiet,-q", a->load.quiet, "No progress bar");
  p->callback([a] { run_perplexity(*a); });
}

}  // namespace anelab::cli
