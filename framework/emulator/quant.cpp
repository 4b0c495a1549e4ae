// Quantisation ops: quantize, dequantize (per tensor or per axis), constexpr_affine_dequantize and the ios18
// compressed weights constexpr_blockwise_shift_scale and constexpr_lut_to_dense (the constexpr ops are folded
// into consts at compile time).
#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/emulator/lower.h"

namespace anelab::emu {

using mil::DType;
using mil::Shape;

namespace {

// ---- step functions --------------------------------------------------------------------------------------
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

// Row-major index into the per-block parameter of shape out.shape / block for output element i.
size_t block_index(int64_t i, const Shape& out, const Shape& block) {
  int64_t idx = 0, stride = 1;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t coord = i % out[d];
    i /= out[d];
    const int64_t pdim = out[d] / block[d];
    idx += coord / block[d] * stride;
    stride *= pdim;
  }
  return static_cast<size_t>(idx);
}

// constexpr_blockwise_shift_scale folded at compile time: y = scale[blk] * (data - offset[blk]), rounded to the
// output dtype (the registry states the op, ops_decl.cpp).
void lower_blockwise_shift_scale(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const Shape& block = std::get<mil::BlockwiseParams>(r.params).block;
  const Shape& shape = op.type.shape;
  std::vector<float> d = l.decode_const(*op.attr("data"), op), s = l.decode_const(*op.attr("scale"), op);
  std::vector<float> o = op.attr("offset") ? l.decode_const(*op.attr("offset"), op) : std::vector<float>(s.size(), 0);
  for (size_t i = 0; i < d.size(); ++i) {
    const size_t b = block_index(static_cast<int64_t>(i), shape, block);
    d[i] = s[b] * (d[i] - o[b]);
  }
  if (op.type.dtype == DType::kFp16) round_fp16_inplace(d.data(), d.size());
  l.set_const(op, std::move(d));
}

// constexpr_lut_to_dense (scalar palettes) folded at compile time: y = lut[blk, indices, 0].
void lower_lut_to_dense(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const Shape& block = std::get<mil::BlockwiseParams>(r.params).block;
  const Shape& shape = op.type.shape;
  const mil::ConstValue& lut_c = *op.attr("lut");
  const auto k = static_cast<size_t>(lut_c.type.shape[shape.size()]);
  std::vector<float> ix = l.decode_const(*op.attr("indices"), op), lut = l.decode_const(lut_c, op);
  for (size_t i = 0; i < ix.size(); ++i) {
    const size_t b = block_index(static_cast<int64_t>(i), shape, block);
    const auto q = static_cast<size_t>(ix[i]);
    ANELAB_CHECK(q < k, "emulator", l.where(op), ": index ", q, " at element ", i, " is past the ", k, "-entry lut");
    ix[i] = lut[b * k + q];
  }
  l.set_const(op, std::move(ix));
}

constexpr LowerRule kQuantRules[] = {
    {"quantize", lower_quant<true>},
    {"dequantize", lower_quant<false>},
    {"constexpr_affine_dequantize", lower_affine_dequantize},
    {"constexpr_blockwise_shift_scale", lower_blockwise_shift_scale},
    {"constexpr_lut_to_dense", lower_lut_to_dense},
};

}  // namespace

std::span<const LowerRule> quant_rules() { return kQuantRules; }

}  // namespace anelab::emu
