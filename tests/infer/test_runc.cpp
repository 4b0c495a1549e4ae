// stories260K + tok512 against llama2.c run.c: logits of the first positions
// (runc_260K_greedy64_logits.json) and the exact stdout of three run.c invocations.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/core/file.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "models/io/load_any.h"
#include "tests/common/test_data.h"

namespace anelab::infer {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Engine make_engine(WType dt, const std::string& backend = "cpu") {
  EngineOptions o;
  o.dtype = dt;
  o.backend = backend;
  o.quiet = true;
  return Engine(models::load_any_model(test::data_path("llama2c/stories260K.bin")), o);
}

// Max |a - b| over the logits of positions 0..7 (prefill of the prompt, then decode of the forced tokens).
double max_logit_error(Engine& e) {
  const auto j = nlohmann::json::parse(slurp(test::data_path("reference/runc_260K_greedy64_logits.json")));
  std::vector<int32_t> prompt = j["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<float> all;
  e.prefill(prompt, 0, &all);
  double err = 0;
  int checked = 0;
  for (const auto& st : j["steps"]) {
    if (!st.contains("logits")) continue;
    const int64_t pos = st["pos"].get<int64_t>();
    const auto ref = st["logits"].get<std::vector<float>>();
    const float* got = nullptr;
    if (pos < static_cast<int64_t>(prompt.size()))
      got = all.data() + pos * 512;
    else
      got = e.decode(st["input"].get<int32_t>(), pos);
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::abs(static_cast<double>(got[i]) - ref[i]));
    ++checked;
  }
  EXPECT_GE(checked, 8);
  return err;
}

TEST(InferRunc, LogitsMatchRuncCpuFp32) {
  ANELAB_REQUIRE_DATA("reference/runc_260K_greedy64_logits.json");
  Engine e = make_engine(WType::kF32);
  const double err = max_logit_error(e);
  EXPECT_LT(err, 2e-4) << "fp32 CPU path should agree with run.c to fp32 rounding";
}

TEST(InferRunc, LogitsMatchRuncCpuFp16) {
  ANELAB_REQUIRE_DATA("reference/runc_260K_greedy64_logits.json");
  Engine e = make_engine(WType::kF16);
  const double err = max_logit_error(e);
  // fp16 weights: relative rounding 2^-11 per weight; logits reach ~20 -> errors of a few 1e-2.
  EXPECT_LT(err, 0.1);
}

struct RuncCase {
  const char* file;
  const char* prompt;
  int64_t steps;
  float temperature, topp;
  uint64_t seed;
};

std::string run_generate(const RuncCase& c, WType dt, const std::string& backend = "cpu") {
  Engine e = make_engine(dt, backend);
  auto tk = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  GenerateOptions o;
  o.steps = c.steps;
  o.sampling.temperature = c.temperature;
  o.sampling.top_p = c.topp;
  o.sampling.seed = c.seed;
  std::string out;
  generate(e, *tk, c.prompt, o, [&](std::string_view s) { out += s; });
  return out;
}

const RuncCase kCases[] = {
    {"reference/runc_260K_t0_n64_once.stdout", "Once upon a time", 64, 0.0f, 0.9f, 0},
    {"reference/runc_260K_t0_default.stdout", "", 256, 0.0f, 0.9f, 0},
    {"reference/runc_260K_t1_p09_s133742.stdout", "", 256, 1.0f, 0.9f, 133742},
};

TEST(InferRunc, StdoutByteIdenticalFp32) {
  for (const auto& c : kCases) {
    ANELAB_REQUIRE_DATA(c.file);
    EXPECT_EQ(run_generate(c, WType::kF32), slurp(test::data_path(c.file))) << c.file;
  }
}

TEST(InferRunc, GreedyStdoutByteIdenticalFp16) {
  for (const auto& c : kCases) {
    if (c.temperature != 0.0f) continue;
    ANELAB_REQUIRE_DATA(c.file);
    EXPECT_EQ(run_generate(c, WType::kF16), slurp(test::data_path(c.file))) << c.file;
  }
}

}  // namespace
}  // namespace anelab::infer
