// Op-test harness shared by the emulator tests: build a small MIL program with the typed builder
// (weights go into one blob file, passed as the weights dictionary exactly like the private API),
// run it on a backend with guard-filled surfaces, and compare with an fp64 reference.
//
// Tolerances (fp16 unit roundoff u = 2^-11). Every case's reference consumes the same fp16-rounded
// inputs and weights as the backend, so input rounding is not an error source. What remains is:
//   - the final rounding of each output to fp16: |e| <= u |y|;
//   - fp32 arithmetic before that rounding: for a K-term accumulation (conv, matmul, reductions,
//     softmax's sum) |e| <= K 2^-24 sum_k |x_k w_k| (worst case; typically sqrt(K) 2^-24);
//   - intermediate fp16 roundings of composite ops (sdpa: scores and probabilities), bounded per case;
//   - fp16 subnormal spacing 2^-24 as an absolute floor.
// Each reference returns y and a magnitude m (sum of |terms|, or |y| for elementwise ops); the check is
// |y_backend - y| <= rel * u * |y| + acc * K * 2^-24 * m + 2^-24 per element, plus an NMSE limit.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"
#include "framework/runtime/backend.h"

namespace anelab::test {

constexpr double kU = 1.0 / 2048.0;  // fp16 unit roundoff 2^-11
constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff 2^-24 (also fp16's smallest subnormal)
inline const char* kWeightsPath = "@model_path/weights/w.bin";

using Vec = std::vector<double>;

inline double r16(double v) { return static_cast<double>(round_fp16(static_cast<float>(v))); }

// Random fp16-representable values in [lo, hi).
inline Vec rand_vec(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = r16(d(g));
  return v;
}

// A program under construction plus its weights blob.
struct ProgramUnderTest {
  mil::ProgramBuilder pb;
  mil::FunctionBuilder* b = &pb.function("main");
  mil::BlobWriter blob;
  std::vector<Vec> inputs;  // values for each function input, in order

  mil::Value input(const std::string& name, mil::Shape shape, Vec values, mil::DType t = mil::DType::kFp16) {
    inputs.push_back(std::move(values));
    return b->input(name, mil::tensor_type(t, std::move(shape)));
  }
  // An fp16 BLOBFILE const (values must already be fp16-representable).
  mil::Value weight(mil::Shape shape, const Vec& values) {
    std::vector<float> f(values.begin(), values.end());
    const uint64_t off = blob.add_fp16(f);
    return b->const_blob(mil::tensor_type(mil::DType::kFp16, std::move(shape)), kWeightsPath, off);
  }
  rt::Weights weights() const {
    rt::Weights w;
    w[kWeightsPath] = std::make_shared<const std::vector<uint8_t>>(blob.bytes());
    return w;
  }
};

struct Reference {
  std::vector<Vec> y;    // per output
  std::vector<Vec> mag;  // per output: magnitude scale per element (|y| for elementwise ops)
  int64_t K = 1;         // accumulation length
};

struct Tolerance {
  double rel = 1.0;     // multiples of u on |y|
  double acc = 1.0;     // multiples of K 2^-24 on mag
  double nmse = 1e-6;   // limit on sum (e^2) / sum (y^2)
};

struct BackendRun {
  std::vector<Vec> out;
  std::vector<std::vector<uint8_t>> raw;  // output surfaces' tensor bytes
};

// Compiles and evaluates `prog` on backend `name`; checks the guard bytes after each output tensor.
inline BackendRun run_on(const std::string& name, ProgramUnderTest& prog, int threads = 0, int repeats = 1) {
  rt::BackendOptions opts;
  opts.threads = threads;
  auto be = rt::create_backend(name, opts);
  mil::Program p = prog.pb.build();
  auto k = be->compile(p, prog.weights());
  EXPECT_TRUE(k.is_ok()) << k.status().message();
  if (!k.is_ok()) return {};
  auto ins = (*k)->make_inputs(0, be->profile());
  auto outs = (*k)->make_outputs(0, be->profile());
  for (size_t i = 0; i < ins.size(); ++i) {
    std::vector<float> f(prog.inputs[i].begin(), prog.inputs[i].end());
    EXPECT_EQ(static_cast<int64_t>(f.size()), ins[i].numel()) << "input " << i;
    ins[i].write(f.data());
  }
  constexpr uint8_t kGuard = 0xA5;
  for (auto& o : outs) std::memset(o.data(), kGuard, o.alloc_bytes());
  std::vector<rt::Surface*> ip, op;
  for (auto& s : ins) ip.push_back(&s);
  for (auto& s : outs) op.push_back(&s);
  for (int r = 0; r < repeats; ++r) {
    Status st = be->evaluate(**k, 0, ip, op);
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  BackendRun res;
  for (auto& o : outs) {
    const auto* bytes = static_cast<const uint8_t*>(o.data());
    size_t bad = 0;
    for (size_t i = o.bytes(); i < o.alloc_bytes(); ++i) bad += bytes[i] != kGuard;
    EXPECT_EQ(bad, 0u) << "backend " << name << " wrote " << bad << " bytes past the output tensor";
    std::vector<float> f(static_cast<size_t>(o.numel()));
    o.read(f.data());
    res.out.emplace_back(f.begin(), f.end());
    res.raw.emplace_back(bytes, bytes + o.bytes());
  }
  return res;
}

inline void expect_close(const std::string& what, const Vec& got, const Vec& want, const Vec& mag, int64_t K,
                         const Tolerance& t) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double se = 0, sy = 0, worst = 0;
  size_t worst_i = 0, nonfinite = 0, violations = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) ++nonfinite;
    const double e = std::fabs(got[i] - want[i]);
    const double bound = t.rel * kU * std::fabs(want[i]) + t.acc * static_cast<double>(K) * kU32 * mag[i] + kU32;
    if (!(e <= bound)) ++violations;
    if (e / bound > worst) worst = e / bound, worst_i = i;
    se += e * e;
    sy += want[i] * want[i];
  }
  EXPECT_EQ(nonfinite, 0u) << what << ": NaN/Inf where the reference is finite";
  EXPECT_EQ(violations, 0u) << what << ": " << violations << " elements exceed the bound; worst at " << worst_i
                            << " got " << got[worst_i] << " want " << want[worst_i] << " (" << worst << "x bound)";
  const double nmse = sy > 0 ? se / sy : se;
  EXPECT_LE(nmse, t.nmse) << what << ": NMSE";
}

}  // namespace anelab::test
