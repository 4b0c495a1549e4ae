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

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "framework/backends/registry.h"
#include "framework/core/fp16.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"
#include "framework/mil/check.h"
#include "framework/runtime/backend.h"

namespace anelab::test {

constexpr double kU = 1.0 / 2048.0;        // fp16 unit roundoff 2^-11
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
  double rel = 1.0;    // multiples of u on |y|
  double acc = 1.0;    // multiples of K 2^-24 on mag
  double nmse = 1e-6;  // limit on sum (e^2) / sum (y^2)
};

struct BackendRun {
  std::vector<Vec> out;
  std::vector<std::vector<uint8_t>> raw;  // output surfaces' tensor bytes
};

// The device profile's row-stride rule (rt::check_program) wants every I/O tensor's last dimension to
// be whole 64-byte rows; the op cases use odd widths on purpose (that is what they test), so the
// harness widens such I/O: an input is declared [.., Wp] and sliced back to the case's shape, an output
// is concatenated with zeros to [.., Wp]. Staging places each row; the ops under test are unchanged.
struct RowPadding {
  std::vector<int64_t> in_w, out_w;  // per input / output: the case's width (0: not padded)
};
inline mil::Operation harness_op(std::string op, std::string out, mil::TensorType t,
                                 std::vector<std::pair<std::string, mil::Arg>> args = {},
                                 std::vector<std::pair<std::string, mil::ConstValue>> attrs = {}) {
  mil::Operation o;
  o.op = std::move(op);
  o.output = out;
  o.name = std::move(out);
  o.type = std::move(t);
  o.args = std::move(args);
  o.attrs = std::move(attrs);
  return o;
}
inline RowPadding pad_io_rows(mil::Program& p) {
  RowPadding pad;
  mil::Function& f = p.functions.at(0);
  std::vector<mil::Operation> head;
  for (auto& [n, t] : f.inputs) {
    const int64_t m = rt::dense_width_multiple(t.dtype), W = t.shape.back();
    pad.in_w.push_back(W % m ? W : 0);
    if (W % m == 0) continue;
    const mil::TensorType logical = t;
    const std::string padded = n + "_rows";
    t.shape.back() = (W + m - 1) / m * m;
    const int64_t r = logical.rank();
    auto c = [&](const std::string& what, std::vector<int64_t> v) {
      head.push_back(harness_op("const", padded + "_" + what, mil::tensor_type(mil::DType::kInt32, {r}), {},
                                {{"val", mil::ConstValue::ints(std::move(v))}}));
    };
    c("begin", std::vector<int64_t>(static_cast<size_t>(r), 0));
    c("size", logical.shape);
    head.push_back(harness_op("slice_by_size", n, logical,
                              {{"x", mil::Arg::value(padded)},
                               {"begin", mil::Arg::value(padded + "_begin")},
                               {"size", mil::Arg::value(padded + "_size")}}));
    n = padded;
  }
  f.ops.insert(f.ops.begin(), head.begin(), head.end());
  for (auto& o : f.outputs) {
    const mil::TensorType t = *f.type_of(o);
    const int64_t m = rt::dense_width_multiple(t.dtype), W = t.shape.back();
    pad.out_w.push_back(W % m ? W : 0);
    if (W % m == 0) continue;
    mil::TensorType zt = t, pt = t;
    zt.shape.back() = (W + m - 1) / m * m - W;
    pt.shape.back() = W + zt.shape.back();
    const std::string padded = o + "_rows";
    f.ops.push_back(
        harness_op("const", padded + "_zeros", zt, {},
                   {{"val", mil::ConstValue::floats(zt, std::vector<double>(static_cast<size_t>(zt.numel()), 0.0))}}));
    f.ops.push_back(harness_op("const", padded + "_axis", mil::scalar_type(mil::DType::kInt32), {},
                               {{"val", mil::ConstValue::int32(t.rank() - 1)}}));
    f.ops.push_back(harness_op("const", padded + "_interleave", mil::scalar_type(mil::DType::kBool), {},
                               {{"val", mil::ConstValue::boolean(false)}}));
    f.ops.push_back(harness_op("concat", padded, pt,
                               {{"axis", mil::Arg::value(padded + "_axis")},
                                {"interleave", mil::Arg::value(padded + "_interleave")},
                                {"values", mil::Arg::tuple({o, padded + "_zeros"})}}));
    o = padded;
  }
  mil::check_program(p);
  return pad;
}
// Row-major [rows, W] <-> [rows, Wp] (element copies; W = 0 means the widths are equal).
inline std::vector<float> widen_rows(const std::vector<float>& v, int64_t W, int64_t Wp) {
  if (W == 0 || W == Wp) return v;
  std::vector<float> out(v.size() / static_cast<size_t>(W) * static_cast<size_t>(Wp), 0.0f);
  for (size_t r = 0; r < v.size() / static_cast<size_t>(W); ++r)
    std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(r * W), W, out.begin() + static_cast<std::ptrdiff_t>(r * Wp));
  return out;
}
template <typename T>
inline std::vector<T> narrow_rows(const std::vector<T>& v, int64_t W, int64_t Wp, size_t elem = 1) {
  if (W == 0 || W == Wp) return v;
  const size_t w = static_cast<size_t>(W) * elem, wp = static_cast<size_t>(Wp) * elem, rows = v.size() / wp;
  std::vector<T> out(rows * w);
  for (size_t r = 0; r < rows; ++r)
    std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(r * wp), w, out.begin() + static_cast<std::ptrdiff_t>(r * w));
  return out;
}

// Compiles and evaluates `prog` on backend `name`; checks the guard bytes after each output tensor.
inline BackendRun run_on(const std::string& name, ProgramUnderTest& prog, int threads = 0, int repeats = 1) {
  rt::BackendOptions opts;
  opts.threads = threads;
  auto be = rt::create_backend(name, opts);
  mil::Program p = prog.pb.build();
  const RowPadding pad = pad_io_rows(p);
  auto k = be->compile(p, prog.weights());
  EXPECT_TRUE(k.is_ok()) << k.status().message();
  if (!k.is_ok()) return {};
  auto ins = (*k)->make_inputs(0, be->profile());
  auto outs = (*k)->make_outputs(0, be->profile());
  for (size_t i = 0; i < ins.size(); ++i) {
    std::vector<float> f = widen_rows(std::vector<float>(prog.inputs[i].begin(), prog.inputs[i].end()), pad.in_w[i],
                                      ins[i].type().shape.back());
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
  for (size_t j = 0; j < outs.size(); ++j) {
    auto& o = outs[j];
    const auto* bytes = static_cast<const uint8_t*>(o.data());
    size_t bad = 0;
    for (size_t i = o.bytes(); i < o.alloc_bytes(); ++i) bad += bytes[i] != kGuard;
    EXPECT_EQ(bad, 0u) << "backend " << name << " wrote " << bad << " bytes past the output tensor";
    std::vector<float> f(static_cast<size_t>(o.numel()));
    o.read(f.data());
    const int64_t Wp = o.type().shape.back();
    f = narrow_rows(f, pad.out_w[j], Wp);
    res.out.emplace_back(f.begin(), f.end());
    res.raw.push_back(
        narrow_rows(std::vector<uint8_t>(bytes, bytes + o.bytes()), pad.out_w[j], Wp, mil::dtype_bytes(o.dtype())));
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
