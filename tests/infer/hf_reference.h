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

// Weights computed in fp32 against transformers' fp32 logits: the references are computed from the saved
// files loaded back in fp32 (scripts/make_hf_fixtures.py), so half-precision files convert exactly and both
// sides hold the same fp32 weights and RoPE frequencies; what is left is fp32 summation order over <= 3
// layers of dot products of <= 160 terms (unit roundoff 6e-8, a few e-7 of the logit range measured): 1e-5.
inline double hf_fp32_tol(const std::string&) { return 1e-5; }
// fp16 weights: per-weight rounding 2^-11 relative -> about 1e-3 of the logit range.
inline constexpr double kHfFp16Tol = 1e-2;
// fp16 activations inside the MIL kernels as well (the ANE's storage precision): ~20 fp16 roundings of
// 2^-11 on the way to the logits, 1e-2 of the range, doubled.
inline constexpr double kHfMilFp16Tol = 2e-2;

}  // namespace anelab::test
