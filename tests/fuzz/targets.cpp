#include "tests/fuzz/targets.h"

#include <cstdio>
#include <cstdlib>

namespace anelab::fuzz {

const std::vector<Target>& targets() {
  static const std::vector<Target> t = {
      {"anelab", "anelab model file (.anelab)", run_anelab},
      {"llama2c", "llama2.c model (.bin)", run_llama2c},
      {"safetensors", "safetensors file", run_safetensors},
      {"gguf", "GGUF v3 file", run_gguf},
      {"hf_config", "Hugging Face config.json", run_hf_config},
      {"hf_index", "model.safetensors.index.json", run_hf_index},
      {"checkpoint", "training checkpoint (.ckpt)", run_checkpoint},
      {"tokenizer_llama2c", "llama2.c tokenizer.bin", run_tokenizer_llama2c},
      {"tokenizer_gpt2", "GPT-2 encoder.json + NUL + vocab.bpe", run_tokenizer_gpt2},
      {"tokenizer_hf", "Hugging Face tokenizer.json", run_tokenizer_hf},
      {"npy", "NumPy .npy array", run_npy},
      {"mil_blob", "ANE weight blob (weights/*.bin)", run_mil_blob},
      {"mil_text", "MIL program text (.mil)", run_mil_text},
      {"train_toml", "experiment config (.toml)", run_train_toml},
      {"run_config", "run directory config.json", run_run_config},
  };
  return t;
}

const Target& target(std::string_view name) {
  for (const Target& t : targets())
    if (name == t.name) return t;
  std::fprintf(stderr, "[fuzz] no fuzz target named '%.*s'\n", static_cast<int>(name.size()), name.data());
  std::abort();
}

}  // namespace anelab::fuzz
