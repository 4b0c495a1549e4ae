// Test helpers for the kernel tests: evaluate a program on the emulator with fp32 host data, NMSE,
// deterministic random data, and float64 matrix helpers.
//
// Tolerances in these tests are stated as NMSE limits (sum (y - ref)^2 / sum ref^2) derived from
// fp16: unit roundoff u = 2^-11, so one rounding of every element gives NMSE <= u^2 / 3 ~ 8e-8
// (uniform relative error in [-u, u]); a chain of k independent roundings, or a k-term fp16 sum of
// same-scale terms, gives about k u^2 / 3. Each check names the k it assumes.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"

namespace anelab::test {

constexpr double kU = 1.0 / 2048.0;  // fp16 unit roundoff
// NMSE of k independent fp16 roundings of relative size <= u (variance u^2/3 each).
inline double fp16_nmse(double k) { return k * kU * kU / 3.0; }

using F32 = std::vector<float>;
using F64 = std::vector<double>;

inline F64 to64(const F32& v) { return F64(v.begin(), v.end()); }
inline F32 to32(const F64& v) { return F32(v.begin(), v.end()); }

// Uniform values in [-a, a), rounded to fp16 so that inputs are exact on both sides.
inline F32 rand_f16(size_t n, double a, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(-a, a);
  F32 v(n);
  for (auto& x : v) x = round_fp16(static_cast<float>(d(g)));
  return v;
}

template <typename A, typename B>
double nmse(const A& got, const B& want) {
  double num = 0, den = 0;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return den > 0 ? num / den : num;
}

template <typename A>
bool all_finite(const A& v) {
  for (auto x : v)
    if (!std::isfinite(static_cast<double>(x))) return false;
  return true;
}

// Evaluates function 0 of `p` on a fresh emulator: inputs / outputs as fp32 arrays of each signature
// tensor (row-major). Counts one compile.
std::vector<F32> eval_program(const mil::Program& p, const rt::Weights& w, const std::vector<F32>& inputs);

// Records the worst NMSE per check name for the report (printed by each test binary at exit).
void record(const std::string& what, double value);

}  // namespace anelab::test
