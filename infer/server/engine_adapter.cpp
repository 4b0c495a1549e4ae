#include "infer/server/engine_adapter.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <mutex>
#include <random>

#include "framework/core/error.h"
#include "infer/batch.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "infer/load.h"
#include "infer/prefill_mil.h"
#include "infer/server/prompt_store.h"
#include "models/grammar/token_constraint.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::serve {
namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Cancelled {};  // thrown from the text sink or a forward to leave generate_tokens at the next token

// A batcher slot that stops at the next step once the job is cancelled (client gone, streamed or not; shutdown), so
// the slot is free for the next job without waiting for a token that prints.
class CancellableForward final : public infer::Forward {
 public:
  CancellableForward(infer::Forward& f, const Job& job) : f_(f), job_(job) {}
  const float* prefill(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits) override {
    check();
    return f_.prefill(tokens, pos, all_logits);
  }
  const float* decode(int32_t token, int64_t pos) override {
    check();
    return f_.decode(token, pos);
  }
  const float* decode_run(std::span<const int32_t> tokens, int64_t pos) override {
    check();
    return f_.decode_run(tokens, pos);
  }
  infer::PrefillStats last_prefill() const override { return f_.last_prefill(); }

 private:
  void check() const {
    if (job_.cancel.load(std::memory_order_relaxed)) throw Cancelled{};
  }
  infer::Forward& f_;
  const Job& job_;
};

ApiError bad_request(std::string msg, std::string param, std::string code) {
  return ApiError{400, std::move(msg), "invalid_request_error", std::move(param), std::move(code)};
}

// The 400 of a LoRA list entry (`field` "lora[i]" or "[i]") whose id is not one of the `count` adapters.
ApiError lora_id_error(const std::string& field, int64_t id, size_t count) {
  return bad_request(field + ".id " + std::to_string(id) + " is not an adapter (" +
                         (count == 0 ? std::string("the server has none: --lora FILE loads one")
                                     : "ids 0.." + std::to_string(count - 1)) +
                         ")",
                     field + ".id", "");
}

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lk(mu);
  uint64_t s = 0;
  while (s == 0) s = rng();
  return s;
}

}  // namespace

struct ModelPool::Impl {
  ModelOptions opt;
  std::unique_ptr<tok::Tokenizer> tk;
  std::vector<std::unique_ptr<infer::Engine>> engines;  // one with a slot per worker, or one per worker
  std::unique_ptr<infer::Batcher> batcher;              // over engines[0] when it has the slots; else null
  std::string arch, source_format;
  std::vector<int32_t> chat_stops;  // tok::chat_stop_ids
  tok::ChatTemplate chat = tok::ChatTemplate::kNone;
  int64_t created = 0;
  std::shared_ptr<const grammar::TokenPieces> pieces;  // for structured output, built once at load
  // The prompt cache: per worker, the tokens whose K/V its slot holds at positions 0.. (empty while it generates: its
  // K/V are in flux then). Under cache_mu: a worker reads the others' to take the longest cached prefix of its prompt
  // from any idle slot (Engine::copy_kv into its own), and changes its own only there.
  std::vector<std::vector<int32_t>> cached;
  std::vector<std::vector<float>> cached_lora;  // [workers]: the LoRA scales the held K/V were computed with
  // The runtime adapters (LoadOptions::lora, in order) and their global scales (POST /lora-adapters).
  mutable std::mutex lora_mu;
  std::vector<float> lora_global;  // [adapters], under lora_mu
  std::mutex cache_mu;
  std::unique_ptr<PromptStore> store;  // --cache-ram: sequences evicted from the slots (under cache_mu)
  std::vector<char> busy;              // [workers] under cache_mu: 1 while the worker runs a job
  std::string weights_hash;            // slot_weights_hash of the model as loaded
  std::string adapters_hash;           // slot_adapters_hash of its runtime adapters
  SlotFingerprint fingerprint;         // of the model, for slot files (--slot-save-path)
  // The draft model (ModelOptions::draft_model): an engine with a slot per worker and its batcher, whose slot w a
  // worker joins only while drafting; per worker the tokens its slot holds (infer::DraftModel::held).
  std::unique_ptr<infer::Engine> draft;
  std::unique_ptr<infer::Batcher> draft_batcher;
  std::vector<std::vector<int32_t>> draft_held;

  // An engine with `slots` slots (1 for a model with a recurrent state); the tokenizer is loaded with the first.
  std::unique_ptr<infer::Engine> make_engine(int64_t slots) {
    infer::LoadOptions lo = opt.load;
    lo.quiet = true;
    lo.component = "serve";
    lo.lora_runtime = true;
    infer::LoadedModel l = infer::load_model(lo, tk ? infer::TokenizerUse::kNone : infer::TokenizerUse::kRequired);
    l.engine.slots = infer::has_recurrent_state(l.model.config) ? 1 : slots;
    if (!tk) {
      tk = std::move(l.tokenizer);
      chat = l.chat;
    }
    arch = l.model.config.arch;
    source_format = l.model.source_format;
    if (weights_hash.empty()) {
      weights_hash = slot_weights_hash(l.model);  // before the engine may tile its bytes
      adapters_hash = slot_adapters_hash(l.adapters);
    }
    auto e = std::make_unique<infer::Engine>(std::move(l.model), l.engine);
    for (models::LoraAdapter& a : l.adapters) e->add_lora(std::move(a));
    return e;
  }

  // Compiles the prefill kernels of every bucket up to warmup_tokens (MIL backends compile on first use).
  void warmup(infer::Engine& e) const {
    const int64_t ctx = e.context();
    const int64_t limit = std::clamp<int64_t>(opt.warmup_tokens, 1, ctx);
    const int32_t fill = std::max<int32_t>(0, tk->bos_id());
    if (e.options().backend == "cpu") {
      e.prefill(std::vector<int32_t>(1, fill), 0);
      return;
    }
    for (int64_t n = 1;;) {
      const int64_t b = infer::prefill_bucket(n, ctx);
      e.prefill(std::vector<int32_t>(static_cast<size_t>(b), fill), 0);
      if (b >= limit) break;
      n = b + 1;
    }
  }

  // Under cache_mu, before worker w's job: makes the slot of w (in engine e) hold the longest cached prefix of
  // p.prompt with p's LoRA scales, from the slot itself, another idle slot of the engine (Engine::copy_kv) or the
  // store (Engine::restore_seq), and returns its length. The sequence the slot held moves into the store first when
  // the job would overwrite some of it (a recurrent state only when it is at that sequence's end).
  size_t take_prefix(infer::Engine& e, size_t w, const GenParams& p) {
    const int64_t slot = batcher ? static_cast<int64_t>(w) : 0;
    std::vector<int32_t>& held = cached[w];
    auto common = [&](const std::vector<int32_t>& h) {
      size_t c = 0;
      while (c < h.size() && c + 1 < p.prompt.size() && h[c] == p.prompt[c]) ++c;
      return c;
    };
    // K/V computed with other adapter scales are not this request's: only a sequence of the same scales is reused.
    size_t reuse = p.cache_prompt && cached_lora[w] == p.lora ? common(held) : 0;
    reuse = static_cast<size_t>(infer::reusable_prefix(e, static_cast<int64_t>(reuse)));
    size_t from = w;
    if (p.cache_prompt && batcher)
      for (size_t v = 0; v < cached.size(); ++v) {  // a slot that generates holds no tokens (cached[v] empty)
        if (v == w || cached_lora[v] != p.lora) continue;
        if (const size_t c = common(cached[v]); c > reuse) reuse = c, from = v;
      }
    std::shared_ptr<const PromptStore::Entry> entry;
    if (p.cache_prompt && store->enabled())
      if (auto [x, c] = store->find(p.prompt, p.lora); x && c > reuse) entry = std::move(x), reuse = c;
    const size_t kept = entry || from != w ? 0 : reuse;  // the slot's own tokens that stay
    if (store->enabled() && kept < held.size() &&
        (e.state_bytes() == 0 || static_cast<int64_t>(held.size()) == e.state_pos()) &&
        !store->covers(held, cached_lora[w]))
      store->put({held, cached_lora[w], e.save_seq(slot, static_cast<int64_t>(held.size()))});
    if (entry) {
      e.restore_seq(slot, entry->seq);
      store->count_hit(reuse);
    } else if (from != w) {
      e.copy_kv(static_cast<int64_t>(from), slot, static_cast<int64_t>(reuse));
    }
    held.clear();  // until this generation has finished, the slot's K/V are in flux
    cached_lora[w] = p.lora;
    return reuse;
  }

  infer::Engine& engine_of(size_t w) { return *engines.at(batcher ? 0 : w); }

  std::vector<int32_t> encode_text(const std::string& text) const {
    // As infer::generate(): BOS for SentencePiece vocabularies or when the vocab asks for it.
    tok::EncodeOptions eo;
    eo.add_bos = tk->vocab().kind == tok::TokenizerKind::kSentencePiece || tk->vocab().add_bos;
    std::vector<int32_t> ids = tk->encode(text, eo);
    if (ids.empty()) {
      ANELAB_CHECK(tk->eos_id() >= 0 || tk->bos_id() >= 0, "serve", "empty prompt and the vocabulary has no BOS/EOS");
      ids.push_back(tk->bos_id() >= 0 ? tk->bos_id() : tk->eos_id());
    }
    return ids;
  }

  std::vector<int32_t> encode_chat(const std::vector<tok::ChatMessage>& msgs, bool enable_thinking,
                                   const std::vector<std::string>& tools) const {
    tok::EncodeOptions eo;
    eo.allow_special = true;  // as infer::Chat
    return tk->encode(tok::apply_chat_template(chat, msgs, true, enable_thinking, tools), eo);
  }
};

ModelPool::ModelPool(const ModelOptions& o, size_t workers) : impl_(std::make_unique<Impl>()) {
  impl_->opt = o;
  if (impl_->opt.name.empty()) impl_->opt.name = std::filesystem::path(o.load.model).filename().string();
  impl_->created = static_cast<int64_t>(std::time(nullptr));
  auto say = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };
  auto t0 = Clock::now();
  const size_t n = std::max<size_t>(1, workers);
  say("loading " + o.load.model + (n > 1 ? " (" + std::to_string(n) + " slots)" : "") + " ...");
  impl_->engines.push_back(impl_->make_engine(static_cast<int64_t>(n)));
  if (impl_->engines.front()->options().slots == static_cast<int64_t>(n)) {
    impl_->batcher = std::make_unique<infer::Batcher>(*impl_->engines.front(), o.batch_chunk);
  } else {  // a recurrent state holds one sequence: an engine per worker
    if (impl_->opt.load.mmap == "auto") impl_->opt.load.mmap = "on";
    say("the model's linear-attention layers keep one recurrent state per engine: " + std::to_string(n) +
        " engines, one per worker, without batching");
    for (size_t w = 1; w < n; ++w) {
      say("loading " + o.load.model + " (worker " + std::to_string(w + 1) + " of " + std::to_string(n) + ")" + " ...");
      impl_->engines.push_back(impl_->make_engine(1));
    }
  }
  if (!o.draft_model.empty()) {
    infer::Engine& target = *impl_->engines.front();
    ANELAB_CHECK(impl_->batcher, "serve", "--model-draft: ", o.load.model,
                 " has linear-attention layers (speculative decoding cannot roll back their recurrent state)");
    say("loading the draft model " + o.draft_model + " ...");
    infer::LoadOptions lo = impl_->opt.load;
    lo.quiet = true;
    lo.component = "serve";
    infer::LoadedModel d = infer::load_draft_model(lo, o.draft_model, target.context(), static_cast<int64_t>(n),
                                                   target.model(), impl_->tk.get());
    impl_->draft = std::make_unique<infer::Engine>(std::move(d.model), d.engine);
    ANELAB_CHECK(impl_->draft->context() >= target.context(), "serve", "the draft model ", o.draft_model,
                 " has a context of ", impl_->draft->context(), " positions, less than the ", target.context(), " of ",
                 o.load.model, " (pass a smaller --ctx)");
    impl_->draft_batcher = std::make_unique<infer::Batcher>(*impl_->draft, o.batch_chunk);
    impl_->draft_held.resize(n);
    if (impl_->opt.draft_max == 0) impl_->opt.draft_max = infer::kDefaultDraftMax;
  }
  load_ms_ = ms_since(t0);
  impl_->cached.resize(n);
  impl_->cached_lora.resize(n);
  impl_->busy.assign(n, 0);
  const int64_t store_bytes = o.cache_ram_mib < 0 ? std::numeric_limits<int64_t>::max() : o.cache_ram_mib << 20;
  impl_->store = std::make_unique<PromptStore>(store_bytes, impl_->engines.front()->state_bytes() > 0);
  impl_->fingerprint = slot_fingerprint(*impl_->engines.front(), impl_->weights_hash, impl_->adapters_hash);
  for (size_t i = 0; i < o.load.lora.size(); ++i)
    impl_->lora_global.push_back(i < o.load.lora_scale.size() ? o.load.lora_scale[i] : 1.0f);
  impl_->chat_stops = tok::chat_stop_ids(impl_->chat, *impl_->tk);
  impl_->pieces = std::make_shared<const grammar::TokenPieces>(*impl_->tk, impl_->engines.front()->config().vocab_size);
  t0 = Clock::now();
  if (o.warmup_tokens > 0)
    for (auto& e : impl_->engines) {
      if (e->options().backend != "cpu")
        say("warm-up: compiling the " + e->options().backend + " prefill kernels for prompts of up to " +
            std::to_string(o.warmup_tokens) + " tokens ...");
      impl_->warmup(*e);
    }
  warmup_ms_ = ms_since(t0);
}

ModelPool::~ModelPool() = default;

int64_t ModelPool::context() const { return impl_->engines.front()->context(); }

std::optional<ApiError> ModelPool::prepare(const CompletionRequest& r, GenParams& out) const {
  const Impl& m = *impl_;
  out = GenParams{};
  try {
    if (r.endpoint == Endpoint::kChat || r.system) {
      if (m.chat == tok::ChatTemplate::kNone)
        return bad_request(tok::no_chat_template_hint("model '" + m.opt.name + "'"),
                           r.endpoint == Endpoint::kChat ? "messages" : "system", "no_chat_template");
      std::vector<tok::ChatMessage> msgs;
      if (r.endpoint == Endpoint::kChat) {
        for (const auto& x : r.messages) {
          tok::ChatMessage cm{x.role, x.content, {}};
          for (const auto& c : x.tool_calls) cm.tool_calls.push_back({c.name, c.arguments});
          msgs.push_back(std::move(cm));
        }
      } else {
        if (r.prompt_is_ids) return bad_request("'system' needs a text prompt", "system", "");
        msgs = {{"system", *r.system}, {"user", r.prompt}};
      }
      out.prompt = m.encode_chat(msgs, r.enable_thinking, r.tools);
      out.stop_tokens.insert(out.stop_tokens.end(), m.chat_stops.begin(), m.chat_stops.end());
    } else if (r.prompt_is_ids) {
      for (int64_t id : r.prompt_ids) {
        if (id < 0 || id >= m.tk->vocab_size())
          return bad_request("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                 std::to_string(m.tk->vocab_size()) + ")",
                             "prompt", "");
        out.prompt.push_back(static_cast<int32_t>(id));
      }
    } else {
      out.prompt = m.encode_text(r.prompt);
    }
  } catch (const std::exception& e) {
    return bad_request(std::string("cannot tokenize the prompt: ") + e.what(),
                       r.endpoint == Endpoint::kChat ? "messages" : "prompt", "");
  }
  const int64_t n = static_cast<int64_t>(out.prompt.size()), ctx = context();
  if (n < 1) return bad_request("the prompt has no tokens", "prompt", "");
  // Generation fills positions n .. n + max - 1 <= ctx (the last token needs no cache slot). A prompt over the
  // context is refused; max_tokens past what it leaves is clamped, with a note in the answer (llama.cpp clamps too).
  if (n > ctx)
    return bad_request("This model's maximum context length is " + std::to_string(ctx) + " tokens; the prompt has " +
                           std::to_string(n) + " tokens",
                       r.endpoint == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded");
  out.max_new_tokens = std::min<int64_t>(r.max_tokens, ctx - n + 1);
  if (r.max_tokens_set && out.max_new_tokens < r.max_tokens)
    out.note = "max_tokens " + std::to_string(r.max_tokens) + " was clamped to " + std::to_string(out.max_new_tokens) +
               ": the prompt's " + std::to_string(n) + " tokens leave that much of the context of " +
               std::to_string(ctx);
  out.temperature = static_cast<float>(r.temperature);
  out.top_p = static_cast<float>(r.top_p);
  out.min_p = static_cast<float>(r.min_p);
  out.repeat_penalty = static_cast<float>(r.repeat_penalty);
  out.frequency_penalty = static_cast<float>(r.frequency_penalty);
  out.presence_penalty = static_cast<float>(r.presence_penalty);
  out.top_k = static_cast<int32_t>(r.top_k);
  out.seed = (r.seed && *r.seed != 0) ? *r.seed : random_seed();
  out.stop = r.stop;
  out.echo = r.echo;
  out.grammar = r.grammar;
  out.tool_form = tok::tool_call_form(m.chat);
  if (!r.forced_tools.empty() && out.tool_form != tok::ToolCallForm::kTagged) {
    try {
      out.grammar = forced_tool_grammar(out.tool_form, r.forced_tools);
    } catch (const std::exception& e) {  // parse_request built the tagged form of the same schemas: not reached
      return bad_request(std::string("'tools': a parameters schema cannot be enforced: ") + e.what(), "tools",
                         "invalid_schema");
    }
  }
  out.logprobs = static_cast<int32_t>(r.logprobs);
  out.cache_prompt = r.cache_prompt;
  out.stream = r.stream;
  {
    std::lock_guard<std::mutex> lk(m.lora_mu);
    out.lora = m.lora_global;
  }
  if (r.lora) {  // llama.cpp: the listed adapters at their scales, every other one at 0
    std::fill(out.lora.begin(), out.lora.end(), 0.0f);
    for (size_t i = 0; i < r.lora->size(); ++i) {
      const LoraScale& x = (*r.lora)[i];
      if (x.id >= static_cast<int64_t>(out.lora.size()))
        return lora_id_error("lora[" + std::to_string(i) + "]", x.id, out.lora.size());
      out.lora[static_cast<size_t>(x.id)] = static_cast<float>(x.scale);
    }
  }
  return std::nullopt;
}

nlohmann::json ModelPool::lora_adapters() const {
  std::lock_guard<std::mutex> lk(impl_->lora_mu);
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < impl_->lora_global.size(); ++i)
    out.push_back({{"id", i}, {"path", impl_->opt.load.lora[i]}, {"scale", impl_->lora_global[i]}});
  return out;
}

std::optional<ApiError> Generator::set_lora(const std::vector<LoraScale>& scales) {
  if (scales.empty()) return std::nullopt;
  return lora_id_error("[0]", scales[0].id, 0);
}

std::optional<ApiError> ModelPool::set_lora(const std::vector<LoraScale>& scales) {
  std::lock_guard<std::mutex> lk(impl_->lora_mu);
  std::vector<float> g(impl_->lora_global.size(), 0.0f);
  for (size_t i = 0; i < scales.size(); ++i) {
    if (scales[i].id >= static_cast<int64_t>(g.size()))
      return lora_id_error("[" + std::to_string(i) + "]", scales[i].id, g.size());
    g[static_cast<size_t>(scales[i].id)] = static_cast<float>(scales[i].scale);
  }
  impl_->lora_global = std::move(g);
  return std::nullopt;
}

GenOutcome ModelPool::run(size_t w, Job& job) {
  infer::Engine& e = *impl_->engines.at(impl_->batcher ? 0 : w);
  const GenParams& p = job.params;
  infer::GenerateOptions o;
  o.max_new_tokens = p.max_new_tokens;
  o.sampling.temperature = p.temperature;
  o.sampling.top_p = p.top_p;
  o.sampling.top_k = p.top_k;
  o.sampling.min_p = p.min_p;
  o.sampling.repeat_penalty = p.repeat_penalty;
  o.sampling.frequency_penalty = p.frequency_penalty;
  o.sampling.presence_penalty = p.presence_penalty;
  o.sampling.seed = p.seed;
  o.stop_strings = p.stop;
  o.stop_tokens = p.stop_tokens;
  o.echo_prompt = p.echo;
  o.final_newline = false;
  o.logprobs = p.logprobs;
  o.draft_max = impl_->opt.draft_max;
  GenOutcome out;
  int32_t lp_prev = p.prompt.back();
  if (p.logprobs >= 0)  // each token's entry with its text: to the stream as it comes, else into the outcome
    o.on_logprob = [&](const infer::TokenLogprob& t) {
      const tok::Tokenizer& tk = *impl_->tk;
      auto piece = [&](int32_t id) { return id < tk.vocab_size() ? tk.decode_token(lp_prev, id) : ""; };
      TokenLogprobText x{piece(t.id), t.logprob, {}};
      for (const auto& [id, lp] : t.top) x.top.emplace_back(piece(id), lp);
      lp_prev = t.id;
      if (p.stream)
        job.push_logprob(std::move(x));
      else
        out.logprobs.push_back(std::move(x));
    };
  std::optional<grammar::GrammarConstraint> constraint;
  if (p.grammar) {
    const tok::Tokenizer& tk = *impl_->tk;
    std::vector<int32_t> ends = p.stop_tokens;
    for (int32_t id : {tk.eos_id(), tk.vocab().kind == tok::TokenizerKind::kSentencePiece ? tk.bos_id() : -1})
      if (id >= 0) ends.push_back(id);
    constraint.emplace(p.grammar, impl_->pieces, std::move(ends), p.prompt.back());
    o.constraint = &*constraint;
  }
  out.usage.queue_ms = std::chrono::duration<double, std::milli>(job.started - job.enqueued).count();
  out.usage.prompt_tokens = static_cast<int64_t>(p.prompt.size());
  const auto t0 = Clock::now();
  // The prompt cache: the longest cached prefix of the prompt is not prefilled again (at least the last prompt token
  // is, for its logits): Impl::take_prefix.
  std::vector<int32_t>& held = impl_->cached[w];
  size_t reuse = 0;
  {
    std::lock_guard<std::mutex> lk(impl_->cache_mu);
    impl_->busy[w] = 1;
    reuse = impl_->take_prefix(e, w, p);
  }
  struct NotBusy {  // however the job ends
    Impl& m;
    size_t w;
    ~NotBusy() {
      std::lock_guard<std::mutex> lk(m.cache_mu);
      m.busy[w] = 0;
    }
  } not_busy{*impl_, w};
  out.usage.cached_tokens = static_cast<int64_t>(reuse);
  e.set_lora_scales(impl_->batcher ? static_cast<int64_t>(w) : 0, p.lora);  // before the slot joins the steps
  std::optional<infer::Batcher::Active> active;  // this worker's slot takes part in the steps while it generates
  std::optional<CancellableForward> forward;
  if (impl_->batcher) {
    active.emplace(*impl_->batcher, static_cast<int64_t>(w));
    forward.emplace(impl_->batcher->slot(static_cast<int64_t>(w)), job);
    o.forward = &*forward;
  }
  if (impl_->draft_batcher) {
    infer::Batcher& db = *impl_->draft_batcher;
    const auto s = static_cast<int64_t>(w);
    o.draft.forward = &db.slot(s);
    o.draft.vocab = impl_->draft->config().vocab_size;
    o.draft.held = &impl_->draft_held[w];
    o.draft.begin = [&db, s] { db.begin(s); };
    o.draft.end = [&db, s] { db.end(s); };
  }
  try {
    const infer::GenerateResult r =
        infer::generate_tokens(e, *impl_->tk, p.prompt, static_cast<int64_t>(reuse), o, [&](std::string_view s) {
          if (job.cancel.load(std::memory_order_relaxed)) throw Cancelled{};
          out.text.append(s);
          job.push_text(s);
        });
    out.stop_reason = r.stop_reason;
    out.usage.completion_tokens = static_cast<int64_t>(r.new_tokens.size());
    out.usage.prefill_ms = r.prefill_ms;
    out.usage.decode_ms = r.decode_ms;
    out.usage.ttft_ms = r.ttft_ms + out.usage.queue_ms;
    out.usage.drafted = r.drafted;
    out.usage.accepted = r.accepted;
    // K/V now hold the prompt and every generated token but the last (sampled, never decoded).
    std::lock_guard<std::mutex> lk(impl_->cache_mu);
    held = p.prompt;
    if (!r.new_tokens.empty()) held.insert(held.end(), r.new_tokens.begin(), r.new_tokens.end() - 1);
  } catch (const Cancelled&) {
    out.stop_reason = "cancelled";
  }
  out.usage.total_ms = out.usage.queue_ms + ms_since(t0);
  return out;
}

std::optional<ApiError> Generator::tokenize(const std::string&, bool, std::vector<int32_t>&,
                                            std::vector<std::string>*) const {
  return ApiError{501, "this server has no tokenizer", "server_error", "", "not_implemented"};
}

std::optional<ApiError> Generator::detokenize(const std::vector<int64_t>&, std::string&) const {
  return ApiError{501, "this server has no tokenizer", "server_error", "", "not_implemented"};
}

std::optional<ApiError> ModelPool::tokenize(const std::string& text, bool add_special, std::vector<int32_t>& ids,
                                            std::vector<std::string>* pieces) const {
  const tok::Tokenizer& tk = *impl_->tk;
  try {
    tok::EncodeOptions eo;
    eo.add_bos = add_special && (tk.vocab().kind == tok::TokenizerKind::kSentencePiece || tk.vocab().add_bos);
    ids = tk.encode(text, eo);
  } catch (const std::exception& e) {
    return bad_request(std::string("cannot tokenize 'content': ") + e.what(), "content", "");
  }
  if (pieces) {
    pieces->clear();
    for (size_t i = 0; i < ids.size(); ++i) pieces->push_back(tk.decode_token(i ? ids[i - 1] : -2, ids[i]));
  }
  return std::nullopt;
}

std::optional<ApiError> ModelPool::detokenize(const std::vector<int64_t>& ids, std::string& text) const {
  const tok::Tokenizer& tk = *impl_->tk;
  std::vector<int32_t> v;
  for (int64_t id : ids) {
    if (id < 0 || id >= tk.vocab_size())
      return bad_request(
          "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(tk.vocab_size()) + ")",
          "tokens", "");
    v.push_back(static_cast<int32_t>(id));
  }
  text = tk.decode(v);
  return std::nullopt;
}

BatchFigures ModelPool::batch() const {
  BatchFigures f;
  if (!impl_->batcher) return f;
  const infer::Batcher::Stats st = impl_->batcher->stats();
  f.batched = true;
  f.steps = st.steps, f.decode_tokens = st.decode_tokens;
  f.prefill_tokens = st.prefill_tokens, f.prefill_chunks = st.prefill_chunks;
  f.decode_s = st.decode_s, f.prefill_s = st.prefill_s, f.between_s = st.between_s;
  f.last_batch = st.last_batch;
  f.batch_sizes = st.batch_sizes;
  for (const auto& s : st.slots)
    f.slots.push_back({infer::Batcher::state_name(s.state), s.pos, s.decoded, s.prefilled});
  return f;
}

std::optional<ApiError> Generator::slot_action(size_t, SlotAction, const std::string&, nlohmann::json&) {
  return ApiError{501, "this server has no slot files", "server_error", "", "not_supported"};
}

std::optional<ApiError> ModelPool::slot_action(size_t w, SlotAction a, const std::string& filename,
                                               nlohmann::json& out) {
  Impl& m = *impl_;
  if (w >= m.cached.size())
    return bad_request(
        "id_slot " + std::to_string(w) + " is not a slot (ids 0.." + std::to_string(m.cached.size() - 1) + ")",
        "id_slot", "");
  auto busy = [&] {
    return ApiError{409, "slot " + std::to_string(w) + " is generating: retry once it is idle", "invalid_request_error",
                    "id_slot", "slot_busy"};
  };
  const auto t0 = Clock::now();
  infer::Engine& e = m.engine_of(w);
  const int64_t slot = m.batcher ? static_cast<int64_t>(w) : 0;
  if (a == SlotAction::kErase) {  // the slot's cached tokens are forgotten (its rows are overwritten by the next job)
    std::lock_guard<std::mutex> lk(m.cache_mu);
    if (m.busy[w]) return busy();
    out = {{"id_slot", w}, {"n_erased", m.cached[w].size()}};
    m.cached[w].clear();
    return std::nullopt;
  }
  if (m.opt.slot_save_path.empty())
    return ApiError{501, "slot save and restore are off: start the server with --slot-save-path DIR", "server_error",
                    "", "not_supported"};
  if (const std::string why = slot_filename_problem(filename); !why.empty())
    return bad_request("filename '" + filename + "' " + why, "filename", "");
  const std::string path = (std::filesystem::path(m.opt.slot_save_path) / filename).string();
  try {
    if (a == SlotAction::kSave) {
      PromptStore::Entry x;
      {
        std::lock_guard<std::mutex> lk(m.cache_mu);
        if (m.busy[w]) return busy();
        if (m.cached[w].empty())
          return bad_request("slot " + std::to_string(w) + " holds no cached tokens: nothing to save", "id_slot", "");
        if (e.state_bytes() > 0 && static_cast<int64_t>(m.cached[w].size()) != e.state_pos())
          return bad_request("slot " + std::to_string(w) + "'s recurrent state is not at the end of its tokens",
                             "id_slot", "");
        x = {m.cached[w], m.cached_lora[w], e.save_seq(slot, static_cast<int64_t>(m.cached[w].size()))};
      }
      const int64_t written = write_slot_file(path, m.fingerprint, x.tokens, x.lora, x.seq);
      out = {{"id_slot", w},
             {"filename", filename},
             {"n_saved", x.tokens.size()},
             {"n_written", written},
             {"timings", {{"save_ms", ms_since(t0)}}}};
      return std::nullopt;
    }
    if (!std::filesystem::exists(path))
      return bad_request("filename '" + filename + "': no such file in --slot-save-path", "filename", "");
    PromptStore::Entry x;
    const int64_t read = read_slot_file(path, m.fingerprint, x);
    const size_t adapters = m.opt.load.lora.size();
    if (x.lora.size() != adapters)
      return bad_request("slot file " + filename + ": lora holds " + std::to_string(x.lora.size()) +
                             " scales, this server has " + std::to_string(adapters) + " adapters",
                         "filename", "");
    std::lock_guard<std::mutex> lk(m.cache_mu);
    if (m.busy[w]) return busy();
    e.restore_seq(slot, x.seq);
    m.cached[w] = x.tokens;
    m.cached_lora[w] = x.lora;
    out = {{"id_slot", w},
           {"filename", filename},
           {"n_restored", x.tokens.size()},
           {"n_read", read},
           {"timings", {{"restore_ms", ms_since(t0)}}}};
    return std::nullopt;
  } catch (const std::exception& ex) {
    return bad_request(ex.what(), "filename", "");
  }
}

nlohmann::json ModelPool::slot_state(size_t w) const {
  Impl& m = *impl_;
  std::vector<float> scales;
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lk(m.cache_mu);
    if (w < m.cached.size()) scales = m.cached_lora[w], n = m.cached[w].size();
  }
  if (scales.empty()) {
    std::lock_guard<std::mutex> lk(m.lora_mu);
    scales = m.lora_global;
  }
  nlohmann::json lora = nlohmann::json::array();
  for (size_t i = 0; i < scales.size(); ++i) lora.push_back({{"id", i}, {"scale", scales[i]}});
  return {{"lora", lora}, {"n_cached", n}};
}

PromptCacheFigures ModelPool::prompt_cache() const {
  std::lock_guard<std::mutex> lk(impl_->cache_mu);
  const PromptStore::Stats st = impl_->store->stats();
  PromptCacheFigures f;
  f.enabled = impl_->store->enabled();
  f.capacity_bytes = st.capacity, f.bytes = st.bytes, f.entries = st.entries;
  f.hits = st.hits, f.hit_tokens = st.hit_tokens, f.stored = st.stored, f.evicted = st.evicted;
  return f;
}

nlohmann::json ModelPool::info() const {
  const auto& cfg = impl_->engines.front()->config();
  return nlohmann::json{
      {"id", impl_->opt.name},
      {"object", "model"},
      {"created", impl_->created},
      {"owned_by", "anelab"},
      {"arch", impl_->arch},
      {"context_length", context()},
      {"vocab_size", cfg.vocab_size},
      {"n_layers", cfg.n_layers},
      {"dim", cfg.dim},
      {"backend", impl_->engines.front()->options().backend},
      {"chat_template", impl_->chat == tok::ChatTemplate::kNone ? nlohmann::json(nullptr)
                                                                : nlohmann::json(tok::chat_template_name(impl_->chat))},
      {"device", impl_->opt.load.device},
      {"tokenizer", impl_->tk->describe()}};
}

}  // namespace anelab::serve
