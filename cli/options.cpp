// The options several subcommands share (cli/options.h).
#include "cli/options.h"

#include <cstdlib>

#include "cli/commands.h"
#include "framework/core/thread_pool.h"
#include "infer/engine.h"
#include "infer/params_check.h"

namespace anelab::cli {
namespace {

// --backend: a clear error naming the choices (CLI11 prints it after "--backend: ").
CLI::Validator prefill_backend_check() {
  return CLI::Validator(
      [](std::string& v) {
        for (const char* c : infer::kPrefillBackends)
          if (v == c) return std::string();
        return "unknown backend '" + v + "' (choices: auto, cpu, emulator, ane)";
      },
      "auto|cpu|emulator|ane");
}

// One sampling parameter of the shared range table (infer/params_check.h), in the "Sampling" group.
template <typename T>
void add_param(CLI::App* app, const char* names, const char* help, T& v, const infer::ParamRange& r) {
  app->add_option(names, v, help)->capture_default_str()->check(number_in(r))->group("Sampling");
}

}  // namespace

CLI::Option* add_threads_option(CLI::App* app, int& threads) {
  return app->add_option("--threads,-t", threads, "CPU threads of the persistent pool (llama.cpp -t)")
      ->capture_default_str()
      ->check(number_in(infer::params::kThreads));
}

void size_process_pool(const CLI::App& app, int threads) {
  if (app.count("--threads") == 0 && std::getenv("ANELAB_THREADS")) return;
  ThreadPool::size_global(threads);
}

CLI::Option* add_mmap_option(CLI::App* app, std::string& mmap) {
  return app->add_option("--mmap", mmap, infer::kMmapHelp)
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
}

CLI::Option* add_kv_type_option(CLI::App* app, std::string& kv_type) {
  return app->add_option("--kv-type", kv_type, infer::kKvTypeHelp)
      ->capture_default_str()
      ->check(CLI::IsMember(infer::kv_type_names()));
}

void add_model_options(CLI::App* app, infer::LoadOptions& o) {
  const char* g = "Model";
  app->add_option("--model,-m", o.model, "Model file: llama2.c .bin, safetensors file/dir, GGUF or .anelab")
      ->required()
      ->group(g);
  app->add_option(
         "--tokenizer", o.tokenizer,
         "Tokenizer (when the model file has none): tokenizer.bin, tokenizer.json, a run's tokenizer.anetok, dir")
      ->group(g);
  app->add_option(
         "--lora", o.lora,
         "LoRA adapter (a PEFT directory or a GGUF LoRA adapter; repeatable). infer / perplexity merge it into the "
         "weights when the model loads (W + S * alpha/r * B.A in fp32, the adapted matrices kept in fp32); serve "
         "applies it at run time, per request (GET / POST /lora-adapters, the request's lora field)")
      ->group(g);
  app->add_option("--lora-scale", o.lora_scale, "Scale S of each --lora, in order (default 1)")->group(g);
  app->add_option("--backend", o.backend, infer::kPrefillBackendHelp)
      ->capture_default_str()
      ->check(prefill_backend_check())
      ->group(g);
  app->add_option("--device", o.device,
                  "Device profile for emulator/ane (m1..m5, or auto: the ANE chip's, m4 on the emulator)")
      ->capture_default_str()
      ->group(g);
  app->add_option("--ane-weights", o.ane_weights,
                  "Weights of the MIL prefill kernels (emulator/ane): fp16, int8 (per-channel int8 weights; a Q8_0 "
                  "matrix's own blocks on m4/m5), w8a8 "
                  "(int8 weights and activations, scales calibrated on the first prompt), q4 (Q4_0 blocks of 32 "
                  "through constexpr_blockwise_shift_scale, m4/m5: a Q4_0 file's own bits, other types quantized to "
                  "Q4_0; 0.56 bytes per weight), lut4 / lut6 (the model file's palettes, `anelab convert --palettize`, "
                  "through constexpr_lut_to_dense, m4/m5) or auto (per chip and matrix class: m4/m5 attention w8a8 "
                  "and FFN lut4 / q4 where the file has 4-bit palettes / Q4_0 blocks, else w8a8; m1-m3 int8)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp16", "int8", "w8a8", "q4", "lut4", "lut6", "auto"}))
      ->group(g);
  app->add_option("--dtype", o.dtype,
                  "Compute dtype of the weight matrices: fp16, fp32, or auto (fp32 when the file stores every matrix "
                  "in fp32: llama2.c files, training checkpoints, fp32 exports; fp16 otherwise; "
                  "q8_0/q4_0/q5_0/q5_1/q4_k/q5_k/q6_k matrices stay in their blocks, with int8 dot products)")
      ->capture_default_str()
      ->group(g);
  add_threads_option(app, o.threads)->group(g);
  add_kv_type_option(app, o.kv_type)->group(g);
  add_mmap_option(app, o.mmap)->group(g);
}

CLI::Option* add_context_option(CLI::App* app, int64_t& ctx) {
  return app->add_option("--ctx,-c", ctx, "Context positions (0 = the model's max_seq_len)")
      ->capture_default_str()
      ->check(number_in(infer::params::kContext))
      ->group("Model");
}

CLI::Option* add_chat_template_option(CLI::App* app, std::string& chat_template, const std::string& extra) {
  return app
      ->add_option("--chat-template", chat_template,
                   "auto (the model's own, by the control tokens of its vocabulary: Llama 3, Gemma 3, Qwen3 (Qwen3.5 "
                   "for a qwen35 model) or Qwen2.5; base models have none" +
                       extra + "), qwen2.5 (= chatml), qwen3, qwen3.5, llama3, gemma3, none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "qwen2.5", "chatml", "qwen3", "qwen3.5", "llama3", "gemma3", "none"}));
}

void add_sampling_options(CLI::App* app, SamplingArgs& s) {
  const char* g = "Sampling";
  app->add_option(
         "--max-tokens,-n", s.max_tokens,
         "New tokens to generate (llama.cpp -n; 0: only echo the prompt; -1: run.c steps semantics, see --steps)")
      ->capture_default_str()
      ->check(number_in(-1, infer::params::kNoLimit))
      ->group(g);
  app->add_option("--steps", s.steps, "run.c -n: total positions including the prompt (0 = context)")
      ->capture_default_str()
      ->check(number_in(0, infer::params::kNoLimit))
      ->group(g);
  namespace P = infer::params;
  add_param(app, "--temperature,--temp", "Sampling temperature (0 = greedy; llama.cpp --temp)", s.temperature,
            P::kTemperature);
  add_param(app, "--top-p", "Top-p (nucleus) threshold (1 = off)", s.top_p, P::kTopP);
  add_param(app, "--top-k", "Top-k (0 = off)", s.top_k, P::kTopK);
  add_param(app, "--min-p", "Min-p relative to the top token (0 = off)", s.min_p, P::kMinP);
  add_param(app, "--repeat-penalty", "Repetition penalty over the last 64 tokens (1 = off)", s.repeat_penalty,
            P::kRepeatPenalty);
  app->add_option("--seed,-s", s.seed, "Random seed (0 = time-based, like run.c)")->capture_default_str()->group(g);
  app->add_option("--sampler", s.sampler, "auto | runc (llama2.c xorshift + top-p, bit-exact) | general")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "runc", "general"}))
      ->group(g);
  app->add_option("--stop", s.stop, "Stop string (repeatable)")->group(g);
  app->add_flag("--ignore-eos", s.ignore_eos,
                "Generate past the end-of-text token: its logit is -inf (llama.cpp --ignore-eos)")
      ->group(g);
  app->add_option("--draft-max", s.draft_max,
                  "Speculative decoding with prompt-lookup drafts: up to N drafted tokens checked per batched pass "
                  "(0 = off; the output is plain decoding's)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64))
      ->group(g);
  app->add_option("--draft-ngram", s.draft_ngram, "Longest n-gram the prompt lookup matches (down to 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16))
      ->group(g);
}

}  // namespace anelab::cli
