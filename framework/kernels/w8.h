// Int8 weights and activations for the MIL kernels (the ANE path; docs/quantization.md "On the ANE").
//
// W8: a weight matrix [out, in] is quantized per output channel, symmetric, zero point 0:
//   scale[r] = fp16(max_c |W[r][c]| / 127),  q[r][c] = clamp(round_half_even(W[r][c] / scale[r]), -127, 127)
// and baked as an int8 BLOBFILE (1 byte per element, the fp16 blob's headers: digest §3.3) read by
//   constexpr_affine_dequantize()[axis = int32(0), name, quantized_data = tensor<int8, [out, in, 1, 1]>(BLOBFILE(..)),
//                                 scale = tensor<fp16, [out]>([...]), zero_point = int8(0)]
// in the bracket-attribute form MDX ane_int8_bench.m compiles on M4 (digest §2.4, §2.6 item 5). The
// compiler folds it into the fp16 weight fp16(q * scale) (dequantize_w8), so |W - W8| <= scale / 2 per
// element (the rounding; the clamp never bites because |W| / scale <= 127 (1 + 2^-11) < 127.5), plus the
// fp16 rounding of q * scale (relative 2^-11).
//
// W8A8: each conv input x additionally goes through quantize (int8) and dequantize back to fp16 with a
// static per-tensor scale s that is a power of two, s = 2^ceil(log2(amax / 127)) (act_scale), amax
// calibrated on a prompt through the fp16 kernels. A power of two keeps x / s and q * s exact in fp16
// and fp32, so only the rounding of x / s to an integer (half to even, coremltools' np.around) and the
// saturation at +-127 remain: |x - dequant(quant(x))| <= s / 2 while |x| <= 127.5 s.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/mil/builder.h"

namespace anelab::kern {

using mil::FunctionBuilder;
using mil::Value;

struct W8Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> q;     // [rows, cols] row-major, in [-127, 127]
  std::vector<float> scale;  // [rows] fp16 values, > 0
};

// Per-output-channel symmetric int8 quantization of w [rows, cols] (above). An all-zero row gets scale 1.
W8Matrix quantize_w8(std::span<const float> w, int64_t rows, int64_t cols);
// The fp16 weight the compiler folds the constexpr into: fp16(q * scale), [rows, cols].
std::vector<float> dequantize_w8(const W8Matrix& m);

// The static activation scale for a tensor whose calibrated max |x| is amax: the smallest power of two
// s >= amax / 127, within fp16's 2^-24 .. 2^15 (amax 0: 2^-24).
float act_scale(float amax);
// x -> quantize(int8, scale s) -> dequantize(s): fp16 values k * s, |k| <= 127 (the W8A8 conv input).
Value quant_dequant(FunctionBuilder& b, const Value& x, float s);

// The activation a projection reads, named for the calibration: wq wk wv -> "attn_in", wo -> "attn_out",
// w1 w3 -> "ffn_in", w2 -> "ffn_mid"; throws for other names.
const char* act_input_of(const std::string& weight);

}  // namespace anelab::kern
