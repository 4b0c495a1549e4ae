// Shared helpers of the native-backend contract tests: small programs with their weights, a
// NativeBackend over a FakeShim that the test keeps a pointer to, and surface helpers.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "framework/ane/native_backend.h"
#include "framework/backends/registry.h"
#include "framework/kernels/nn.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"
#include "framework/mil/printer.h"
#include "framework/runtime/backend.h"
#include "tests/support/fake_shim.h"

namespace anelab::test {

struct Prog {
  mil::Program program;
  rt::Weights weights;
};

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline rt::Blob blob_of(std::span<const float> values) {
  mil::BlobWriter w;
  w.add_fp16(values);
  return std::make_shared<const std::vector<uint8_t>>(w.take());
}

// y = conv(x, W): x [1, cin, 1, s] fp16, W from "@model_path/<file>" (one chunk at offset 64).
inline Prog conv_prog(int64_t cin, int64_t cout, int64_t s, uint32_t seed = 1,
                      const std::string& file = "weights/w.bin", mil::DType io = mil::DType::kFp16) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  mil::Value x = b.input("x", kern::act_type(cin, s, io));
  mil::Value xin = io == mil::DType::kFp16 ? x : b.cast(x, mil::DType::kFp16);
  const std::string key = "@model_path/" + file;
  mil::Value w = b.const_blob(mil::tensor_type(mil::DType::kFp16, {cout, cin, 1, 1}), key, 64);
  mil::Value y = b.named("y").conv(xin, w);
  b.output(io == mil::DType::kFp16 ? y : b.cast(y, io));
  Prog p{pb.build(), {}};
  p.weights[key] = blob_of(randn(static_cast<size_t>(cout * cin), seed, 1.0f / std::sqrt(float(cin))));
  return p;
}

// Two procedures (digest §1.9): f0: y0 = conv(x0, W0) [C -> C]; f1: y1 = sigmoid(conv(x1, W1)).
inline Prog two_function_prog(int64_t c, int64_t s) {
  mil::ProgramBuilder pb;
  auto& f0 = pb.function("f0");
  auto x0 = f0.input("x0", kern::act_type(c, s));
  auto w0 = f0.const_blob(mil::tensor_type(mil::DType::kFp16, {c, c, 1, 1}), "@model_path/weights/w0.bin", 64);
  f0.output(f0.conv(x0, w0));
  auto& f1 = pb.function("f1");
  auto x1 = f1.input("x1", kern::act_type(c, s));
  auto w1 = f1.const_blob(mil::tensor_type(mil::DType::kFp16, {c, c, 1, 1}), "@model_path/weights/w1.bin", 64);
  f1.output(f1.sigmoid(f1.conv(x1, w1)));
  Prog p{pb.build(), {}};
  p.weights["@model_path/weights/w0.bin"] = blob_of(randn(static_cast<size_t>(c * c), 11, 0.2f));
  p.weights["@model_path/weights/w1.bin"] = blob_of(randn(static_cast<size_t>(c * c), 12, 0.2f));
  return p;
}

// Two inputs of different sizes (ascending, for the m1 slot rule), one output: concat on channels.
inline Prog two_input_prog(int64_t c0, int64_t c1, int64_t s) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  auto a = b.input("a", kern::act_type(c0, s));
  auto c = b.input("c", kern::act_type(c1, s));
  b.output(b.concat({b.mul(a, 2.0), c}, 1));
  return {pb.build(), {}};
}

// Causal attention block: q, k, v projections (conv), heads, matmul + mask + softmax + matmul, Wo.
inline Prog attention_prog(int64_t d, int64_t heads, int64_t s, uint32_t seed = 5) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  kern::BlobSet blobs;
  auto x = b.input("x", kern::act_type(d, s));
  const float sc = 1.0f / std::sqrt(float(d));
  auto wq = randn(size_t(d * d), seed, sc), wk = randn(size_t(d * d), seed + 1, sc),
       wv = randn(size_t(d * d), seed + 2, sc), wo = randn(size_t(d * d), seed + 3, sc);
  auto q = kern::split_heads(b, kern::linear(b, x, blobs.matrix(b, "wq", wq, d, d)), heads);
  auto k = kern::split_heads(b, kern::linear(b, x, blobs.matrix(b, "wk", wk, d, d)), heads);
  auto v = kern::split_heads(b, kern::linear(b, x, blobs.matrix(b, "wv", wv, d, d)), heads);
  auto mask = blobs.tensor(b, "mask", mil::tensor_type(mil::DType::kFp16, {1, 1, s, s}), kern::causal_mask(s));
  auto a = kern::causal_attention(b, q, k, v, mask, 1.0 / std::sqrt(double(d / heads)));
  b.output(kern::linear(b, kern::merge_heads(b, a), blobs.matrix(b, "wo", wo, d, d)));
  return {pb.build(), blobs.weights()};
}

// A NativeBackend over a FakeShim; `fake` stays valid while `backend` lives.
struct Native {
  ane::FakeShim* fake = nullptr;
  std::unique_ptr<ane::NativeBackend> backend;
};
inline Native make_native(const std::string& device = "m4", int budget = -1, ane::FakeShimOptions fo = {},
                          ane::NativeOptions no = {}) {
  fo.device = device;
  auto shim = std::make_unique<ane::FakeShim>(fo);
  Native n;
  n.fake = shim.get();
  rt::BackendOptions o;
  o.device = device;
  o.compile_budget = budget;
  o.threads = 1;
  n.backend = std::make_unique<ane::NativeBackend>(std::move(shim), o, no);
  return n;
}

inline std::unique_ptr<rt::Backend> make_emulator(const std::string& device = "m4") {
  rt::BackendOptions o;
  o.device = device;
  o.threads = 1;
  return rt::create_backend("emulator", o);
}

inline std::vector<rt::Surface*> ptrs(std::vector<rt::Surface>& v) {
  std::vector<rt::Surface*> p;
  for (auto& s : v) p.push_back(&s);
  return p;
}

// Fills every input surface of function fn with fp16-rounded random values (seeded by index).
inline void fill_inputs(std::vector<rt::Surface>& ins, uint32_t seed) {
  for (size_t i = 0; i < ins.size(); ++i) {
    auto v = randn(static_cast<size_t>(ins[i].numel()), seed + static_cast<uint32_t>(i));
    ins[i].write(v.data());
  }
}

// Compiles `p` on `be`, evaluates function fn on inputs seeded by `seed`, returns each output's bytes.
inline std::vector<std::vector<uint8_t>> run_bytes(rt::Backend& be, const Prog& p, int fn, uint32_t seed) {
  auto k = be.compile(p.program, p.weights);
  EXPECT_TRUE(k.is_ok()) << k.status().message();
  if (!k) return {};
  auto ins = (*k)->make_inputs(fn, be.profile());
  auto outs = (*k)->make_outputs(fn, be.profile());
  fill_inputs(ins, seed);
  Status s = be.evaluate(**k, fn, ptrs(ins), ptrs(outs));
  EXPECT_TRUE(s.is_ok()) << s.message();
  std::vector<std::vector<uint8_t>> r;
  for (auto& o : outs) {
    const auto* b = static_cast<const uint8_t*>(o.data());
    r.emplace_back(b, b + o.bytes());
  }
  return r;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace anelab::test
