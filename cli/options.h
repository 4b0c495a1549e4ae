// The options several subcommands share, declared once here so that their names, ranges, defaults and help
// read the same in every `--help`:
//   threads:       -t/--threads N, [1, 1024], default 2 (infer, serve, perplexity, bench, train, demo)
//   model loading: -m/--model, --tokenizer, --backend, --device, --dtype, --ane-weights, -t, --kv-type, --mmap
//                  into infer::LoadOptions (infer generate|chat|logits|bench, serve, perplexity)
//   context:       -c/--ctx (infer, serve; perplexity's --ctx is its chunk length)
//   sampling:      --temperature, --top-p, --top-k, --min-p, --repeat-penalty, --seed, ... into SamplingArgs
//                  (infer generate|chat), ranges from infer/params_check.h, the table the server's request
//                  parser asks too.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "infer/load.h"

namespace anelab::cli {

inline constexpr int kDefaultThreads = 2;  // every -t/--threads; infer::LoadOptions::threads is the same

// -t/--threads N into `threads` (infer::params::kThreads: [1, 1024]; "--threads: must be in [1, 1024] (got 0)").
CLI::Option* add_threads_option(CLI::App* app, int& threads);

// For the commands whose threads are the process-wide pool's (ThreadPool::global(): train, demo, bench):
// sizes it to `threads` unless `-t` was not given and ANELAB_THREADS is set (scripts that size every rank's
// pool that way). Call before anything uses the pool.
void size_process_pool(const CLI::App& app, int threads);

// --kv-type f32|f16 into `kv_type` (infer, perplexity and serve; EngineOptions::kv_type).
CLI::Option* add_kv_type_option(CLI::App* app, std::string& kv_type);
// --mmap auto|on|off (infer::kMmapHelp) into `mmap`.
CLI::Option* add_mmap_option(CLI::App* app, std::string& mmap);

// The model-loading group ("Model" in --help) into `o`: -m/--model (required), --tokenizer, --backend,
// --device, --dtype, --ane-weights, -t/--threads, --kv-type, --mmap.
void add_model_options(CLI::App* app, infer::LoadOptions& o);
// -c/--ctx: context positions of the engine (infer::params::kContext; 0 = the model's max_seq_len).
CLI::Option* add_context_option(CLI::App* app, int64_t& ctx);
// --chat-template auto|qwen2.5|chatml|qwen3|llama3|gemma3|none; `extra` is appended to the help.
CLI::Option* add_chat_template_option(CLI::App* app, std::string& chat_template, const std::string& extra = "");

// The sampling group ("Sampling" in --help) of `infer generate` and `infer chat`.
struct SamplingArgs {
  int64_t max_tokens = -1, steps = 256;
  float temperature = 1.0f, top_p = 0.9f, min_p = 0.0f, repeat_penalty = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  std::string sampler = "auto";
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int32_t draft_max = 0, draft_ngram = 3;  // speculative decoding with prompt-lookup drafts (0: off)
};
void add_sampling_options(CLI::App* app, SamplingArgs& s);

}  // namespace anelab::cli
