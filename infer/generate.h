// The generation loop shared by `anelab infer generate|chat|bench`.
//
// Output follows llama2.c run.c: the prompt's pieces after the start token (BOS, or EOS as GPT-2's
// start; a prompt without one, as GPT-2/Qwen text encodes, is printed from its first token) are printed as they are
// "forced", then each sampled token's piece (decode_token(prev, id), run.c's safe_printf filter drops
// lone non-printable bytes), then "\n" at the end. Steps count positions like run.c's -n: a run of
// `steps` positions prints steps-1 tokens in all (prompt included), so the continuation has
// steps - n_prompt tokens; max_new_tokens >= 0 sets the continuation length directly.
// Stops: the BOS id for SentencePiece vocabularies (run.c), the EOS id for byte-level BPE ones, any
// extra stop token, or a stop string (text up to the stop string is printed, the rest dropped).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "infer/engine.h"
#include "models/sampler.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::grammar {
class GrammarConstraint;
}

namespace anelab::infer {

enum class SamplerKind { kAuto, kRunc, kGeneral };  // auto: run.c's for llama2.c files when no top-k/min-p/penalty

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

// Where generation's forwards run (GenerateOptions::forward): the engine's own prefill / decode when none is given;
// the server passes a slot of a Batcher (infer/batch.h), so that concurrent generations share batched decode steps.
class Forward {
 public:
  virtual ~Forward() = default;
  // As Engine::prefill / Engine::decode on this forward's sequence; the logits stay valid until its next call.
  virtual const float* prefill(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits) = 0;
  virtual const float* decode(int32_t token, int64_t pos) = 0;
  // As Engine::decode_run: the logits [n, vocab] of decode(tokens[i], pos + i) for each i, in one batched step.
  virtual const float* decode_run(std::span<const int32_t> tokens, int64_t pos) = 0;
  virtual PrefillStats last_prefill() const = 0;
};

// An engine's own forwards on its current slot (Engine::use_slot), as a Forward.
class EngineForward final : public Forward {
 public:
  explicit EngineForward(Engine& e) : e_(e) {}
  const float* prefill(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits) override {
    return e_.prefill(tokens, pos, all_logits);
  }
  const float* decode(int32_t token, int64_t pos) override { return e_.decode(token, pos); }
  const float* decode_run(std::span<const int32_t> tokens, int64_t pos) override { return e_.decode_run(tokens, pos); }
  PrefillStats last_prefill() const override { return e_.last_prefill(); }

 private:
  Engine& e_;
};

// A draft model for speculative decoding (GenerateOptions::draft): a smaller model with the target's vocabulary, run
// on a sequence of its own.
struct DraftModel {
  Forward* forward = nullptr;  // its forwards (an EngineForward, or a Batcher slot of its engine); not owned
  int64_t vocab = 0;           // its vocab_size: must be the target's
  // The tokens its sequence holds at positions 0.. (not owned; null: none held at the start). Kept up to date, so
  // that a later generation on the same sequence prefills only what follows their common prefix (its prompt cache).
  std::vector<int32_t>* held = nullptr;
  // Called around each drafting (null: nothing): a Batcher slot takes part in the draft engine's steps only while it
  // drafts, so the two batchers never wait for each other.
  std::function<void()> begin, end;
};

// The drafts per pass with a draft model when --draft-max is 0 (llama.cpp's --draft-max default).
inline constexpr int32_t kDefaultDraftMax = 16;

struct GenerateOptions {
  int64_t steps = 256;          // run.c -n (0 or > context: the context)
  int64_t max_new_tokens = -1;  // >= 0 overrides steps
  SamplerKind sampler = SamplerKind::kAuto;
  models::SamplerOptions sampling;
  std::vector<int32_t> stop_tokens;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;    // llama.cpp --ignore-eos: the end-of-text token's logit is -inf, no eos stop
  bool echo_prompt = true;    // print the prompt's pieces (run.c does)
  bool final_newline = true;  // run.c prints "\n" at the end
  // Grammar-constrained sampling (models/grammar/token_constraint.h): tokens it does not allow are masked before
  // each draw, and generation stops (stop_reason "grammar") once nothing more can follow. Not owned.
  grammar::GrammarConstraint* constraint = nullptr;
  // >= 0: record each generated token's log-probability under the model (log-softmax of the engine's logits, before
  // penalties, temperature, masks) and this many most likely alternatives (GenerateResult::logprobs).
  int32_t logprobs = -1;
  // With logprobs >= 0: called with each generated token's entry as it is produced (streamed answers).
  std::function<void(const TokenLogprob&)> on_logprob;
  // > 0: speculative decoding with prompt-lookup drafts. After each token, the tokens that followed the latest earlier
  // occurrence of the last n tokens (n = draft_ngram .. draft_ngram_min) are drafted, up to draft_max, and checked in
  // one batched pass (Engine::decode_run over [token, drafts]: decode's kernels for each position, every weight matrix
  // read once); each position is still sampled once, in order, from its own logits, and the drafts are used while they
  // equal what was sampled. Every row of the pass is the logits plain decoding computes there, bit for bit at every
  // weight type, so the output is plain decoding's (the same draws of the same sampler).
  int32_t draft_max = 0;
  int32_t draft_ngram = 3, draft_ngram_min = 2;
  // draft_max > 0 with draft.forward set: the drafts come from a draft model instead of prompt lookup. After each
  // sampled token it drafts K = draft_max tokens (fewer near the end), each sampled from its own logits with this
  // sampler's settings (distribution q), verified as above in one decode_run of the target (distribution p), and
  // accepted by the standard rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023): draft d is kept
  // with probability min(1, p(d) / q(d)); at the first rejection the token is drawn from max(0, p - q) normalised and
  // the later drafts are dropped; after K kept drafts one more token is sampled from the last row. The tokens follow
  // the target's distribution. At temperature 0, and with the run.c sampler, each position is sampled from its own
  // logits instead (the prompt-lookup rule): then the tokens are plain decoding's, bit for bit.
  DraftModel draft;
  Forward* forward = nullptr;  // not owned; null: the engine's own forwards
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens, new_tokens;
  std::vector<TokenLogprob> logprobs;  // [new_tokens] when GenerateOptions::logprobs >= 0
  int64_t drafted = 0, accepted = 0;   // speculative decoding: drafted tokens, and those the samples agreed with
  int64_t batched_passes = 0;          // speculative decoding: batched verification passes
  std::string text;                    // everything that was emitted (prompt echo + continuation)
  std::string stop_reason;             // "length", "eos", "stop_token", "stop_string", "context", "grammar"
  double prefill_ms = 0, decode_ms = 0, ttft_ms = 0;
  PrefillStats prefill;
};

using TextSink = std::function<void(std::string_view)>;

// A tokenizer with more tokens than the model's vocab_size, or over 1024 fewer, belongs to another model:
// throws "[infer] vocabulary mismatch: tokenizer T has N tokens but model M has vocab_size V ..." (a few
// fewer is padding: Qwen2.5 has 151665 tokens, vocab_size 151936). generate_tokens() names a sampled id
// past the tokenizer the same way.
void check_tokenizer_fits(const tok::Tokenizer& tk, const std::string& tokenizer_name, int64_t model_vocab,
                          const std::string& model_name);
// The same rule on the sizes alone (convert/export --tokenizer checks a vocabulary before embedding it).
void check_vocab_fits(int64_t tokenizer_vocab, const std::string& tokenizer_name, int64_t model_vocab,
                      const std::string& model_name);

// Text prompt: encoded with BOS when the tokenizer is SentencePiece (run.c encode(.., bos=1, ..)) or
// its vocab asks for it.
GenerateResult generate(Engine& e, const tok::Tokenizer& tk, std::string_view prompt, const GenerateOptions& o,
                        const TextSink& sink);
// How much of a common prefix of `common` tokens the engine's cache can continue from: all of it, except on a model
// with linear-attention layers, whose recurrent state resumes only where it stopped (Engine::state_pos): then 0
// (prefilled again from position 0) unless common is that position.
int64_t reusable_prefix(const Engine& e, int64_t common);
// Token prompt continuing a KV cache that already holds `cached` (a prefix of `prompt`): only the
// new suffix is prefilled (cached passes through reusable_prefix first). Used by chat.
GenerateResult generate_tokens(Engine& e, const tok::Tokenizer& tk, const std::vector<int32_t>& prompt, int64_t cached,
                               const GenerateOptions& o, const TextSink& sink);
// The same for a model without a tokenizer (tk null: ids only, as `infer generate --prompt-ids` on a bare
// Hugging Face directory): nothing is echoed or printed, and only the length or o.stop_tokens end it.
GenerateResult generate_tokens(Engine& e, const tok::Tokenizer* tk, const std::vector<int32_t>& prompt, int64_t cached,
                               const GenerateOptions& o, const TextSink& sink);

// Chat: keeps the conversation and the KV cache; each turn re-renders the model's chat template, reuses
// the cached prefix and drops the oldest turns when the context would overflow.
class Chat {
 public:
  // system "": none; enable_thinking false: the template's thinking-off generation prompt (Qwen3's empty
  // <think></think>; the other templates have none).
  Chat(Engine& e, const tok::Tokenizer& tk, tok::ChatTemplate t, std::string system, bool enable_thinking = true);
  // Adds a user message, generates the assistant reply (streamed to sink), returns it.
  std::string turn(const std::string& user, GenerateOptions o, const TextSink& sink, GenerateResult* info = nullptr);

 private:
  std::vector<int32_t> render(bool add_generation_prompt) const;
  Engine& e_;
  const tok::Tokenizer& tk_;
  tok::ChatTemplate t_;
  bool enable_thinking_;
  std::vector<tok::ChatMessage> messages_;
  std::vector<int32_t> cached_;  // tokens whose k/v are in the cache
};

}  // namespace anelab::infer
