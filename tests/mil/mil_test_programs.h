// Programs shared by the MIL tests: built with the typed builder, printed to golden files, round-tripped.
#pragma once
#include <cmath>

#include "framework/mil/builder.h"

namespace anelab::mil::testprogs {

inline TensorType f16(Shape s) { return tensor_type(DType::kFp16, std::move(s)); }

// A static-pipeline style linear: one conv with a BLOBFILE weight, bias add.
inline Program conv_kernel(Dialect d) {
  ProgramBuilder pb;
  auto& b = pb.function("main");
  auto x = b.input("x", f16({1, 768, 1, 256}));
  auto w = b.named("Wq").const_blob(f16({512, 768, 1, 1}), "@model_path/weights/wq.bin", 64);
  auto bias = b.named("bq").const_blob(f16({1, 512, 1, 1}), "@model_path/weights/bq.bin", 64);
  auto q = b.named("cq").conv(x, w);
  b.output(b.named("out").add(q, bias));
  return pb.build(d);
}

// RMSNorm + causal attention + output projection, as in the fwdAttn kernel (small dims).
inline Program rmsnorm_attention_kernel(Dialect d, int64_t D = 64, int64_t H = 4, int64_t S = 32) {
  const int64_t HD = D / H, cs = 64 + D * D * 2;
  ProgramBuilder pb;
  auto& b = pb.function("main");
  auto x = b.input("x", f16({1, D, 1, S}));
  auto sq = b.named("sq").mul(x, x);
  auto ss = b.named("ss").reduce_sum(sq, {1});
  auto ss2 = b.named("ss2").mul(ss, 1.0 / static_cast<double>(D));
  auto ss3 = b.named("ss3").add(ss2, 1e-5);
  auto rrms = b.named("rrms").pow(ss3, -0.5);
  auto rw = b.named("rw").const_blob(f16({1, D, 1, 1}), "@model_path/weights/rms1.bin", 64);
  auto xr = b.named("xr").mul(x, rrms);
  auto xn = b.named("xn").mul(xr, rw);
  auto heads = [&](const char* n, int i) {
    auto w = b.named(std::string("W") + n)
                 .const_blob(f16({D, D, 1, 1}), "@model_path/weights/weight.bin", static_cast<uint64_t>(64 + i * cs));
    auto f = b.named(std::string(n) + "f").conv(xn, w);
    auto r = b.named(std::string(n) + "r").reshape(f, {1, H, HD, S});
    return b.named(std::string(n) + "t").transpose(r, {0, 1, 3, 2});
  };
  auto q = heads("q", 0), k = heads("k", 1), v = heads("v", 2);
  auto qk = b.named("qk").matmul(q, k, false, true);
  auto sc = b.named("sc").mul(qk, 1.0 / std::sqrt(static_cast<double>(HD)));
  auto mask = b.named("mask").const_blob(f16({1, 1, S, S}), "@model_path/weights/mask.bin", 64);
  auto ms = b.named("ms").add(sc, mask);
  auto aw = b.named("aw").softmax(ms, -1);
  auto a = b.named("a").matmul(aw, v);
  auto at = b.named("at").transpose(a, {0, 1, 3, 2});
  auto af = b.named("af").reshape(at, {1, D, 1, S});
  auto wo =
      b.named("Wo").const_blob(f16({D, D, 1, 1}), "@model_path/weights/weight.bin", static_cast<uint64_t>(64 + 3 * cs));
  auto oo = b.named("oo").conv(af, wo);
  b.output(b.named("taps").concat({oo, xn}, 1));
  return pb.build(d);
}

// Every registered op at least once.
inline Program every_op_program(Dialect d) {
  ProgramBuilder pb;
  auto& b = pb.function("main");
  auto x = b.input("x", f16({1, 32, 4, 16}));
  auto h = b.input("h", f16({1, 2, 16, 8}));
  auto c = b.conv(x, b.const_tensor(f16({16, 8, 3, 3}), std::vector<double>(16 * 8 * 9, -0.25)),
                  {.strides = {1, 2},
                   .dilations = {1, 1},
                   .pad = {1, 1, 1, 1},
                   .pad_type = "custom",
                   .groups = 4,
                   .bias = b.const_tensor(f16({16}), std::vector<double>(16, 0.1))});
  auto e = b.exp(b.tanh(b.relu(b.softplus(b.sigmoid(c)))));
  auto r = b.real_div(b.sub(e, 0.5), b.add(b.identity(e), 2.0));
  auto m = b.reduce_max(b.pow(r, 2.0), {1, -1}, true);
  auto s = b.slice_by_index(x, {0, 1, 0, 0}, {1, 32, 4, 16},
                            {.stride = {1, 2, 1, -1},
                             .begin_mask = {false, false, false, true},
                             .end_mask = {false, false, false, true},
                             .squeeze_mask = {}});
  auto s2 = b.slice_by_size(s, {0, 0, 1, 0}, {1, 16, 2, -1});
  auto cat = b.concat({s2, s2}, 2, true);
  auto t = b.transpose(b.reshape(cat, {1, 16, 4, 16}), {0, 2, 1, 3});
  auto f32 = b.cast(t, DType::kFp32);
  auto q = b.quantize(b.cast(f32, DType::kFp16), DType::kInt8, 0.0625,
                      {.zero_point = b.scalar(DType::kInt8, 0), .axis = {}});
  auto dq = b.dequantize(q, 0.0625, {.zero_point = b.scalar(DType::kInt8, 0), .axis = {}});
  ConstValue qd{tensor_type(DType::kInt8, {2, 4}), {}, {-128, -1, 0, 1, 2, 3, 4, 127}, {}, {}};
  auto w = b.constexpr_affine_dequantize(qd, ConstValue::floats(f16({2}), {0.125, 0.5}), ConstValue::int8(0), 0);
  auto wb = b.constexpr_affine_dequantize(
      ConstValue::blobfile(tensor_type(DType::kUint8, {16, 16, 1, 1}), "@model_path/weights/q8.bin", 64),
      ConstValue::fp16(0x1p-3), ConstValue{scalar_type(DType::kUint8), {}, {128}, {}, {}}, 0);
  // ios18 4-bit weights: blockwise shift-scale (block 32 along axis 1) and a 16-entry LUT per output channel.
  std::vector<double> sc4(32), lut4(256);
  for (size_t i = 0; i < sc4.size(); ++i) sc4[i] = 0x1p-6 * static_cast<double>(i + 1);
  for (size_t i = 0; i < lut4.size(); ++i) lut4[i] = 0.25 * static_cast<double>(static_cast<int>(i % 16) - 8);
  auto w4 = b.constexpr_blockwise_shift_scale(
      ConstValue::blobfile(tensor_type(DType::kUint4, {16, 64, 1, 1}), "@model_path/weights/q4.bin", 64),
      ConstValue::floats(f16({16, 2, 1, 1}), sc4),
      ConstValue{tensor_type(DType::kUint4, {16, 2, 1, 1}), {}, std::vector<int64_t>(32, 8), {}, {}});
  auto l4 = b.constexpr_lut_to_dense(
      ConstValue::blobfile(tensor_type(DType::kUint4, {16, 16, 1, 1}), "@model_path/weights/lut4.bin", 64),
      ConstValue::floats(f16({16, 1, 1, 1, 16, 1}), lut4));
  auto sm = b.softmax(b.matmul(h, h, true, false), -2);
  auto mask = b.const_tensor(tensor_type(DType::kBool, {1, 1, 16, 16}), std::vector<double>(256, 1));
  auto att = b.scaled_dot_product_attention(h, h, h, mask);
  auto ln = b.layer_norm(att, {-1}, b.const_tensor(f16({8}), std::vector<double>(8, 1)),
                         b.const_tensor(f16({8}), std::vector<double>(8, 0)), 1e-5);
  auto red = b.reduce_sum(ln, {1, 2, 3}, false);
  b.output(m);
  b.output(dq);
  b.output(b.mul(w, 3.0));
  b.output(b.conv(b.slice_by_size(x, {0, 0, 0, 0}, {1, 16, 1, 1}), wb));
  b.output(sm);
  b.output(red);
  b.output(b.mul(w4, 2.0));
  b.output(b.mul(l4, 2.0));
  return pb.build(d);
}

// Two functions (multi-procedure) sharing a blob weight.
inline Program multi_function_program(Dialect d) {
  ProgramBuilder pb;
  for (int k = 0; k < 3; ++k) {
    auto& b = pb.function("layer" + std::to_string(k));
    auto x = b.input("x" + std::to_string(k), f16({1, 64, 1, 16}));
    auto w = b.const_blob(f16({64, 64, 1, 1}), "@model_path/weights/shared.bin", 64);
    auto y = b.conv(x, w);
    b.output(y);
    if (k == 1) b.output(b.softmax(y, 1));
  }
  return pb.build(d);
}

}  // namespace anelab::mil::testprogs
