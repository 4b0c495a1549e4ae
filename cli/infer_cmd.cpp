// anelab infer generate|chat|bench: text generation with the inference engine (infer/engine.h).
//   generate: stdout = the decoded prompt followed by the continuation, streamed, exactly as llama2.c
//             run.c prints it; timing on stderr. --prompt-ids takes the prompt as token ids, --print-ids
//             prints the generated ids on one line instead of the text.
//   chat:     interactive chat on stdin/stdout with the model's template (Qwen2.5 when its vocabulary has
//             the template's tokens, or --chat-template), history kept within the context; base models
//             are refused with a hint.
//   logits:   teacher-forced logits [T, vocab] of --ids or --prompt as float32 .npy (infer/logits.h), for
//             checking a model against a reference implementation's logits.
//   bench:    prefill / decode tok/s, cold start to first token, peak RSS (random prompt tokens), and
//             J/token of prefill and decode from this machine's power source (framework/core/power.h)
//             or "not available on this machine: <why>".

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "cli/commands.h"
#include "cli/options.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "framework/core/platform.h"
#include "framework/core/power.h"
#include "framework/core/untrusted.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "infer/load.h"
#include "infer/logits.h"
#include "models/grammar/gbnf.h"
#include "models/grammar/json_schema.h"
#include "models/grammar/token_constraint.h"
#include "models/tokenizer/chat_template.h"

namespace anelab::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct InferArgs {
  infer::LoadOptions load;  // the model-loading group (cli/options.h); load.chat_template: chat's
  SamplingArgs sampling;    // generate and chat
  bool quiet = false;
  std::string prompt, prompt_positional, prompt_file, system, prompt_ids, out;
  std::string grammar_file, json_schema;  // generate: constrained output (llama.cpp's --grammar-file, -j)
  std::string model_draft;                // generate: speculative decoding with this draft model
  bool prompt_set = false, print_ids = false, no_think = false;
  int64_t bench_prompt = 512, bench_gen = 128;
};

void add_common(CLI::App* sub, InferArgs& a) {
  add_model_options(sub, a.load);
  add_context_option(sub, a.load.ctx);
  sub->add_flag("--quiet,-q", a.quiet, "Nothing on stderr but errors (no model load, kernel compile or speed lines)");
}

struct Loaded {
  std::unique_ptr<infer::Engine> engine;
  std::unique_ptr<tok::Tokenizer> tok;
  std::string weights_memory;  // infer::LoadedModel::weights_memory
};

// tok: null unless `use` loads one (infer/load.h).
Loaded load(const InferArgs& a, infer::TokenizerUse use) {
  Loaded l;
  const auto t0 = Clock::now();
  if (!a.quiet) std::fprintf(stderr, "loading %s ...\n", quote_untrusted(a.load.model).c_str());
  infer::LoadOptions o = a.load;
  o.quiet = a.quiet;
  infer::LoadedModel m = infer::load_model(o, use);
  l.tok = std::move(m.tokenizer);
  l.weights_memory = std::move(m.weights_memory);
  l.engine = std::make_unique<infer::Engine>(std::move(m.model), m.engine);
  if (const int64_t tb = l.engine->tiled_bytes(); tb > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "; row tiles %.0f MiB", static_cast<double>(tb) / (1 << 20));
    l.weights_memory += buf;
  }
  const int64_t trained = l.engine->config().max_seq_len;
  if (a.load.ctx > trained && !a.quiet)  // llama.cpp warns here too (n_ctx above n_ctx_train); anelab caps it
    std::fprintf(stderr, "warning: --ctx %lld is above the model's trained context of %lld positions: capped to %lld\n",
                 static_cast<long long>(a.load.ctx), static_cast<long long>(trained), static_cast<long long>(trained));
  if (!a.quiet)
    std::fprintf(stderr, "loaded %s (%s, %lld layers, dim %lld) in %.1f s; prefill backend %s; weights %s\n",
                 quote_untrusted(a.load.model).c_str(), l.engine->config().arch.c_str(),
                 static_cast<long long>(l.engine->config().n_layers), static_cast<long long>(l.engine->config().dim),
                 ms_since(t0) / 1e3, l.engine->options().backend.c_str(), l.weights_memory.c_str());
  return l;
}

infer::GenerateOptions gen_options(const SamplingArgs& a) {
  infer::GenerateOptions o;
  o.steps = a.steps;
  o.max_new_tokens = a.max_tokens;
  o.sampling.temperature = a.temperature;  // the ranges were checked by the options (infer/params_check.h)
  o.sampling.top_p = a.top_p;
  o.sampling.top_k = a.top_k;
  o.sampling.min_p = a.min_p;
  o.sampling.repeat_penalty = a.repeat_penalty;
  o.sampling.seed = a.seed ? a.seed : static_cast<uint64_t>(std::time(nullptr));
  o.stop_strings = a.stop;
  o.ignore_eos = a.ignore_eos;
  o.draft_max = a.draft_max;
  o.draft_ngram = a.draft_ngram;
  if (a.sampler == "runc")
    o.sampler = infer::SamplerKind::kRunc;
  else if (a.sampler == "general")
    o.sampler = infer::SamplerKind::kGeneral;
  else
    ANELAB_CHECK(a.sampler == "auto", "infer", "unknown --sampler '", a.sampler, "' (auto, runc, general)");
  return o;
}

void print_stats(const infer::GenerateResult& r, const char* drafts = "prompt lookup") {
  const double n_dec = static_cast<double>(r.new_tokens.size());
  std::fprintf(stderr,
               "prefill: %zu tokens in %.1f ms (%s%s) = %.1f tok/s; decode: %.0f tokens in %.1f ms = %.2f tok/s; "
               "first token after %.1f ms\n",
               r.prompt_tokens.size(), r.prefill_ms, r.prefill.path.c_str(),
               r.prefill.bucket ? cat(", bucket ", r.prefill.bucket).c_str() : "",
               r.prompt_tokens.size() / std::max(1e-9, r.prefill_ms / 1e3), n_dec, r.decode_ms,
               n_dec > 1 ? (n_dec - 1) / std::max(1e-9, r.decode_ms / 1e3) : 0.0, r.ttft_ms);
  if (r.drafted > 0)
    std::fprintf(stderr, "speculative (%s): %lld drafted, %lld accepted (%.0f %%) in %lld batched passes\n", drafts,
                 static_cast<long long>(r.drafted), static_cast<long long>(r.accepted),
                 100.0 * static_cast<double>(r.accepted) / static_cast<double>(r.drafted),
                 static_cast<long long>(r.batched_passes));
}

std::string read_prompt(const InferArgs& a) {
  const int given = int(!a.prompt_file.empty()) + int(a.prompt_set) + int(!a.prompt_positional.empty());
  if (given > 1)
    fail("infer", "more than one prompt: pass one of --prompt/-p, --prompt-file/-f or a positional PROMPT");
  if (!a.prompt_file.empty()) return read_file_text(a.prompt_file);
  if (a.prompt_set) return a.prompt;
  if (!a.prompt_positional.empty()) return a.prompt_positional;
  if (platform::is_terminal(0))
    std::fprintf(stderr,
                 "generate: reading the prompt from the terminal until EOF (Ctrl-D); "
                 "or pass --prompt TEXT / --prompt-file FILE\n");
  return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

void print_ids(const std::vector<int32_t>& ids) {
  std::string line;
  for (int32_t id : ids) line += cat(line.empty() ? "" : " ", id);
  std::printf("%s\n", line.c_str());
}

void run_generate(const InferArgs& a) {
  const bool by_ids = !a.prompt_ids.empty();
  if (by_ids && (a.prompt_set || !a.prompt_file.empty() || !a.prompt_positional.empty()))
    fail("infer", "--prompt-ids and --prompt/--prompt-file are exclusive: pass one prompt");
  const std::string prompt = by_ids ? std::string() : read_prompt(a);
  Loaded l = load(a, by_ids ? infer::TokenizerUse::kIfAny : infer::TokenizerUse::kRequired);
  infer::TextSink sink;
  if (!a.print_ids)
    sink = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
  infer::GenerateResult r;
  infer::GenerateOptions go = gen_options(a.sampling);
  std::unique_ptr<infer::Engine> draft;  // --model-draft
  std::optional<infer::EngineForward> draft_forward;
  if (!a.model_draft.empty()) {
    const auto t0 = Clock::now();
    infer::LoadOptions lo = a.load;
    lo.quiet = a.quiet;
    infer::LoadedModel m =
        infer::load_draft_model(lo, a.model_draft, l.engine->context(), 1, l.engine->model(), l.tok.get());
    draft = std::make_unique<infer::Engine>(std::move(m.model), m.engine);
    ANELAB_CHECK(draft->context() >= l.engine->context(), "infer", "the draft model ", a.model_draft,
                 " has a context of ", draft->context(), " positions, less than the ", l.engine->context(), " of ",
                 a.load.model, " (pass a smaller --ctx)");
    if (go.draft_max == 0) go.draft_max = infer::kDefaultDraftMax;
    draft_forward.emplace(*draft);
    go.draft.forward = &*draft_forward;
    go.draft.vocab = draft->config().vocab_size;
    if (!a.quiet)
      std::fprintf(stderr, "draft model %s (%s, %lld layers, dim %lld) loaded in %.1f s; --draft-max %d\n",
                   quote_untrusted(a.model_draft).c_str(), draft->config().arch.c_str(),
                   static_cast<long long>(draft->config().n_layers), static_cast<long long>(draft->config().dim),
                   ms_since(t0) / 1e3, go.draft_max);
  }
  std::optional<grammar::GrammarConstraint> constraint;
  if (!a.grammar_file.empty() || !a.json_schema.empty()) {
    ANELAB_CHECK(a.grammar_file.empty() || a.json_schema.empty(), "infer",
                 "--grammar-file and --json-schema are exclusive: pass one");
    ANELAB_CHECK(l.tok, "infer",
                 "--grammar-file/--json-schema need a tokenizer (the model has none: pass --tokenizer)");
    std::string gbnf;
    if (!a.grammar_file.empty()) {
      gbnf = read_file_text(a.grammar_file);
    } else {
      const std::string text = a.json_schema.starts_with("{") ? a.json_schema : read_file_text(a.json_schema);
      const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
      ANELAB_CHECK(!schema.is_discarded(), "infer", "--json-schema: not JSON (a schema object, or a file holding one)");
      gbnf = grammar::json_schema_to_gbnf(schema);
    }
    auto g = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
    auto pieces = std::make_shared<const grammar::TokenPieces>(*l.tok, l.engine->config().vocab_size);
    std::vector<int32_t> ends;
    for (int32_t id : {l.tok->eos_id(), l.tok->bos_id()})
      if (id >= 0) ends.push_back(id);
    constraint.emplace(g, pieces, ends, -1);
    go.constraint = &*constraint;
  }
  if (by_ids) {
    const auto ids = infer::parse_token_ids(a.prompt_ids, "--prompt-ids", l.engine->config().vocab_size);
    r = infer::generate_tokens(*l.engine, l.tok.get(), ids, 0, go, sink);
  } else {
    r = infer::generate(*l.engine, *l.tok, prompt, go, sink);
  }
  if (a.print_ids) print_ids(r.new_tokens);
  if (r.stop_reason == "context" && !a.quiet)
    std::fprintf(stderr,
                 "stopped after %zu new tokens at position %lld: the context of %lld positions is full "
                 "(-n %lld asked for more; --ctx, at most the model's %lld)\n",
                 r.new_tokens.size(), static_cast<long long>(l.engine->context()),
                 static_cast<long long>(l.engine->context()), static_cast<long long>(a.sampling.max_tokens),
                 static_cast<long long>(l.engine->config().max_seq_len));
  if (!a.quiet) print_stats(r, draft ? "draft model" : "prompt lookup");
}

// Teacher-forced logits of --ids (or the encoded --prompt) -> --out [T, vocab] float32 .npy.
void run_logits(const InferArgs& a) {
  const bool by_ids = !a.prompt_ids.empty();
  if (by_ids == a.prompt_set) fail("infer", "logits needs exactly one of --ids or --prompt");
  Loaded l = load(a, by_ids ? infer::TokenizerUse::kNone : infer::TokenizerUse::kRequired);
  infer::Engine& e = *l.engine;
  std::vector<int32_t> ids;
  if (by_ids) {
    ids = infer::parse_token_ids(a.prompt_ids, "--ids", e.config().vocab_size);
  } else {
    tok::EncodeOptions eo;  // as generate: BOS where the vocabulary wants it
    eo.add_bos = l.tok->vocab().kind == tok::TokenizerKind::kSentencePiece || l.tok->vocab().add_bos;
    ids = l.tok->encode(a.prompt, eo);
    ANELAB_CHECK(!ids.empty(), "infer", "--prompt '", a.prompt, "' encodes to no tokens");
  }
  const std::vector<float> logits = infer::teacher_forced_logits(e, ids);
  const int64_t T = static_cast<int64_t>(ids.size()), V = e.config().vocab_size;
  write_npy(a.out, {T, V}, logits.data());
  if (!a.quiet)
    std::fprintf(stderr, "logits [%lld, %lld] of %s (%s prefill, dtype %s) -> %s\n", static_cast<long long>(T),
                 static_cast<long long>(V), a.load.model.c_str(), e.last_prefill().path.c_str(), a.load.dtype.c_str(),
                 a.out.c_str());
}

void run_chat(const InferArgs& a) {
  Loaded l = load(a, infer::TokenizerUse::kRequired);
  const tok::ChatTemplate t = tok::chat_template_for(*l.tok, a.load.chat_template, l.engine->config().arch);
  if (t == tok::ChatTemplate::kNone) fail("infer", tok::no_chat_template_hint(a.load.model));
  // no --system: the template's default (Qwen2.5's) or none
  infer::Chat chat(*l.engine, *l.tok, t, a.system, !a.no_think);
  std::fprintf(stderr, "chat: %s, template %s, context %lld; empty line or EOF ends\n", l.engine->config().arch.c_str(),
               tok::chat_template_name(t), static_cast<long long>(l.engine->context()));
  std::string line;
  for (;;) {
    std::fprintf(stdout, "> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line.empty()) break;
    infer::GenerateResult info;
    chat.turn(
        line, gen_options(a.sampling),
        [](std::string_view s) {
          std::fwrite(s.data(), 1, s.size(), stdout);
          std::fflush(stdout);
        },
        &info);
    std::fputs("\n", stdout);
    print_stats(info);
  }
}

long peak_rss_kb() {  // getrusage's unit differs per OS: the platform layer converts
  const auto mb = platform::peak_rss_mb();
  return mb ? static_cast<long>(*mb * 1024.0) : 0;
}

// Joules per token over one measured phase, or why there is no number ("not available", never 0).
std::string energy_text(power::Meter& m, const std::optional<power::Reading>& e0, double tokens) {
  if (!m.available()) return m.reason();
  if (!e0) return "not measured";
  power::Sample s;
  try {
    s = power::difference(*e0, m.energy());
  } catch (const std::exception& e) {
    return std::string("not measured: ") + e.what();
  }
  std::string rails;
  for (power::Rail r : m.rails()) rails += cat(rails.empty() ? "" : ", ", power::rail_name(r), " ", s.joules[r], " J");
  return cat(s.joules.total() / tokens, " J/token (", s.joules.total(), " J: ", rails, "; ", m.source_name(), ")");
}

std::optional<power::Reading> energy_now(power::Meter& m) {
  if (!m.available()) return std::nullopt;
  try {
    return m.energy();
  } catch (const std::exception&) {
    return std::nullopt;  // energy_text() then says "not measured"
  }
}

void run_bench(const InferArgs& a) {
  power::Meter meter(power::select_source());
  const auto t0 = Clock::now();
  Loaded l = load(a, infer::TokenizerUse::kNone);
  infer::Engine& e = *l.engine;
  const double load_ms = ms_since(t0);
  const int64_t V = e.config().vocab_size;
  std::mt19937 rng(1234);
  std::vector<int32_t> one{static_cast<int32_t>(rng() % V)};
  // cold start: load + (compile) + prefill of a 1-token prompt -> first token's logits
  e.prefill(one, 0);
  const double ttft = ms_since(t0);
  const double compile_first = e.last_prefill().compile_ms;
  // The decode run follows the prompt and a warm-up token: --gen-len must leave room for a prompt of one.
  ANELAB_CHECK(a.bench_gen + 2 <= e.context(), "infer", "bench: --gen-len ", a.bench_gen, " needs ", a.bench_gen + 2,
               " positions (a prompt token, a warm-up token, then the tokens timed), but the context has ", e.context(),
               " (--ctx, at most the model's max_seq_len ", e.config().max_seq_len, ")");
  // A --prompt-len longer than the rest of the context is cut to fit (the pp line prints the length used).
  std::vector<int32_t> prompt(static_cast<size_t>(std::min(a.bench_prompt, e.context() - a.bench_gen - 1)));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % V);
  e.prefill(prompt, 0);  // warm-up (compiles the bucket on a MIL backend)
  const double compile_ms = e.last_prefill().compile_ms;
  auto e1 = energy_now(meter);
  auto t1 = Clock::now();
  double c1 = platform::process_cpu_ms();
  e.prefill(prompt, 0);
  const double pp_ms = ms_since(t1), pp_cpu = platform::process_cpu_ms() - c1;
  const std::string pp_energy = energy_text(meter, e1, double(prompt.size()));
  const auto path = e.last_prefill().path;
  int64_t pos = static_cast<int64_t>(prompt.size());
  int32_t tok = one[0];
  e.decode(tok, pos++);  // warm-up
  e1 = energy_now(meter);
  t1 = Clock::now();
  c1 = platform::process_cpu_ms();
  for (int64_t i = 0; i < a.bench_gen; ++i) {
    const float* lg = e.decode(tok, pos++);
    tok = models::argmax(std::span<const float>(lg, static_cast<size_t>(V)));
  }
  const double tg_ms = ms_since(t1), tg_cpu = platform::process_cpu_ms() - c1;
  const std::string tg_energy = energy_text(meter, e1, double(a.bench_gen));
  const double wbytes = static_cast<double>(e.weight_bytes());
  std::printf("model %s (%s, %lld layers, dim %lld, vocab %lld), dtype %s, %d threads, prefill backend %s\n",
              a.load.model.c_str(), e.config().arch.c_str(), static_cast<long long>(e.config().n_layers),
              static_cast<long long>(e.config().dim), static_cast<long long>(V), a.load.dtype.c_str(), a.load.threads,
              path.c_str());
  std::printf("load %.0f ms; cold start to first token %.0f ms (compile %.0f ms); weights %s\n", load_ms, ttft,
              compile_first, l.weights_memory.c_str());
  std::printf("prefill pp%zu: %.1f tok/s (%.1f ms, cpu %.1f ms; bucket compile %.0f ms)\n", prompt.size(),
              prompt.size() / (pp_ms / 1e3), pp_ms, pp_cpu, compile_ms);
  std::printf("decode tg%lld: %.2f tok/s (%.2f ms/token, cpu %.2f ms/token, %.1f GB/s of weights)\n",
              static_cast<long long>(a.bench_gen), a.bench_gen / (tg_ms / 1e3), tg_ms / a.bench_gen,
              tg_cpu / a.bench_gen, wbytes * a.bench_gen / (tg_ms / 1e3) / 1e9);
  std::printf("%s\n", estimate_infer_note(e.config(), static_cast<int64_t>(prompt.size()), a.load.device).c_str());
  std::printf("energy pp%zu: %s\nenergy tg%lld: %s\n", prompt.size(), pp_energy.c_str(),
              static_cast<long long>(a.bench_gen), tg_energy.c_str());
  const double kv_pos = static_cast<double>(e.kv_bytes_per_position());  // pos: the positions filled
  std::printf(
      "KV cache %s: %.1f KiB per position, %.1f MiB at the %lld positions used (%.1f MiB for the context "
      "of %lld)\n",
      infer::kv_type_name(e.options().kv_type), kv_pos / 1024, kv_pos * pos / (1 << 20), static_cast<long long>(pos),
      kv_pos * e.context() / (1 << 20), static_cast<long long>(e.context()));
  if (e.state_bytes() > 0)  // linear-attention layers: a fixed-size recurrent state instead of KV rows
    std::printf(
        "recurrent state f32: %.1f MiB (%lld linear-attention layers, any context); KV + state for the context "
        "of %lld: %.1f MiB\n",
        static_cast<double>(e.state_bytes()) / (1 << 20), static_cast<long long>(e.config().n_layers - e.kv_layers()),
        static_cast<long long>(e.context()), (kv_pos * e.context() + static_cast<double>(e.state_bytes())) / (1 << 20));
  std::printf("peak RSS %.1f MiB; weight matrices %.1f MiB (ratio %.2f)\n", peak_rss_kb() / 1024.0, wbytes / (1 << 20),
              peak_rss_kb() * 1024.0 / std::max(1.0, static_cast<double>(e.model().total_bytes())));
}

}  // namespace

void add_infer_command(CLI::App& app) {
  auto a = std::make_shared<InferArgs>();
  CLI::App* inf = app.add_subcommand("infer", "Run a model: generate, chat, logits, bench");
  inf->require_subcommand(1);

  CLI::App* gen = inf->add_subcommand("generate", "Generate text; stdout = prompt + continuation (run.c format)");
  add_common(gen, *a);
  add_sampling_options(gen, a->sampling);
  gen->add_option("--prompt,-p,-i", a->prompt,
                  "Prompt text (else the positional PROMPT, --prompt-file, stdin); -i: "
                  "llama2.c run.c's spelling (llama.cpp's -i, interactive mode, is `anelab infer chat`)")
      ->each([a](const std::string&) { a->prompt_set = true; });
  gen->add_option("prompt_text", a->prompt_positional, "Prompt text as the last argument (as --prompt)");
  gen->add_option("--grammar-file", a->grammar_file,
                  "Constrain the continuation to a GBNF grammar (llama.cpp's syntax; docs/server.md)");
  gen->add_option("--json-schema,-j", a->json_schema,
                  "Constrain the continuation to JSON of this schema (the schema, or a file holding it)");
  gen->add_option("--prompt-file,-f", a->prompt_file, "Read the prompt from a file (llama.cpp -f)");
  gen->add_option("--prompt-ids", a->prompt_ids,
                  "Prompt as token ids (\"1 2 3\"; no tokenizer needed: without one, "
                  "nothing is echoed and only the length ends generation; with one, as --prompt)");
  gen->add_option("--model-draft", a->model_draft,
                  "Speculative decoding with this draft model (llama.cpp's --model-draft): a smaller model of the same "
                  "vocabulary drafts --draft-max tokens (0: 16, llama.cpp's default) that the model verifies in one "
                  "batched pass; greedy output is plain decoding's, sampled output follows the model's distribution");
  gen->add_flag("--print-ids", a->print_ids, "Print the generated token ids on one line instead of the text");
  gen->callback([a] { run_generate(*a); });

  CLI::App* lg = inf->add_subcommand("logits", "Teacher-forced logits [T, vocab] of a token sequence as float32 .npy");
  add_common(lg, *a);
  lg->add_option("--ids", a->prompt_ids, "Token ids (\"1 2 3\")");
  lg->add_option("--prompt", a->prompt, "Text, encoded with the model's tokenizer (BOS where it wants one)")
      ->each([a](const std::string&) { a->prompt_set = true; });
  lg->add_option("--out,-o", a->out, "Output .npy file (float32 [T, vocab], written atomically)")->required();
  lg->callback([a] { run_logits(*a); });

  CLI::App* chat =
      inf->add_subcommand("chat", "Interactive chat with the model's chat template, history kept within the context");
  add_common(chat, *a);
  add_sampling_options(chat, a->sampling);
  chat->add_option("--system", a->system, "System prompt (default: the template's: Qwen2.5's, none for the others)");
  add_chat_template_option(chat, a->load.chat_template);
  chat->add_flag("--no-think", a->no_think,
                 "Thinking off (the template's enable_thinking false: Qwen3 answers after an empty <think></think>; "
                 "other templates have no thinking switch)");
  chat->callback([a] { run_chat(*a); });

  CLI::App* bench = inf->add_subcommand("bench", "Prefill/decode tok/s, cold start to first token, peak RSS");
  add_common(bench, *a);
  bench->add_option("--prompt-len", a->bench_prompt, "Prompt tokens (pp)")
      ->capture_default_str()
      ->check(number_in(1, kInf));
  bench->add_option("--gen-len", a->bench_gen, "Generated tokens (tg)")
      ->capture_default_str()
      ->check(number_in(1, kInf));
  bench->callback([a] { run_bench(*a); });
}

}  // namespace anelab::cli
