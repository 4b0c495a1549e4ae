// anelab demo (the README's main job): the whole loop on a corpus the repo carries (data/tinytales,
// made by scripts/make_tinytales.py): tokenize -> train a tiny Llama from scratch with the ANE training
// kernels (emulator backend, dynamic strategy) -> generate from the checkpoint -> export it as anelab,
// GGUF, Hugging Face safetensors and llama2.c -> print where everything is and what to run next.
#pragma once
#include <cstdint>
#include <string>

#include "cli/options.h"

namespace anelab::cli {

struct DemoLoopOptions {
  std::string data;  // directory with corpus.txt + tokenizer.json ("" = the checkout's data/tinytales)
  std::string out = "checkpoints/demo";
  std::string preset = "stories260k";
  std::string strategy = "dynamic";
  std::string backend = "emulator";
  std::string device;
  int64_t steps = 200, batch_size = 8, seq_len = 128;
  double lr = 3e-3;
  std::string prompt = "Once upon a time";
  int64_t sample_tokens = 64;
  int threads =
      kDefaultThreads;  // -t: the training pool's (cli/options.h size_process_pool) and the generating engine's
};

void run_demo_loop(const DemoLoopOptions& o);

}  // namespace anelab::cli
