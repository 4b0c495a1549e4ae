// The Hugging Face reference of tests/fixtures/hf (scripts/make_hf_fixtures.py): the reference file,
// the error measure and the tolerances, shared by the engine-level test (test_hf.cpp) and the CLI's
// checking interface test (test_logits_cli.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/common/test_data.h"

namespace anelab::test {

// tests/fixtures/hf/reference.json (gpt2, qwen2, qwen2_bf16, llama_fp16) or, for the newer
// architectures, tests/fixtures/hf/reference_<name>.json.
inline const nlohmann::json& hf_reference(const std::string& file = "reference.json") {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::ifstream f(source_path("tests/fixtures/hf/" + file));
    it = cache.emplace(file, nlohmann::json::parse(f)).first;
  }
  return it->second;
}

// max |a - ref| / max |ref| over one position's logits
inline double hf_rel_err(const float* a, const std::vector<float>& ref) {
  double e = 0, m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e = std::max(e, std::abs(static_cast<double>(a[i]) - ref[i]));
    m = std::max(m, std::abs(static_cast<double>(ref[i])));
  }
  return e / m;
}

// fp32 weights computed in fp32: fp32 files agree to < 1e-6 of the logit range (dot products of <= 160
// terms, unit roundoff 6e-8). The fp16/bf16-saved fixtures differ by up to 2.2e-4 at later positions
// although their weights convert exactly; the likely cause is on the reference side (HF builds the rotary
// inv_freq buffer while the model is in the half dtype, so it is rounded before the fp32 upcast) -- the
// greedy continuations still match token for token. For gemma3_bf16 this cause is measured: its reference
// keeps RoPE frequencies rounded to bf16 (the script's model.to(bfloat16) rounds the inv_freq buffers), and
// the CPU path with its frequencies rounded the same way differs by 1.2e-6; with fp32 frequencies the
// angle error grows with the position (2^-9 relative) and reaches 9.0e-4 at position 39 of the 40-token
// prompt (RoPE base 1e6, window 4), within the bound of 1e-3 of the logit range.
inline double hf_fp32_tol(const std::string& name) {
  if (name == "gpt2" || name == "qwen2") return 1e-6;
  return name == "gemma3_bf16" ? 1e-3 : 5e-4;
}
// fp16 weights: per-weight rounding 2^-11 relative -> about 1e-3 of the logit range.
inline constexpr double kHfFp16Tol = 1e-2;
// fp16 activations inside the MIL kernels as well (the ANE's storage precision): ~20 fp16 roundings of
// 2^-11 on the way to the logits, 1e-2 of the range, doubled.
inline constexpr double kHfMilFp16Tol = 2e-2;

}  // namespace anelab::test
