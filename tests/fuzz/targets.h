// Fuzz targets: one entry point per reader of untrusted bytes, shared by the libFuzzer harnesses
// (fuzz_reader.cpp, built with -DANELAB_FUZZ=ON, see docs/fuzzing.md) and the regression test
// (test_fuzz_regressions.cpp, every build), which replays the inputs kept in tests/fuzz/regressions/<name>/.
//
// A target parses the bytes the way its command does and exercises what the reader builds from them
// (a tokenizer encodes and decodes, a MIL program is printed and parsed again, a config is validated).
// It returns 0 when the input is accepted and 1 when the reader rejects it with anelab::Error (a clean
// one-line error). Any other exception, a crash or a sanitizer report is a finding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "framework/core/error.h"

namespace anelab::fuzz {

struct Target {
  const char* name;  // harness fuzz_<name>, regression inputs tests/fuzz/regressions/<name>/
  const char* what;  // the file the bytes stand for
  int (*run)(const uint8_t* data, size_t size);
};

const std::vector<Target>& targets();
// The target called `name`; aborts naming it when there is none (a harness built with a wrong name).
const Target& target(std::string_view name);

// Per area (targets_*.cpp).
int run_anelab(const uint8_t* data, size_t size);
int run_llama2c(const uint8_t* data, size_t size);
int run_safetensors(const uint8_t* data, size_t size);
int run_gguf(const uint8_t* data, size_t size);
int run_hf_config(const uint8_t* data, size_t size);
int run_hf_index(const uint8_t* data, size_t size);
int run_checkpoint(const uint8_t* data, size_t size);
int run_tokenizer_llama2c(const uint8_t* data, size_t size);
int run_tokenizer_gpt2(const uint8_t* data, size_t size);
int run_tokenizer_hf(const uint8_t* data, size_t size);
int run_npy(const uint8_t* data, size_t size);
int run_mil_blob(const uint8_t* data, size_t size);
int run_mil_text(const uint8_t* data, size_t size);
int run_train_toml(const uint8_t* data, size_t size);
int run_run_config(const uint8_t* data, size_t size);

// Runs f: 0 when it returns, 1 when it throws anelab::Error (anything else propagates).
template <typename F>
int accepted(F&& f) {
  try {
    f();
    return 0;
  } catch (const Error&) {
    return 1;
  }
}

}  // namespace anelab::fuzz
