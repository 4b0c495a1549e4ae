// Hugging Face fixtures (tests/fixtures/hf, made by scripts/make_hf_fixtures.py with transformers):
// tiny GPT-2 (LayerNorm, learned positions, tanh-GELU, biases), Qwen2 (GQA, q/k/v biases, rotate-half
// RoPE theta 1e6, tied head; fp32 and bf16 files) and Llama (fp16 shards). Logits at every position of
// every prompt, through the CPU path (fp32 and fp16 weights) and the emulator prefill; greedy
// 32-token continuations identical.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "infer/engine.h"
#include "models/io/load_any.h"
#include "models/sampler.h"
#include "tests/common/test_data.h"
#include "tests/infer/hf_reference.h"

namespace anelab::infer {
namespace {

const nlohmann::json& reference() { return test::hf_reference(); }

Engine make(const std::string& name, const std::string& backend, WType dt) {
  EngineOptions o;
  o.backend = backend;
  o.dtype = dt;
  o.quiet = true;
  return Engine(models::load_any_model(test::source_path("tests/fixtures/hf/" + name)), o);
}

using test::hf_rel_err;

void check_logits(const std::string& name, const std::string& backend, WType dt, double tol) {
  Engine e = make(name, backend, dt);
  const auto& m = reference()["models"][name];
  for (size_t p = 0; p < m["prompts"].size(); ++p) {
    const auto prompt = m["prompts"][p].get<std::vector<int32_t>>();
    std::vector<float> all;
    e.prefill(prompt, 0, &all);
    const int64_t V = e.config().vocab_size;
    for (size_t t = 0; t < prompt.size(); ++t) {
      const auto ref = m["logits"][p][t].get<std::vector<float>>();
      EXPECT_LT(hf_rel_err(all.data() + t * V, ref), tol) << name << " " << backend << " prompt " << p << " pos " << t;
    }
  }
}

void check_greedy(const std::string& name, const std::string& backend, WType dt) {
  Engine e = make(name, backend, dt);
  const auto& m = reference()["models"][name];
  const int64_t V = e.config().vocab_size;
  for (size_t p = 0; p < m["prompts"].size(); ++p) {
    const auto prompt = m["prompts"][p].get<std::vector<int32_t>>();
    const auto want = m["greedy"][p].get<std::vector<int32_t>>();
    const float* lg = e.prefill(prompt, 0);
    std::vector<int32_t> got;
    int64_t pos = static_cast<int64_t>(prompt.size());
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(models::argmax(std::span<const float>(lg, static_cast<size_t>(V))));
      if (i + 1 < want.size()) lg = e.decode(got.back(), pos++);
    }
    EXPECT_EQ(got, want) << name << " " << backend << " prompt " << p << " (min HF margin "
                         << m["greedy_min_margin"][p].get<double>() << ")";
  }
}

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, CpuFp32LogitsMatchHf) { check_logits(GetParam(), "cpu", WType::kF32, test::hf_fp32_tol(GetParam())); }
TEST_P(HfFixture, CpuFp16LogitsMatchHf) { check_logits(GetParam(), "cpu", WType::kF16, test::kHfFp16Tol); }
TEST_P(HfFixture, EmulatorPrefillLogitsMatchHf) {
  check_logits(GetParam(), "emulator", WType::kF16, test::kHfMilFp16Tol);
}
TEST_P(HfFixture, GreedyContinuationCpuFp32) { check_greedy(GetParam(), "cpu", WType::kF32); }
TEST_P(HfFixture, GreedyContinuationEmulatorFp16) { check_greedy(GetParam(), "emulator", WType::kF16); }

INSTANTIATE_TEST_SUITE_P(Models, HfFixture, ::testing::Values("gpt2", "qwen2", "qwen2_bf16", "llama_fp16"));

}  // namespace
}  // namespace anelab::infer
