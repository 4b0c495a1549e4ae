// Int8 weights and activations for the MIL kernels (see w8.h).
#include "framework/kernels/w8.h"

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/core/fp16.h"

namespace anelab::kern {

W8Matrix quantize_w8(std::span<const float> w, int64_t rows, int64_t cols) {
  ANELAB_CHECK(static_cast<int64_t>(w.size()) == rows * cols, "kernels", "int8 weights: ", w.size(),
               " values are not [", rows, ", ", cols, "]");
  W8Matrix m;
  m.rows = rows, m.cols = cols;
  m.q.resize(w.size());
  m.scale.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w.data() + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::abs(row[c]));
    ANELAB_CHECK(std::isfinite(amax), "kernels", "int8 weights: row ", r, " has a non-finite value");
    const float s = amax > 0.0f ? round_fp16(amax / 127.0f) : 1.0f;
    ANELAB_CHECK(s > 0.0f && std::isfinite(s), "kernels", "int8 weights: row ", r, " max |w| ", amax,
                 " has no fp16 scale (max |w| / 127 outside fp16's range)");
    m.scale[static_cast<size_t>(r)] = s;
    int8_t* q = m.q.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c)  // nearbyint: the default rounding mode, half to even
      q[c] = static_cast<int8_t>(std::clamp(std::nearbyint(row[c] / s), -127.0f, 127.0f));
  }
  return m;
}

std::vector<float> dequantize_w8(const W8Matrix& m) {
  std::vector<float> w(m.q.size());
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      const size_t i = static_cast<size_t>(r * m.cols + c);
      w[i] = round_fp16(static_cast<float>(m.q[i]) * m.scale[static_cast<size_t>(r)]);  // exact in fp32: 8 x 11 bits
    }
  return w;
}

float act_scale(float amax) {
  ANELAB_CHECK(std::isfinite(amax) && amax >= 0.0f, "kernels", "activation scale: max |x| ", amax, " is not finite");
  if (amax == 0.0f) return std::ldexp(1.0f, -24);
  const int e = std::clamp(static_cast<int>(std::ceil(std::log2(static_cast<double>(amax) / 127.0))), -24, 15);
  float s = std::ldexp(1.0f, e);
  if (amax / s > 127.0f && e < 15) s *= 2.0f;  // log2 rounded down at an exact power
  return s;
}

Value quant_dequant(FunctionBuilder& b, const Value& x, float s) {
  Value sc = b.scalar(mil::DType::kFp16, s);
  Value q = b.quantize(x, mil::DType::kInt8, sc);
  return b.dequantize(q, sc);
}

const char* act_input_of(const std::string& w) {
  if (w == "wq" || w == "wk" || w == "wv") return "attn_in";
  if (w == "wo") return "attn_out";
  if (w == "w1" || w == "w3") return "ffn_in";
  if (w == "w2") return "ffn_mid";
  fail("kernels", "unknown layer matrix '", w, "' (known: wq wk wv wo w1 w2 w3)");
}

}  // namespace anelab::kern
