// A ModelPool (one worker unless asked) over stories260K + tok512 on the CPU, for in-process server tests
// (test_structured, test_prompt_cache); null when the shared data is absent (the caller skips).
#pragma once
#include <filesystem>
#include <memory>

#include "infer/server/engine_adapter.h"
#include "tests/common/test_data.h"

namespace anelab::serve::test {

inline std::unique_ptr<ModelPool> stories_pool(size_t workers = 1) {
  const std::string model = anelab::test::data_path("llama2c/stories260K.bin"),
                    tok = anelab::test::data_path("llama2c/tok512.bin");
  if (!std::filesystem::exists(model) || !std::filesystem::exists(tok)) return nullptr;
  ModelOptions o;
  o.load.model = model;
  o.load.tokenizer = tok;
  o.load.backend = "cpu";
  o.warmup_tokens = 0;
  return std::make_unique<ModelPool>(o, workers);
}

}  // namespace anelab::serve::test
