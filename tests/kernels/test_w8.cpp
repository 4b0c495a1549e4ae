// Int8 weights (W8) and int8 activations (W8A8) in the MIL kernels (framework/kernels/w8.h): the
// quantizer's bound, the activation scale, the printed constexpr op, the int8 blob bytes, and a linear
// layer on the emulator (a) bit-exact against the fp16 kernel with the folded weights fp16(q * scale)
// (and W8A8's host-quantized input) and (b) within the derived bound of the fp64 product W x.
//
// Bound of one output j of y = W x (n inputs), u = 2^-11 (fp16), the conv accumulating in fp32 and
// rounding once (framework/emulator/README.md):
//   |W - q s| <= s/2 per weight (rounding to the nearest integer, no clamping: |W| / s <= 127.06),
//   fp16(q s) = q s (1 + d), |d| <= u, fp32 accumulation error <= n 2^-24 sum |W' x|, output rounding u |y|,
// so |y_j - (W x)_j| <= s_j/2 sum_i |x_i| + (u + n 2^-24) sum_i |W'_ji x_i| + u |y_j|.
// W8A8 adds the input rounding |x - x'| <= s_a/2 (power-of-two s_a, no saturation): + s_a/2 sum_i |W'_ji|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "framework/kernels/nn.h"
#include "framework/kernels/w8.h"
#include "framework/mil/printer.h"
#include "tests/kernels/kern_util.h"

namespace anelab::test {
namespace {

using mil::DType;

// y = conv(x, W) with W int8 (w8) or fp16 (the folded values), x optionally through quant_dequant(s_a).
struct LinearProg {
  mil::Program program;
  rt::Weights weights;
};
LinearProg linear_prog(const kern::W8Matrix* w8, const F32* w16, int64_t cin, int64_t cout, int64_t S, float act) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  kern::BlobSet bs;
  mil::Value x = b.input("x", kern::act_type(cin, S));
  mil::Value xi = act > 0 ? kern::quant_dequant(b, x, act) : x;
  mil::Value w = w8 ? bs.int8_matrix(b, "w", *w8) : bs.matrix(b, "w", *w16, cout, cin);
  b.output(kern::linear(b, xi, w));
  return {pb.build(), bs.weights()};
}

F32 run(const LinearProg& p, const F32& x) { return eval_program(p.program, p.weights, {x}).at(0); }

struct Case {
  int64_t cin = 96, cout = 48, S = 64;
  F32 w, x;  // w [cout, cin] fp32; x [cin, S] fp16 values
};
Case make_case(uint32_t seed) {
  Case c;
  c.w = rand_f16(static_cast<size_t>(c.cout * c.cin), 0.5, seed);
  for (int64_t r = 0; r < c.cout; ++r)  // rows of different magnitude: per-channel scales matter
    for (int64_t i = 0; i < c.cin; ++i)
      c.w[static_cast<size_t>(r * c.cin + i)] *= std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
  c.x = rand_f16(static_cast<size_t>(c.cin * c.S), 2.0, seed + 1);
  return c;
}

TEST(KernelsW8, QuantizerRoundsPerOutputChannelWithinHalfAScale) {
  const Case c = make_case(3);
  const kern::W8Matrix m = kern::quantize_w8(c.w, c.cout, c.cin);
  for (int64_t r = 0; r < c.cout; ++r) {
    const float s = m.scale[static_cast<size_t>(r)];
    EXPECT_EQ(s, round_fp16(s)) << r;
    float amax = 0;
    int qmax = 0;
    for (int64_t i = 0; i < c.cin; ++i) {
      const size_t k = static_cast<size_t>(r * c.cin + i);
      amax = std::max(amax, std::abs(c.w[k]));
      qmax = std::max(qmax, std::abs(static_cast<int>(m.q[k])));
      EXPECT_LE(std::abs(static_cast<double>(c.w[k]) - static_cast<double>(m.q[k]) * s), s / 2.0) << r << "," << i;
    }
    EXPECT_EQ(qmax, 127) << "row " << r << ": the largest weight maps to +-127";
    EXPECT_EQ(s, round_fp16(amax / 127.0f)) << r;
  }
  const F32 zero(8, 0.0f);
  const kern::W8Matrix z = kern::quantize_w8(zero, 2, 4);
  EXPECT_EQ(z.scale, (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(z.q, std::vector<int8_t>(8, 0));
}

TEST(KernelsW8, ActivationScaleIsTheSmallestPowerOfTwoCoveringAmax) {
  EXPECT_EQ(kern::act_scale(127.0f), 1.0f);
  EXPECT_EQ(kern::act_scale(127.01f), 2.0f);
  EXPECT_EQ(kern::act_scale(63.5f), 0.5f);
  EXPECT_EQ(kern::act_scale(1.0f), 1.0f / 64);  // 1/127 -> 2^-6
  EXPECT_EQ(kern::act_scale(0.0f), std::ldexp(1.0f, -24));
  for (float a : {0.003f, 0.7f, 5.0f, 300.0f, 6e4f}) {
    const float s = kern::act_scale(a);
    EXPECT_LE(a / s, 127.0f) << a;
    EXPECT_GT(a / s, 63.5f) << a;  // s / 2 would not cover amax
  }
}

// quantize rounds half to even (coremltools' np.around; the ANE's tie rule is what a Mac must confirm)
// and saturates at [-128, 127]; dequantize multiplies back.
TEST(KernelsW8, QuantDequantRoundsTiesToEvenAndSaturates) {
  const F32 x = {0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, -2.5f, 126.5f, 127.5f, 300.0f, -128.5f, -300.0f, 0.49f, -0.51f};
  const F32 want = {0, 2, 2, 4, 0, -2, -2, 126, 127, 127, -128, -128, 0, -1};
  F32 in(32 * 64, 0.0f);  // [1, 32, 1, 64]: row 0 holds the cases
  std::copy(x.begin(), x.end(), in.begin());
  for (float s : {1.0f, 0.25f}) {
    F32 scaled = in;
    for (float& v : scaled) v *= s;
    mil::ProgramBuilder pb;
    auto& b = pb.function("main");
    b.output(kern::quant_dequant(b, b.input("x", kern::act_type(32, 64)), s));
    const F32 y = eval_program(pb.build(), {}, {scaled}).at(0);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], want[i] * s) << "x = " << x[i] << " * " << s;
  }
}

TEST(KernelsW8, ConstexprOpPrintsInTheBracketAttributeForm) {
  const F32 w = {0.5f, -0.25f, 1.0f, 2.0f, -4.0f, 1.0f};  // [2, 3]: scales 1/127 and 4/127
  const kern::W8Matrix m = kern::quantize_w8(w, 2, 3);
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  kern::BlobSet bs;
  mil::Value x = b.input("x", kern::act_type(3, 32));
  b.output(kern::linear(b, x, bs.int8_matrix(b, "wq", m)));
  const std::string text = mil::print(pb.build(mil::Dialect::kIos18));
  // digest §2.4 (MDX ane_int8_bench.m), with a per-output-channel scale tensor along axis 0
  const std::string line =
      "        tensor<fp16, [2, 3, 1, 1]> wq = constexpr_affine_dequantize()[axis = int32(0), name = string(\"wq\"), "
      "quantized_data = tensor<int8, [2, 3, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/wq.bin\"), "
      "offset = uint64(64))), scale = tensor<fp16, [2]>([0x1.02p-7, 0x1.02p-5]), zero_point = int8(0)];\n";
  EXPECT_NE(text.find(line), std::string::npos) << text;
  EXPECT_EQ(m.q, (std::vector<int8_t>{64, -32, 127, 64, -127, 32}));
}

TEST(KernelsW8, Int8BlobHasTheInt8DataTypeAndOneBytePerWeight) {
  const Case c = make_case(5);
  const kern::W8Matrix m = kern::quantize_w8(c.w, c.cout, c.cin);
  const LinearProg p8 = linear_prog(&m, nullptr, c.cin, c.cout, c.S, 0);
  const LinearProg p16 = linear_prog(nullptr, &c.w, c.cin, c.cout, c.S, 0);
  const std::vector<uint8_t>& b = *p8.weights.at("@model_path/weights/w.bin");
  const size_t n = static_cast<size_t>(c.cout * c.cin);
  ASSERT_EQ(b.size(), 128 + n);
  auto le32 = [&](size_t o) {
    return uint32_t(b[o]) | uint32_t(b[o + 1]) << 8 | uint32_t(b[o + 2]) << 16 | uint32_t(b[o + 3]) << 24;
  };
  EXPECT_EQ(le32(0), 1u);  // MILBlob storage_header: count 1, version 2
  EXPECT_EQ(le32(4), 2u);
  EXPECT_EQ(le32(64), 0xDEADBEEFu);
  EXPECT_EQ(le32(68), 4u);    // mil_dtype Int8 (StorageFormat.hpp), not Float16
  EXPECT_EQ(le32(72), n);     // data_size: one byte per weight
  EXPECT_EQ(le32(80), 128u);  // absolute data_offset
  EXPECT_EQ(std::memcmp(b.data() + 128, m.q.data(), n), 0);
  // the baked payload halves: n bytes instead of fp16's 2n
  EXPECT_EQ(p16.weights.at("@model_path/weights/w.bin")->size() - 128, 2 * (b.size() - 128));
}

// |y - W x| per output within the bound in the header; `act` > 0: W8A8 with that input scale.
void expect_within_bound(const Case& c, const kern::W8Matrix& m, const F32& y, float act) {
  const F32 wf = kern::dequantize_w8(m);
  const double u = kU, acc = static_cast<double>(c.cin) * std::ldexp(1.0, -24);
  for (int64_t j = 0; j < c.cout; ++j)
    for (int64_t t = 0; t < c.S; ++t) {
      double exact = 0, sx = 0, swx = 0, sw = 0;
      for (int64_t i = 0; i < c.cin; ++i) {
        const double w = c.w[static_cast<size_t>(j * c.cin + i)], we = wf[static_cast<size_t>(j * c.cin + i)];
        const double x = c.x[static_cast<size_t>(i * c.S + t)];
        exact += w * x, sx += std::abs(x), sw += std::abs(we), swx += std::abs(we) * (std::abs(x) + act / 2.0);
      }
      const double s = m.scale[static_cast<size_t>(j)], got = y[static_cast<size_t>(j * c.S + t)];
      const double bound = s / 2 * sx + act / 2 * sw + c.cin * s / 2 * act / 2 + (u + acc) * swx + u * std::abs(got);
      ASSERT_LE(std::abs(got - exact), bound) << "output " << j << " position " << t << (act > 0 ? " (w8a8)" : " (w8)");
      record(act > 0 ? "w8a8 linear |err| / bound" : "w8 linear |err| / bound", std::abs(got - exact) / bound);
    }
}

TEST(KernelsW8, W8LinearEqualsFoldedFp16AndStaysWithinTheRoundingBound) {
  const Case c = make_case(7);
  const kern::W8Matrix m = kern::quantize_w8(c.w, c.cout, c.cin);
  const F32 folded = kern::dequantize_w8(m);
  const F32 y8 = run(linear_prog(&m, nullptr, c.cin, c.cout, c.S, 0), c.x);
  const F32 y16 = run(linear_prog(nullptr, &folded, c.cin, c.cout, c.S, 0), c.x);
  EXPECT_EQ(y8, y16);  // the constexpr folds to exactly fp16(q * scale)
  expect_within_bound(c, m, y8, 0);
}

TEST(KernelsW8, W8A8LinearEqualsHostQuantizedInputAndStaysWithinTheBound) {
  const Case c = make_case(9);
  const kern::W8Matrix m = kern::quantize_w8(c.w, c.cout, c.cin);
  float amax = 0;
  for (float v : c.x) amax = std::max(amax, std::abs(v));
  const float act = kern::act_scale(amax);
  F32 xq(c.x.size());  // the C++ reference of quantize/dequantize: rne(x / s) clamped, times s
  for (size_t i = 0; i < xq.size(); ++i)
    xq[i] = static_cast<float>(std::clamp(std::nearbyint(static_cast<double>(c.x[i]) / act), -128.0, 127.0) * act);
  const F32 folded = kern::dequantize_w8(m);
  const F32 y = run(linear_prog(&m, nullptr, c.cin, c.cout, c.S, act), c.x);
  EXPECT_EQ(y, run(linear_prog(nullptr, &folded, c.cin, c.cout, c.S, 0), xq));
  expect_within_bound(c, m, y, act);
}

}  // namespace
}  // namespace anelab::test
