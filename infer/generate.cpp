#include "infer/generate.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "framework/core/error.h"
#include "models/grammar/token_constraint.h"

namespace anelab::infer {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

bool is_llama2c(const Engine& e) { return e.model().source_format == "llama2c"; }

// log-softmax of logits at `id`, and the `top` most likely ids (fp64 sums in index order).
TokenLogprob token_logprob(const float* logits, int32_t vocab, int32_t id, int32_t top) {
  float mx = logits[0];
  for (int32_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob t;
  t.id = id;
  t.logprob = static_cast<float>(logits[id] - lse);
  if (top > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) idx[static_cast<size_t>(i)] = i;
    const auto k = static_cast<std::ptrdiff_t>(std::min(top, vocab));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (std::ptrdiff_t i = 0; i < k; ++i)
      t.top.emplace_back(idx[static_cast<size_t>(i)], static_cast<float>(logits[idx[static_cast<size_t>(i)]] - lse));
  }
  return t;
}

// run.c safe_printf: a piece that is one byte must be printable or whitespace.
bool safe_piece(const std::string& p) {
  if (p.empty()) return false;
  if (p.size() == 1) {
    const auto b = static_cast<unsigned char>(p[0]);
    return std::isprint(b) || std::isspace(b);
  }
  return true;
}

// Streams text to the sink, holding back a tail that could still become a stop string.
class StopFilter {
 public:
  StopFilter(const std::vector<std::string>& stops, const TextSink& sink, std::string& out)
      : stops_(stops), sink_(sink), out_(out) {}
  // Returns true when a stop string completed (the text before it has been emitted).
  bool push(const std::string& piece) {
    pending_ += piece;
    for (const auto& s : stops_) {
      if (s.empty()) continue;
      const size_t at = pending_.find(s);
      if (at != std::string::npos) {
        emit(pending_.substr(0, at));
        pending_.clear();
        return true;
      }
    }
    size_t hold = 0;  // longest suffix of pending_ that is a proper prefix of a stop string
    for (const auto& s : stops_)
      for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); k > hold; --k)
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    emit(pending_.substr(0, pending_.size() - hold));
    pending_.erase(0, pending_.size() - hold);
    return false;
  }
  void flush() {
    emit(pending_);
    pending_.clear();
  }

 private:
  void emit(const std::string& s) {
    if (s.empty()) return;
    out_ += s;
    if (sink_) sink_(s);
  }
  const std::vector<std::string>& stops_;
  const TextSink& sink_;
  std::string& out_;
  std::string pending_;
};

// Prompt lookup: the tokens that followed an earlier occurrence of history's last n tokens (n from ngram down to
// ngram_min), at most max of them: the latest occurrence that has max tokens after it, else the one with most.
std::vector<int32_t> lookup_drafts(const std::vector<int32_t>& h, int32_t ngram, int32_t ngram_min, int64_t max) {
  const auto size = static_cast<int64_t>(h.size());
  for (int64_t n = std::min<int64_t>(ngram, size - 1); n >= std::max(1, ngram_min); --n) {
    const int32_t* tail = h.data() + size - n;
    int64_t best_from = -1, best = 0;
    for (int64_t i = size - n - 1; i >= 0 && best < max; --i) {  // occurrences h[i .. i+n), latest first
      if (!std::equal(tail, tail + n, h.data() + i)) continue;
      const int64_t from = i + n, count = std::min(max, size - from);  // a repeat close to the end drafts few:
      if (count > best) best_from = from, best = count;                // an earlier one may continue further
    }
    if (best > 0) return std::vector<int32_t>(h.begin() + best_from, h.begin() + best_from + best);
  }
  return {};
}

// The draft model's side of speculative decoding (GenerateOptions::draft): keeps its sequence in step with the
// tokens so far and drafts tokens after them, each sampled from its logits (q rows kept for the acceptance rule).
class Drafter {
 public:
  Drafter(const DraftModel& d, const models::SamplerOptions& so, int32_t vocab)
      : d_(d), sampler_(vocab, with_seed(so)), vocab_(vocab) {
    if (d_.held) held_.swap(*d_.held);
  }
  ~Drafter() {
    if (d_.held) d_.held->swap(held_);
  }
  Drafter(const Drafter&) = delete;
  Drafter& operator=(const Drafter&) = delete;

  // Up to k >= 1 drafts after history (its last token at position history.size() - 1).
  std::vector<int32_t> draft(const std::vector<int32_t>& h, int64_t k) {
    struct Scope {  // the draft batcher's begin / end around one drafting
      const DraftModel& d;
      explicit Scope(const DraftModel& dm) : d(dm) {
        if (d.begin) d.begin();
      }
      ~Scope() {
        if (d.end) d.end();
      }
    } scope(d_);
    const size_t n = h.size();
    size_t common = 0;  // what its sequence holds of h; at least the last token is run, for its logits
    while (common < held_.size() && common + 1 < n && held_[common] == h[common]) ++common;
    held_.resize(common);
    const auto fresh = std::span<const int32_t>(h).subspan(common);
    // One token, or two after a pass whose drafts were all kept: decode's kernels (a prefill past position 0 would
    // leave a MIL backend for the CPU with a note each time); more (a new prompt): a prefill.
    const auto at = static_cast<int64_t>(common);
    const float* l = fresh.size() == 1   ? d_.forward->decode(h.back(), at)
                     : fresh.size() == 2 ? d_.forward->decode_run(fresh, at) + vocab_
                                         : d_.forward->prefill(fresh, at, nullptr);
    held_ = h;
    if (q_.size() < static_cast<size_t>(k * vocab_)) q_.resize(static_cast<size_t>(k * vocab_));
    std::vector<int32_t> drafts, hist = h;
    for (int64_t j = 0; j < k; ++j) {
      buf_.assign(l, l + vocab_);
      const std::span<float> q(q_.data() + j * vocab_, static_cast<size_t>(vocab_));
      sampler_.distribution(buf_, hist, q);
      const int32_t t = sampler_.temperature() <= 0.0f
                            ? static_cast<int32_t>(std::max_element(q.begin(), q.end()) - q.begin())
                            : sampler_.draw(q);
      drafts.push_back(t);
      hist.push_back(t);
      if (j + 1 == k) break;
      held_.clear();  // until the forward has run
      l = d_.forward->decode(t, static_cast<int64_t>(n) + j);
      held_.assign(hist.begin(), hist.end());
    }
    return drafts;
  }
  const float* q(int64_t j) const { return q_.data() + j * vocab_; }  // draft j's distribution [vocab]

 private:
  static models::SamplerOptions with_seed(models::SamplerOptions so) {
    so.seed ^= 0x9E3779B97F4A7C15ull;  // a stream of its own, not the target sampler's
    return so;
  }
  const DraftModel& d_;
  models::Sampler sampler_;
  int64_t vocab_;
  std::vector<int32_t> held_;
  std::vector<float> q_, buf_;  // [k, vocab] the drafts' distributions; [vocab]
};

}  // namespace

void check_vocab_fits(int64_t tokenizer_vocab, const std::string& tokenizer_name, int64_t model_vocab,
                      const std::string& model_name) {
  if (!tok::vocab_fits(tokenizer_vocab, model_vocab))
    fail("infer", "vocabulary mismatch: tokenizer ", tokenizer_name, " has ", tokenizer_vocab, " tokens but model ",
         model_name, " has vocab_size ", model_vocab,
         ": the tokenizer belongs to another model (pass the model's own --tokenizer)");
}

void check_tokenizer_fits(const tok::Tokenizer& tk, const std::string& tokenizer_name, int64_t model_vocab,
                          const std::string& model_name) {
  check_vocab_fits(tk.vocab_size(), tokenizer_name, model_vocab, model_name);
}

GenerateResult generate(Engine& e, const tok::Tokenizer& tk, std::string_view prompt, const GenerateOptions& o,
                        const TextSink& sink) {
  tok::EncodeOptions eo;
  eo.add_bos = tk.vocab().kind == tok::TokenizerKind::kSentencePiece || tk.vocab().add_bos;
  std::vector<int32_t> ids = tk.encode(prompt, eo);
  if (ids.empty()) {  // byte-level BPE with no BOS: start from EOS (GPT-2's <|endoftext|> convention)
    ANELAB_CHECK(tk.eos_id() >= 0 || tk.bos_id() >= 0, "infer",
                 "empty prompt and the vocabulary has no BOS/EOS to start from");
    ids.push_back(tk.bos_id() >= 0 ? tk.bos_id() : tk.eos_id());
  }
  return generate_tokens(e, tk, ids, 0, o, sink);
}

GenerateResult generate_tokens(Engine& e, const tok::Tokenizer& tk, const std::vector<int32_t>& prompt, int64_t cached,
                               const GenerateOptions& o, const TextSink& sink) {
  return generate_tokens(e, &tk, prompt, cached, o, sink);
}

int64_t reusable_prefix(const Engine& e, int64_t common) {
  return e.state_bytes() > 0 && common != e.state_pos() ? 0 : common;
}

GenerateResult generate_tokens(Engine& e, const tok::Tokenizer* tk, const std::vector<int32_t>& prompt, int64_t cached,
                               const GenerateOptions& o, const TextSink& sink) {
  GenerateResult r;
  r.prompt_tokens = prompt;
  const int64_t n = static_cast<int64_t>(prompt.size());
  ANELAB_CHECK(n >= 1, "infer", "prompt has no tokens");
  ANELAB_CHECK(n <= e.context(), "infer", "prompt of ", n, " tokens does not fit the context of ", e.context(),
               " positions (use a shorter prompt or a larger --ctx)");
  int64_t steps = (o.steps <= 0 || o.steps > e.context()) ? e.context() : o.steps;
  if (o.max_new_tokens >= 0) steps = std::min(e.context(), n + o.max_new_tokens - 1);
  const int32_t vocab = static_cast<int32_t>(e.config().vocab_size);

  // sampler
  bool runc = o.sampler == SamplerKind::kRunc;
  if (o.sampler == SamplerKind::kAuto)
    runc = is_llama2c(e) && o.sampling.top_k == 0 && o.sampling.min_p == 0.0f && o.sampling.repeat_penalty == 1.0f &&
           o.sampling.frequency_penalty == 0.0f && o.sampling.presence_penalty == 0.0f;
  std::optional<models::RuncSampler> rs;
  std::optional<models::Sampler> gs;
  if (runc)
    rs.emplace(vocab, o.sampling.temperature, o.sampling.top_p, o.sampling.seed);
  else
    gs.emplace(vocab, o.sampling);
  const bool spm = tk && tk->vocab().kind == tok::TokenizerKind::kSentencePiece;

  const auto t0 = Clock::now();
  std::vector<float> logits(static_cast<size_t>(vocab));
  cached = reusable_prefix(e, cached);
  auto prefill = [&](std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all) {
    return o.forward ? o.forward->prefill(tokens, pos, all) : e.prefill(tokens, pos, all);
  };
  const float* lp = prefill(std::span<const int32_t>(prompt).subspan(static_cast<size_t>(cached)), cached, nullptr);
  r.prefill = o.forward ? o.forward->last_prefill() : e.last_prefill();
  r.prefill_ms = ms_since(t0);

  // The prompt is echoed after the prefill, so that what the prefill prints on stderr (the MIL kernels'
  // compile lines) comes before it and never inside the echoed line.
  StopFilter out(o.stop_strings, sink, r.text);
  if (o.echo_prompt && tk) {
    // run.c starts its echo after position 0 because that is the BOS it added. Vocabularies without BOS
    // (GPT-2, Qwen) start with the first text token, which is echoed too; only a start token is skipped.
    const bool start_token = prompt[0] == tk->bos_id() || prompt[0] == tk->eos_id();
    for (int64_t i = start_token ? 1 : 0; i < n; ++i) {
      const int32_t prev = i == 0 ? -1 : prompt[static_cast<size_t>(i - 1)];
      const std::string p = tk->decode_token(prev, prompt[static_cast<size_t>(i)]);
      if (safe_piece(p)) out.push(p);
    }
  }
  out.flush();
  std::vector<int32_t> history = prompt;
  int32_t token = prompt.back();
  r.stop_reason = "length";
  // Speculative decoding: logits of positions spec_from.. computed in one pass for the tokens spec_in (the
  // sampled token, then drafts); a row is used while the tokens sampled so far equal spec_in.
  ANELAB_CHECK(o.draft_max <= 0 || e.state_bytes() == 0, "infer",
               "speculative decoding (--draft-max) is not supported on ", e.config().arch,
               ": its linear-attention layers' recurrent state cannot roll back rejected drafts");
  const float* spec_rows = nullptr;  // [spec_in, vocab]: the engine's (or forward's) rows, valid until its next call
  std::vector<int32_t> spec_in;
  int64_t spec_from = -1;
  std::optional<Drafter> drafter;
  if (o.draft_max > 0 && o.draft.forward) {
    ANELAB_CHECK(o.draft.vocab == vocab, "infer", "the draft model's vocab_size ", o.draft.vocab,
                 " is not the target's ", vocab);
    drafter.emplace(o.draft, o.sampling, vocab);
  }
  // The standard acceptance rule (GenerateOptions::draft) where sampling draws at random; else each position is
  // sampled from its own logits.
  const bool accept_rule = drafter && !runc && o.sampling.temperature > 0.0f;
  std::vector<float> p_row, residual;  // [vocab] the target's distribution at a verified position, max(0, p - q)
  if (accept_rule) p_row.resize(static_cast<size_t>(vocab)), residual.resize(static_cast<size_t>(vocab));
  auto logits_after = [&](int32_t tok, int64_t p) -> const float* {  // logits after tok at position p
    const int64_t i = p - spec_from;
    if (spec_from >= 0 && i > 0 && i < static_cast<int64_t>(spec_in.size()) && spec_in[static_cast<size_t>(i)] == tok) {
      ++r.accepted;
      return spec_rows + i * vocab;
    }
    spec_from = -1;
    const int64_t room = steps - p - 1;  // positions after p that generation may still fill
    std::vector<int32_t> drafts;
    const int64_t most = std::min({int64_t{o.draft_max}, room, e.max_batch_rows() - 1});
    if (o.draft_max > 0 && room > 0 && drafter)
      drafts = drafter->draft(history, most);
    else if (o.draft_max > 0 && room > 0)
      drafts = lookup_drafts(history, o.draft_ngram, o.draft_ngram_min, most);
    if (drafts.empty()) return o.forward ? o.forward->decode(tok, p) : e.decode(tok, p);
    spec_in.assign(1, tok);
    spec_in.insert(spec_in.end(), drafts.begin(), drafts.end());
    spec_rows = o.forward ? o.forward->decode_run(spec_in, p) : e.decode_run(spec_in, p);
    spec_from = p;
    r.drafted += static_cast<int64_t>(drafts.size());
    ++r.batched_passes;
    return spec_rows;
  };
  const auto t1 = Clock::now();
  for (int64_t pos = n; pos <= steps; ++pos) {  // logits of position pos-1 -> token at pos
    if (pos > n) lp = logits_after(token, pos - 1);
    std::copy(lp, lp + vocab, logits.begin());
    if (o.ignore_eos && tk && tk->eos_id() >= 0 && tk->eos_id() < vocab)
      logits[static_cast<size_t>(tk->eos_id())] = -std::numeric_limits<float>::infinity();
    if (o.constraint) {
      if (o.constraint->finished()) {
        r.stop_reason = "grammar";
        break;
      }
      o.constraint->mask(logits);
    }
    const int64_t verify = spec_from >= 0 ? pos - spec_from : 0;  // spec_in[verify]: the draft for position pos
    int32_t next = 0;
    if (accept_rule && verify > 0 && verify < static_cast<int64_t>(spec_in.size())) {
      const int32_t d = spec_in[static_cast<size_t>(verify)];
      const float* q = drafter->q(verify - 1);
      gs->distribution(logits, history, p_row);
      const float pd = p_row[static_cast<size_t>(d)], qd = q[d];
      if (pd >= qd || gs->uniform() * qd < pd) {  // kept with probability min(1, p(d) / q(d))
        next = d;
      } else {
        for (int32_t i = 0; i < vocab; ++i)
          residual[static_cast<size_t>(i)] = std::max(0.0f, p_row[static_cast<size_t>(i)] - q[i]);
        next = gs->draw(residual);
      }
    } else {
      next = runc ? rs->sample(logits) : gs->sample(logits, history);
    }
    if (pos == n) r.ttft_ms = ms_since(t0);
    if (tk && !o.ignore_eos && next == (spm ? tk->bos_id() : tk->eos_id())) {
      r.stop_reason = "eos";
      break;
    }
    if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next) != o.stop_tokens.end()) {
      r.stop_reason = "stop_token";
      break;
    }
    if (o.constraint) o.constraint->accept(next);
    if (tk && next >= tk->vocab_size())
      fail("infer", "vocabulary mismatch: the model produced token id ", next, " but the tokenizer (", tk->describe(),
           ") has only ", tk->vocab_size(), " tokens: it belongs to another model (pass the model's own --tokenizer)");
    r.new_tokens.push_back(next);
    if (o.logprobs >= 0) {
      r.logprobs.push_back(token_logprob(lp, vocab, next, o.logprobs));
      if (o.on_logprob) o.on_logprob(r.logprobs.back());
    }
    history.push_back(next);
    const std::string p = tk ? tk->decode_token(token, next) : std::string();
    token = next;
    // run.c's filter drops lone non-printable bytes; under a grammar every byte is part of the text it accepted
    // (UTF-8 it validated), so all are kept.
    if ((o.constraint ? !p.empty() : safe_piece(p)) && out.push(p)) {
      r.stop_reason = "stop_string";
      break;
    }
    if (pos == e.context() && o.max_new_tokens >= 0 && pos < n + o.max_new_tokens - 1) r.stop_reason = "context";
  }
  r.decode_ms = ms_since(t1);
  out.flush();
  if (o.final_newline) {
    r.text += "\n";
    if (sink) sink("\n");
  }
  return r;
}

// ---- chat -------------------------------------------------------------------------------------------

Chat::Chat(Engine& e, const tok::Tokenizer& tk, tok::ChatTemplate t, std::string system, bool enable_thinking)
    : e_(e), tk_(tk), t_(t), enable_thinking_(enable_thinking) {
  if (!system.empty()) messages_.push_back({"system", std::move(system)});
}

std::vector<int32_t> Chat::render(bool add_generation_prompt) const {
  tok::EncodeOptions eo;
  eo.allow_special = true;
  return tk_.encode(tok::apply_chat_template(t_, messages_, add_generation_prompt, enable_thinking_), eo);
}

std::string Chat::turn(const std::string& user, GenerateOptions o, const TextSink& sink, GenerateResult* info) {
  messages_.push_back({"user", user});
  std::vector<int32_t> ids = render(true);
  const int64_t reserve = std::max<int64_t>(16, o.max_new_tokens > 0 ? o.max_new_tokens : 256);
  // Drop the oldest non-system turns until the prompt plus the reply fit.
  while (static_cast<int64_t>(ids.size()) + reserve > e_.context() && messages_.size() > 2) {
    messages_.erase(messages_.begin() + (messages_.front().role == "system" ? 1 : 0));
    ids = render(true);
    cached_.clear();
  }
  int64_t common = 0;
  while (common < static_cast<int64_t>(std::min(ids.size(), cached_.size())) - 0 &&
         ids[static_cast<size_t>(common)] == cached_[static_cast<size_t>(common)])
    ++common;
  common = std::min<int64_t>(common, static_cast<int64_t>(ids.size()) - 1);  // prefill at least one token
  o.echo_prompt = false;
  o.final_newline = false;
  for (int32_t id : tok::chat_stop_ids(t_, tk_)) o.stop_tokens.push_back(id);
  if (o.max_new_tokens < 0) o.max_new_tokens = reserve;
  GenerateResult r = generate_tokens(e_, tk_, ids, common, o, sink);
  // Cache now holds ids plus all generated tokens except the last one.
  cached_ = ids;
  if (!r.new_tokens.empty()) cached_.insert(cached_.end(), r.new_tokens.begin(), r.new_tokens.end() - 1);
  std::string reply = tk_.decode(r.new_tokens);
  messages_.push_back({"assistant", reply});
  if (info) *info = std::move(r);
  return reply;
}

}  // namespace anelab::infer
