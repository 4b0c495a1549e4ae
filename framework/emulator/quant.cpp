// Quantisation ops: quantize, dequantize (per tensor or per axis) and constexpr_affine_dequantize
// (folded into an fp16 const at compile time).
#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/emulator/lower.h"

namespace anelab::emu {

using mil::DType;
using mil::Shape;

namespace {

// ---- kernels --------------------------------------------------------------------------------------
// quantize: q = clamp(round_half_even(x / scale) + zp, qmin, qmax).
void k_quantize(const Step& s, const ExecCtx&) {
  const QuantArgs& p = step_args<QuantArgs>(s);
  const int64_t outer = p.outer, len = p.len, inner = p.inner;
  const float lo = p.qmin, hi = p.qmax;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < len; ++a) {
      const float sc = p.scale[static_cast<size_t>(a)], zp = p.zero_point[static_cast<size_t>(a)];
      const float* x = s.in[0] + (o * len + a) * inner;
      float* q = s.out + (o * len + a) * inner;
      for (int64_t j = 0; j < inner; ++j) {
        const float v = std::nearbyint(x[j] / sc) + zp;  // default rounding mode: nearest-even
        q[j] = std::isnan(v) ? zp : std::clamp(v, lo, hi);
      }
    }
}

// dequantize: y = (q - zp) * scale, rounded to the declared dtype.
void k_dequantize(const Step& s, const ExecCtx& ctx) {
  const QuantArgs& p = step_args<QuantArgs>(s);
  const int64_t outer = p.outer, len = p.len, inner = p.inner;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < len; ++a) {
      const float sc = p.scale[static_cast<size_t>(a)], zp = p.zero_point[static_cast<size_t>(a)];
      const float* q = s.in[0] + (o * len + a) * inner;
      float* y = s.out + (o * len + a) * inner;
      for (int64_t j = 0; j < inner; ++j) y[j] = (q[j] - zp) * sc;
    }
  round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
}

// ---- lowering -------------------------------------------------------------------------------------
// quantize(input, output_dtype, scale[, zero_point, axis]) / dequantize(input, scale[, zero_point, axis]);
// scale and zero_point must be consts (the registry has checked their shapes against the axis).
template <bool QUANTIZE>
void lower_quant(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const std::optional<int> axis = std::get<mil::QuantizeParams>(r.params).axis;
  const ValueInfo& x = l.value(op, "input");
  const Shape& sh = x.type.shape;
  QuantArgs a;
  a.inner = x.type.numel();
  if (axis) {
    const size_t ax = static_cast<size_t>(*axis);
    a.outer = prod(sh, 0, ax), a.len = sh[ax], a.inner = prod(sh, ax + 1, sh.size());
  }
  a.scale = l.lit_floats(op, "scale");
  a.zero_point = op.arg("zero_point") ? l.lit_floats(op, "zero_point") : std::vector<float>{0.0f};
  auto expand = [&](std::vector<float>& v, const char* what) {
    ANELAB_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == a.len, "emulator", l.where(op), ": ", what, " has ",
                 v.size(), " elements; expected 1 or ", a.len);
    if (v.size() == 1) v.assign(static_cast<size_t>(a.len), v[0]);
  };
  expand(a.scale, "scale");
  expand(a.zero_point, "zero_point");
  if (QUANTIZE) {
    const bool s8 = op.type.dtype == DType::kInt8;  // the registry allows int8 / uint8
    a.qmin = s8 ? -128.0f : 0.0f, a.qmax = s8 ? 127.0f : 255.0f;
  }
  l.new_step(op, QUANTIZE ? k_quantize : k_dequantize, {&x}, std::move(a));
}

// constexpr_affine_dequantize folded at compile time: y = (q - zero_point) * scale, rounded to fp16.
void lower_affine_dequantize(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const int axis = std::get<mil::AffineDequantParams>(r.params).axis;
  const mil::ConstValue &q = *op.attr("quantized_data"), &sc = *op.attr("scale"), &zp = *op.attr("zero_point");
  const Shape& shape = q.type.shape;
  std::vector<float> qd = l.decode_const(q, op), s = l.decode_const(sc, op), z = l.decode_const(zp, op);
  const int64_t len = shape[static_cast<size_t>(axis)],
                inner = prod(shape, static_cast<size_t>(axis) + 1, shape.size());
  auto per = [&](const std::vector<float>& v, const char* what) {
    ANELAB_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == len, "emulator", l.where(op), ": ", what, " has ",
                 v.size(), " elements; expected 1 or ", len, " (axis ", axis, ")");
  };
  per(s, "scale");
  per(z, "zero_point");
  for (size_t i = 0; i < qd.size(); ++i) {
    const size_t a = static_cast<size_t>((static_cast<int64_t>(i) / inner) % len);
    qd[i] = (qd[i] - z[z.size() == 1 ? 0 : a]) * s[s.size() == 1 ? 0 : a];
  }
  if (op.type.dtype == DType::kFp16) round_fp16_inplace(qd.data(), qd.size());
  l.set_const(op, std::move(qd));
}

constexpr LowerRule kRules[] = {
    {"quantize", lower_quant<true>},
    {"dequantize", lower_quant<false>},
    {"constexpr_affine_dequantize", lower_affine_dequantize},
};

}  // namespace

std::span<const LowerRule> quant_rules() { return kRules; }

}  // namespace anelab::emu
