// In-process server tests' helpers: a ModelPool over stories260K + tok512 on the CPU, and one completion request
// run on a pool's worker.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "infer/server/api.h"
#include "infer/server/engine_adapter.h"
#include "tests/common/test_data.h"

namespace anelab::serve::test {

// One worker unless asked; null when the shared data is absent (the caller skips).
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

// The completion request `body` (JSON, the /v1/completions form) parsed, prepared and run on worker `worker` of pool,
// as the server's scheduler runs it (gtest failures when the body or its preparation is refused).
inline GenOutcome run_completion(ModelPool& pool, const std::string& body, size_t worker = 0,
                                 const Limits& lim = Limits{}) {
  CompletionRequest r;
  const auto e = parse_request(Endpoint::kCompletions, body, lim, r);
  EXPECT_FALSE(e) << (e ? e->message : "");
  GenParams p;
  const auto pe = pool.prepare(r, p);
  EXPECT_FALSE(pe) << (pe ? pe->message : "");
  Job job(p);
  job.started = std::chrono::steady_clock::now();
  return pool.run(worker, job);
}

}  // namespace anelab::serve::test
