// The op declarations: one entry per MIL op (argument names exactly as the ANE compiler expects,
// ane_digest §2.5, with their defaults) and its resolver: the output type and the typed parameters
// (op_params.h) every backend lowers from. To add an op, add one entry to declare_ops() below.
#include <algorithm>

#include "framework/mil/ops.h"

namespace anelab::mil {
namespace {

using D = DType;
const std::vector<DType> kFloat{D::kFp16, D::kFp32};
const std::vector<DType> kNumeric{D::kFp16, D::kFp32, D::kInt32};
const std::vector<DType> kInt{D::kInt32};
const std::vector<DType> kBoolT{D::kBool};
const std::vector<DType> kStr{D::kString};
const std::vector<DType> kQuant{D::kInt8, D::kUint8};
const std::vector<DType> kPacked{D::kInt8, D::kUint8, D::kUint4};  // ios18 compressed weight data

ArgSpec val(std::string n, std::vector<DType> d = {}, bool req = true) {
  return {std::move(n), req, ArgKind::kValue, std::move(d)};
}
ArgSpec scal(std::string n, std::vector<DType> d, bool req = true) {
  return {std::move(n), req, ArgKind::kConstScalar, std::move(d)};
}
ArgSpec vec(std::string n, bool req = true, std::vector<DType> d = kInt) {
  return {std::move(n), req, ArgKind::kConstTensor, std::move(d)};
}
// An optional argument with the value it takes when absent.
ArgSpec dflt(ArgSpec a, ConstValue v) {
  a.required = false;
  a.dflt = std::move(v);
  return a;
}

// A resolver for ops without parameters beyond their output type.
template <TensorType (*F)(const OpContext&)>
Resolved plain(const OpContext& c) {
  return {F(c), NoParams{}};
}

ConvGeometry resolve_conv(const OpContext& c);
SliceGeometry resolve_slice(const OpContext& c);

// ---- rules ------------------------------------------------------------------------------------

TensorType infer_const(const OpContext& c) {
  const ConstValue& v = c.attr("val");
  size_t n = static_cast<size_t>(v.type.numel());
  for (int64_t d : v.type.shape)
    if (d <= 0) c.fail("val has non-positive dimension in ", v.type.str());
  if (v.blob) {
    if (v.type.rank() == 0) c.fail("a BLOBFILE const must be a tensor, got ", v.type.str());
    if (!v.f.empty() || !v.i.empty()) c.fail("BLOBFILE const also holds inline data");
  } else if (v.type.dtype == D::kString) {
    if (v.type.rank() != 0) c.fail("string consts must be scalars, got ", v.type.str());
  } else if (is_float(v.type.dtype) ? v.f.size() != n || !v.i.empty() : v.i.size() != n || !v.f.empty()) {
    c.fail("val ", v.type.str(), " holds ", std::max(v.f.size(), v.i.size()), " elements, expected ", n);
  }
  return v.type;
}

TensorType infer_unary(const OpContext& c) { return c.type("x"); }

Resolved resolve_binary(const OpContext& c) {
  const TensorType &x = c.type("x"), &y = c.type("y");
  if (x.dtype != y.dtype) c.fail("x ", x.str(), " and y ", y.str(), " have different dtypes");
  auto s = broadcast_shapes(x.shape, y.shape);
  if (!s) c.fail("cannot broadcast ", c.desc("x"), " with ", c.desc("y"));
  return {{x.dtype, *s}, BroadcastParams{*s}};
}

Resolved resolve_conv_op(const OpContext& c) {
  const TensorType &x = c.type("x"), &w = c.type("weight");
  if (x.rank() != 4) c.fail("x must be [N, C, H, W], got ", c.desc("x"));
  if (w.rank() != 4) c.fail("weight must be [Cout, Cin/groups, kH, kW], got ", c.desc("weight"));
  if (w.dtype != x.dtype)
    c.fail("weight ", w.str(), " and x ", x.str(),
           " have different dtypes (int8 weights need constexpr_affine_dequantize)");
  ConvGeometry g = resolve_conv(c);
  if (w.shape[1] * g.groups != x.shape[1])
    c.fail(c.desc("weight"), " expects x with ", w.shape[1] * g.groups, " channels",
           g.groups > 1 ? cat(" (groups ", g.groups, ")") : "", ", got ", c.desc("x"));
  if (w.shape[0] % g.groups != 0) c.fail(c.desc("weight"), ": output channels not divisible by groups ", g.groups);
  if (c.has("bias")) {
    const TensorType& b = c.type("bias");
    if (b.dtype != x.dtype || b.shape != Shape{w.shape[0]})
      c.fail("bias must be [", w.shape[0], "] ", dtype_name(x.dtype), ", got ", b.str());
  }
  if (g.out_h <= 0 || g.out_w <= 0)
    c.fail("kernel ", shape_str(w.shape), " does not fit ", c.desc("x"), " (output ", g.out_h, "x", g.out_w, ")");
  return {{x.dtype, {x.shape[0], w.shape[0], g.out_h, g.out_w}}, g};
}

Resolved resolve_matmul(const OpContext& c) {
  TensorType x = c.type("x"), y = c.type("y");
  if (x.dtype != y.dtype) c.fail("x ", x.str(), " and y ", y.str(), " have different dtypes");
  if (x.rank() < 2 || y.rank() < 2) c.fail("x and y must have rank >= 2, got ", c.desc("x"), ", ", c.desc("y"));
  bool tx = c.boolean("transpose_x"), ty = c.boolean("transpose_y");
  Shape xs = x.shape, ys = y.shape;
  if (tx) std::swap(xs[xs.size() - 1], xs[xs.size() - 2]);
  if (ty) std::swap(ys[ys.size() - 1], ys[ys.size() - 2]);
  int64_t m = xs[xs.size() - 2], k = xs.back(), k2 = ys[ys.size() - 2], n = ys.back();
  if (k != k2)
    c.fail("inner dimensions differ: ", c.desc("x"), tx ? " (transposed)" : "", " has K=", k, ", ", c.desc("y"),
           ty ? " (transposed)" : "", " has K=", k2);
  auto batch = broadcast_shapes(Shape(xs.begin(), xs.end() - 2), Shape(ys.begin(), ys.end() - 2));
  if (!batch) c.fail("cannot broadcast batch dimensions of ", c.desc("x"), " and ", c.desc("y"));
  MatmulParams p{tx, ty, m, k, n, *batch};
  batch->push_back(m);
  batch->push_back(n);
  return {{x.dtype, *batch}, p};
}

int axis_of(const OpContext& c, const std::string& arg, int rank) {
  int64_t a = c.int_scalar(arg);
  auto ax = normalize_axis(a, rank);
  if (!ax) c.fail(arg, " = ", a, " is out of range for ", c.desc("x"));
  return *ax;
}

Resolved resolve_softmax(const OpContext& c) {
  return {c.type("x"), AxisParams{axis_of(c, "axis", c.type("x").rank())}};
}

TensorType infer_reshape(const OpContext& c) {
  const TensorType& x = c.type("x");
  Shape s = c.ints("shape");
  int64_t known = 1;
  int minus = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1 && minus < 0)
      minus = static_cast<int>(i);
    else if (s[i] <= 0)
      c.fail("shape ", shape_str(s), " has invalid dimension ", s[i], " (only one -1 allowed)");
    else
      known *= s[i];
    if (known > (int64_t{1} << 40)) c.fail("shape ", shape_str(s), " is too large for ", c.desc("x"));
  }
  if (minus >= 0) {
    if (known == 0 || x.numel() % known != 0) c.fail("cannot infer -1 in shape ", shape_str(s), " for ", c.desc("x"));
    s[static_cast<size_t>(minus)] = x.numel() / known;
  }
  if (TensorType{x.dtype, s}.numel() != x.numel())
    c.fail("shape ", shape_str(s), " has ", TensorType{x.dtype, s}.numel(), " elements, ", c.desc("x"), " has ",
           x.numel());
  return {x.dtype, s};
}

Resolved resolve_transpose(const OpContext& c) {
  const TensorType& x = c.type("x");
  auto p = c.ints("perm");
  std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
  if (static_cast<int>(p.size()) != x.rank()) c.fail("perm ", shape_str(p), " does not match ", c.desc("x"));
  Shape out;
  PermParams pp;
  for (int64_t v : p) {
    auto a = normalize_axis(v, x.rank());
    if (!a || seen[static_cast<size_t>(*a)]) c.fail("perm ", shape_str(p), " is not a permutation for ", c.desc("x"));
    seen[static_cast<size_t>(*a)] = true;
    out.push_back(x.shape[static_cast<size_t>(*a)]);
    pp.perm.push_back(*a);
  }
  return {{x.dtype, out}, pp};
}

Resolved resolve_slice_op(const OpContext& c) {
  const TensorType& x = c.type("x");
  SliceGeometry g = resolve_slice(c);
  Shape out;
  for (size_t i = 0; i < g.length.size(); ++i)
    if (!g.squeeze[i]) out.push_back(g.length[i]);
  return {{x.dtype, out}, std::move(g)};
}

Resolved resolve_concat(const OpContext& c) {
  auto ts = c.tuple_types("values");
  const TensorType& t0 = *ts[0];
  int64_t a = c.int_scalar("axis");
  auto ax = normalize_axis(a, t0.rank());
  if (!ax) c.fail("axis = ", a, " is out of range for values[0] ", t0.str());
  bool interleave = c.boolean("interleave");
  Shape out = t0.shape;
  out[static_cast<size_t>(*ax)] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorType& t = *ts[i];
    bool ok = t.dtype == t0.dtype && t.rank() == t0.rank();
    for (int d = 0; ok && d < t.rank(); ++d)
      if (d != *ax && t.shape[static_cast<size_t>(d)] != t0.shape[static_cast<size_t>(d)]) ok = false;
    if (interleave && t.shape != t0.shape) ok = false;
    if (!ok)
      c.fail("values[", i, "] ", c.op().arg("values")->names[i], " ", t.str(), " does not match values[0] ", t0.str(),
             " outside axis ", *ax, interleave ? " (interleave needs equal shapes)" : "");
    out[static_cast<size_t>(*ax)] += t.shape[static_cast<size_t>(*ax)];
  }
  return {{t0.dtype, out}, ConcatParams{*ax, interleave}};
}

Resolved resolve_reduce(const OpContext& c) {
  const TensorType& x = c.type("x");
  std::vector<bool> red(static_cast<size_t>(x.rank()), !c.has("axes"));
  if (c.has("axes"))
    for (int64_t a : c.ints("axes")) {
      auto ax = normalize_axis(a, x.rank());
      if (!ax || red[static_cast<size_t>(*ax)])
        c.fail("axes ", shape_str(c.ints("axes")), " invalid for ", c.desc("x"));
      red[static_cast<size_t>(*ax)] = true;
    }
  ReduceParams p{{}, c.boolean("keep_dims")};
  Shape out;
  for (size_t i = 0; i < red.size(); ++i)
    if (!red[i])
      out.push_back(x.shape[i]);
    else if (p.keep_dims)
      out.push_back(1);
  for (size_t i = 0; i < red.size(); ++i)
    if (red[i]) p.axes.push_back(static_cast<int>(i));
  return {{x.dtype, out}, p};
}

DType dtype_arg(const OpContext& c, const std::string& arg, const std::vector<DType>& ok) {
  std::string s = c.str(arg);
  auto d = parse_dtype(s);
  if (!d || std::find(ok.begin(), ok.end(), *d) == ok.end())
    c.fail(arg, " = \"", s, "\" is not a supported target dtype");
  return *d;
}

Resolved resolve_cast(const OpContext& c) {
  DType to = dtype_arg(c, "dtype", {D::kFp16, D::kFp32, D::kInt32, D::kInt16, D::kInt8, D::kUint8, D::kBool});
  return {{to, c.type("x").shape}, CastParams{to}};
}

// Checks a per-tensor (scalar) or per-axis (rank-1) quantisation parameter against `data` along `axis`.
void check_qparam(const OpContext& c, const std::string& what, const TensorType& p, const Shape& data,
                  std::optional<int64_t> axis) {
  if (p.rank() == 0 || (p.rank() == 1 && p.shape[0] == 1)) return;
  if (p.rank() != 1) c.fail(what, " must be a scalar or rank-1, got ", p.str());
  if (!axis) c.fail(what, " ", p.str(), " is per-channel but no axis is given");
  auto ax = normalize_axis(*axis, static_cast<int>(data.size()));
  if (!ax) c.fail("axis ", *axis, " out of range for ", shape_str(data));
  if (p.shape[0] != data[static_cast<size_t>(*ax)])
    c.fail(what, " ", p.str(), " does not match dimension ", *ax, " of ", shape_str(data));
}

// The normalised quantisation axis of `data` (nullopt when the op has no axis argument).
std::optional<int> quant_axis(const OpContext& c, const Shape& data) {
  if (!c.has("axis")) return std::nullopt;
  int64_t a = c.int_scalar("axis");
  auto ax = normalize_axis(a, static_cast<int>(data.size()));
  if (!ax) c.fail("axis ", a, " out of range for ", shape_str(data));
  return *ax;
}

Resolved resolve_quantize(const OpContext& c) {
  const TensorType& in = c.type("input");
  DType out = dtype_arg(c, "output_dtype", kQuant);
  std::optional<int64_t> axis;
  std::optional<int> ax = quant_axis(c, in.shape);
  if (ax) axis = *ax;
  if (c.type("scale").dtype != in.dtype)
    c.fail("scale ", c.type("scale").str(), " must have the dtype of input ", in.str());
  check_qparam(c, "scale", c.type("scale"), in.shape, axis);
  if (c.has("zero_point")) {
    if (c.type("zero_point").dtype != out)
      c.fail("zero_point ", c.type("zero_point").str(), " must have output_dtype ", dtype_name(out));
    check_qparam(c, "zero_point", c.type("zero_point"), in.shape, axis);
  }
  return {{out, in.shape}, QuantizeParams{ax}};
}

Resolved resolve_dequantize(const OpContext& c) {
  const TensorType& in = c.type("input");
  std::optional<int64_t> axis;
  std::optional<int> ax = quant_axis(c, in.shape);
  if (ax) axis = *ax;
  check_qparam(c, "scale", c.type("scale"), in.shape, axis);
  if (c.has("zero_point")) {
    if (c.type("zero_point").dtype != in.dtype)
      c.fail("zero_point ", c.type("zero_point").str(), " must have the dtype of input ", in.str());
    check_qparam(c, "zero_point", c.type("zero_point"), in.shape, axis);
  }
  return {{c.type("scale").dtype, in.shape}, QuantizeParams{ax}};
}

Resolved resolve_constexpr_affine_dequantize(const OpContext& c) {
  const ConstValue &q = c.attr("quantized_data"), &s = c.attr("scale"), &z = c.attr("zero_point"), &a = c.attr("axis");
  if (a.type.rank() != 0 || a.i.size() != 1) c.fail("axis must be an int32 scalar, got ", a.type.str());
  if (q.type.rank() == 0) c.fail("quantized_data must be a tensor, got ", q.type.str());
  if (!q.blob && q.i.size() != static_cast<size_t>(q.type.numel()))
    c.fail("quantized_data literal has ", q.i.size(), " elements for ", q.type.str());
  if (z.type.dtype != q.type.dtype)
    c.fail("zero_point ", z.type.str(), " must have the dtype of quantized_data ", q.type.str());
  check_qparam(c, "scale", s.type, q.type.shape, a.i[0]);
  check_qparam(c, "zero_point", z.type, q.type.shape, a.i[0]);
  auto ax = normalize_axis(a.i[0], q.type.rank());
  if (!ax) c.fail("axis ", a.i[0], " out of range for quantized_data ", q.type.str());
  return {{s.type.dtype, q.type.shape}, AffineDequantParams{*ax}};
}

// A compressed-weight literal: a tensor given as BLOBFILE or as a literal with every element.
void check_weight_literal(const OpContext& c, const char* what, const ConstValue& v) {
  if (v.type.rank() == 0) c.fail(what, " must be a tensor, got ", v.type.str());
  const size_t n = v.blob ? 0 : (is_float(v.type.dtype) ? v.f.size() : v.i.size());
  if (!v.blob && n != static_cast<size_t>(v.type.numel()))
    c.fail(what, " literal has ", n, " elements for ", v.type.str());
}

// Block size per axis of `out` for the per-block parameter shape `p` (same rank): each output dim
// must be a multiple of the parameter's.
Shape block_sizes(const OpContext& c, const char* what, const Shape& out, const Shape& p) {
  Shape block(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (p[i] <= 0 || out[i] % p[i] != 0)
      c.fail(what, " ", shape_str(p), " does not divide the output ", shape_str(out), " on axis ", i);
    block[i] = out[i] / p[i];
  }
  return block;
}

// ios18 constexpr_blockwise_shift_scale: out[i] = scale[b(i)] * (data[i] - offset[b(i)]), where b(i) is i divided
// elementwise by the block size (data.shape / scale.shape per axis); offset absent = 0.
Resolved resolve_constexpr_blockwise_shift_scale(const OpContext& c) {
  const ConstValue &d = c.attr("data"), &s = c.attr("scale");
  check_weight_literal(c, "data", d);
  check_weight_literal(c, "scale", s);
  if (s.type.rank() != d.type.rank()) c.fail("scale ", s.type.str(), " must have the rank of data ", d.type.str());
  if (c.op().attr("offset")) {
    const ConstValue& o = c.attr("offset");
    check_weight_literal(c, "offset", o);
    if (o.type.shape != s.type.shape) c.fail("offset ", o.type.str(), " must have the shape of scale ", s.type.str());
    if (o.type.dtype != d.type.dtype && o.type.dtype != s.type.dtype)
      c.fail("offset ", o.type.str(), " must have the dtype of data (", dtype_name(d.type.dtype), ") or of scale (",
             dtype_name(s.type.dtype), ")");
  }
  return {{s.type.dtype, d.type.shape}, BlockwiseParams{block_sizes(c, "scale", d.type.shape, s.type.shape)}};
}

// ios18 constexpr_lut_to_dense with scalar palettes: indices [d0..dn-1] (uint4 / uint6 / uint8), lut [p0..pn-1, K, 1];
// out[i] = lut[b(i), indices[i], 0], b(i) as for blockwise_shift_scale. K = 2^bits of the index type (16, 64, 256):
// coremltools defs/iOS18/compression.py (IndicesT uint1, 2, 3, 4, 6, 8; NUM_PALETTES = 2^nbits).
Resolved resolve_constexpr_lut_to_dense(const OpContext& c) {
  const ConstValue &ix = c.attr("indices"), &lut = c.attr("lut");
  check_weight_literal(c, "indices", ix);
  check_weight_literal(c, "lut", lut);
  const int r = ix.type.rank();
  if (lut.type.rank() != r + 2)
    c.fail("lut ", lut.type.str(), " must have rank ", r + 2, " ([blocks per axis of indices..., K, 1]) for indices ",
           ix.type.str());
  const int64_t k = lut.type.shape[static_cast<size_t>(r)], vec = lut.type.shape[static_cast<size_t>(r) + 1];
  if (vec != 1) c.fail("lut vector size ", vec, " is not supported (scalar palettes only: last dim 1)");
  const int64_t need = ix.type.dtype == DType::kUint4 ? 16 : ix.type.dtype == DType::kUint6 ? 64 : 256;
  if (k != need) c.fail("lut has ", k, " entries per palette; ", dtype_name(ix.type.dtype), " indices need ", need);
  const Shape pal(lut.type.shape.begin(), lut.type.shape.begin() + r);
  return {{lut.type.dtype, ix.type.shape}, BlockwiseParams{block_sizes(c, "lut", ix.type.shape, pal)}};
}

Resolved resolve_sdpa(const OpContext& c) {
  const TensorType &q = c.type("query"), &k = c.type("key"), &v = c.type("value");
  if (q.rank() < 3 || k.rank() != q.rank() || v.rank() != q.rank())
    c.fail("query, key, value must share a rank >= 3, got ", c.desc("query"), ", ", c.desc("key"), ", ",
           c.desc("value"));
  if (k.dtype != q.dtype || v.dtype != q.dtype) c.fail("query, key, value must share a dtype");
  size_t r = q.shape.size();
  int64_t L = q.shape[r - 2], E = q.shape[r - 1], S = k.shape[r - 2];
  if (k.shape[r - 1] != E || v.shape[r - 2] != S)
    c.fail("expects query [..., L, E], key [..., S, E], value [..., S, Ev], got ", c.desc("query"), ", ", c.desc("key"),
           ", ", c.desc("value"));
  Shape bq(q.shape.begin(), q.shape.end() - 2), bk(k.shape.begin(), k.shape.end() - 2),
      bv(v.shape.begin(), v.shape.end() - 2);
  if (bq != bk || bq != bv)
    c.fail("batch dimensions differ: ", c.desc("query"), ", ", c.desc("key"), ", ", c.desc("value"));
  if (c.has("attn_mask")) {
    const TensorType& m = c.type("attn_mask");
    Shape want = bq;
    want.push_back(L);
    want.push_back(S);
    auto b = broadcast_shapes(m.shape, want);
    if ((m.dtype != D::kBool && m.dtype != q.dtype) || !b || *b != want)
      c.fail(c.desc("attn_mask"), " ", dtype_name(m.dtype), " does not broadcast to ", shape_str(want));
  }
  Shape out = bq;
  out.push_back(L);
  out.push_back(v.shape[r - 1]);
  return {{q.dtype, out}, SdpaParams{bq, L, S, E, v.shape[r - 1], c.has("attn_mask")}};
}

Resolved resolve_layer_norm(const OpContext& c) {
  const TensorType& x = c.type("x");
  LayerNormParams p;
  Shape norm;
  std::vector<int64_t> axes;
  if (c.has("axes"))
    axes = c.ints("axes");
  else
    for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  for (int64_t a : axes) {
    auto ax = normalize_axis(a, x.rank());
    if (!ax || std::find(p.axes.begin(), p.axes.end(), *ax) != p.axes.end())
      c.fail("axes ", shape_str(axes), " invalid for ", c.desc("x"));
    norm.push_back(x.shape[static_cast<size_t>(*ax)]);
    p.axes.push_back(*ax);
  }
  for (const char* p : {"gamma", "beta"})
    if (c.has(p) && (c.type(p).shape != norm || c.type(p).dtype != x.dtype))
      c.fail(c.desc(p), " must be ", shape_str(norm), " ", dtype_name(x.dtype), " (x dims at axes)");
  if (c.has("epsilon") && c.type("epsilon").dtype != x.dtype) c.fail("epsilon must have dtype ", dtype_name(x.dtype));
  p.epsilon = c.literal("epsilon")->f.at(0);
  return {x, p};
}

OpSpec unary(std::string name, std::vector<DType> d, std::string summary) {
  return {std::move(name), {val("x", std::move(d))}, {}, plain<infer_unary>, std::move(summary)};
}
OpSpec binary(std::string name, std::vector<DType> d, std::string summary) {
  return {std::move(name), {val("x", d), val("y", d)}, {}, resolve_binary, std::move(summary)};
}

std::vector<OpSpec> declare_ops() {
  std::vector<OpSpec> ops;
  using CV = ConstValue;
  ops.push_back({"const", {}, {{"val", true, {}}}, plain<infer_const>, "literal or BLOBFILE tensor in [val = ...]"});
  ops.push_back(
      {"conv",
       {dflt(vec("dilations"), CV::ints({1, 1})), dflt(scal("groups", kInt), CV::int32(1)),
        dflt(vec("pad"), CV::ints({0, 0, 0, 0})), dflt(scal("pad_type", kStr), CV::string("valid")),
        dflt(vec("strides"), CV::ints({1, 1})), val("weight", kFloat), val("x", kFloat), val("bias", kFloat, false)},
       {},
       resolve_conv_op,
       "2-D conv: x [N,C,H,W], weight [Cout,C/groups,kH,kW] -> [N,Cout,H',W']"});
  ops.push_back({"matmul",
                 {dflt(scal("transpose_x", kBoolT), CV::boolean(false)),
                  dflt(scal("transpose_y", kBoolT), CV::boolean(false)), val("x", kNumeric), val("y", kNumeric)},
                 {},
                 resolve_matmul,
                 "batched matmul over the last two dims, leading dims broadcast"});
  ops.push_back({"softmax", {scal("axis", kInt), val("x", kFloat)}, {}, resolve_softmax, "softmax along axis"});
  ops.push_back(
      {"reshape", {vec("shape"), val("x")}, {}, plain<infer_reshape>, "reshape to a static shape (one -1 allowed)"});
  ops.push_back({"transpose", {vec("perm"), val("x")}, {}, resolve_transpose, "permute dims"});
  ops.push_back({"slice_by_size",
                 {val("x"), vec("begin"), vec("size")},
                 {},
                 resolve_slice_op,
                 "x[begin : begin+size], size -1 = to end"});
  ops.push_back({"slice_by_index",
                 {val("x"), vec("begin"), vec("end"), vec("stride", false), vec("begin_mask", false, kBoolT),
                  vec("end_mask", false, kBoolT), vec("squeeze_mask", false, kBoolT)},
                 {},
                 resolve_slice_op,
                 "numpy-style x[begin:end:stride] with masks (stride default 1, masks default false)"});
  ops.push_back({"concat",
                 {scal("axis", kInt), scal("interleave", kBoolT), {"values", true, ArgKind::kTuple, {}}},
                 {},
                 resolve_concat,
                 "concatenate values along axis"});
  for (const char* r : {"reduce_sum", "reduce_max"})
    ops.push_back({r,
                   {val("x", kNumeric), vec("axes", false), dflt(scal("keep_dims", kBoolT), CV::boolean(false))},
                   {},
                   resolve_reduce,
                   "reduction over axes (default: all)"});
  ops.push_back(binary("pow", kFloat, "x ** y (broadcast)"));
  ops.push_back(binary("mul", kNumeric, "x * y (broadcast)"));
  ops.push_back(binary("add", kNumeric, "x + y (broadcast)"));
  ops.push_back(binary("sub", kNumeric, "x - y (broadcast)"));
  ops.push_back(binary("real_div", kNumeric, "x / y (broadcast)"));
  ops.push_back(unary("sigmoid", kFloat, "1 / (1 + exp(-x))"));
  ops.push_back(unary("tanh", kFloat, "tanh(x)"));
  ops.push_back(unary("exp", kFloat, "exp(x)"));
  ops.push_back(unary("relu", kFloat, "max(x, 0)"));
  // coremltools defs/iOS15/activation.py softplus (Qwen3.5's Gated DeltaNet decay, framework/kernels/deltanet.h)
  ops.push_back(unary("softplus", kFloat, "log(1 + exp(x))"));
  ops.push_back(unary("identity", {}, "x"));
  ops.push_back({"cast", {scal("dtype", kStr), val("x")}, {}, resolve_cast, "convert to dtype (string const)"});
  ops.push_back({"quantize",
                 {val("input", kFloat), scal("output_dtype", kStr), val("scale", kFloat),
                  val("zero_point", kQuant, false), scal("axis", kInt, false)},
                 {},
                 resolve_quantize,
                 "round(input / scale) + zero_point, saturated to int8/uint8"});
  ops.push_back(
      {"dequantize",
       {val("input", kQuant), val("scale", kFloat), val("zero_point", kQuant, false), scal("axis", kInt, false)},
       {},
       resolve_dequantize,
       "(input - zero_point) * scale"});
  ops.push_back({"constexpr_affine_dequantize",
                 {},
                 {{"axis", true, kInt},
                  {"quantized_data", true, kPacked},
                  {"scale", true, kFloat},
                  {"zero_point", true, kPacked}},
                 resolve_constexpr_affine_dequantize,
                 "(quantized_data - zero_point) * scale, all bracket attributes"});
  ops.push_back({"constexpr_blockwise_shift_scale",
                 {},
                 {{"data", true, kPacked}, {"offset", false, {}}, {"scale", true, kFloat}},
                 resolve_constexpr_blockwise_shift_scale,
                 "scale[blk] * (data - offset[blk]), blk = index / (data.shape / scale.shape); bracket attributes"});
  ops.push_back({"constexpr_lut_to_dense",
                 {},
                 {{"indices", true, {D::kUint4, D::kUint6, D::kUint8}}, {"lut", true, kFloat}},
                 resolve_constexpr_lut_to_dense,
                 "lut[blk, indices, 0], blk = index / (indices.shape / lut.shape[:-2]); bracket attributes"});
  ops.push_back({"scaled_dot_product_attention",
                 {val("query", kFloat), val("key", kFloat), val("value", kFloat), val("attn_mask", {}, false)},
                 {},
                 resolve_sdpa,
                 "softmax(q k^T / sqrt(E) + mask) v (ANE ignores the mask)"});
  ops.push_back({"layer_norm",
                 {val("x", kFloat), vec("axes", false), val("gamma", kFloat, false), val("beta", kFloat, false),
                  dflt(scal("epsilon", kFloat), CV::fp32(1e-5))},
                 {},
                 resolve_layer_norm,
                 "(x - mean) / sqrt(var + epsilon) * gamma + beta over axes"});
  return ops;
}

}  // namespace

const std::vector<OpSpec>& all_ops() {
  static const std::vector<OpSpec> ops = declare_ops();
  return ops;
}

// ---- geometry helpers -------------------------------------------------------------------------
namespace {

ConvGeometry resolve_conv(const OpContext& c) {
  const TensorType &x = c.type("x"), &w = c.type("weight");
  ConvGeometry g;
  auto pair = [&](const char* arg, int64_t* dst) {
    auto v = c.ints(arg);
    if (v.size() != 2 || v[0] < 1 || v[1] < 1) c.fail(arg, " ", shape_str(v), " must be two positive ints");
    dst[0] = v[0], dst[1] = v[1];
  };
  pair("strides", g.stride);
  pair("dilations", g.dilation);
  g.groups = c.int_scalar("groups");
  if (g.groups < 1) c.fail("groups = ", g.groups, " must be >= 1");
  std::string pt = c.str("pad_type");
  {
    auto p = c.ints("pad");
    if (p.size() != 4) c.fail("pad ", shape_str(p), " must have 4 entries (top, bottom, left, right)");
    if (pt == "custom")
      for (int i = 0; i < 4; ++i) {
        if (p[static_cast<size_t>(i)] < 0) c.fail("pad ", shape_str(p), " must be non-negative");
        g.pad[i] = p[static_cast<size_t>(i)];
      }
  }
  for (int d = 0; d < 2; ++d) {
    int64_t in = x.shape[2 + static_cast<size_t>(d)], k = w.shape[2 + static_cast<size_t>(d)];
    int64_t ext = (k - 1) * g.dilation[d] + 1;
    if (pt == "same" || pt == "same_lower") {
      int64_t out = (in + g.stride[d] - 1) / g.stride[d];
      int64_t total = std::max<int64_t>((out - 1) * g.stride[d] + ext - in, 0);
      int64_t small = total / 2;
      g.pad[2 * d] = pt == "same" ? small : total - small;
      g.pad[2 * d + 1] = total - g.pad[2 * d];
    } else if (pt != "valid" && pt != "custom") {
      c.fail("pad_type = \"", pt, "\" (expected valid, same, same_lower or custom)");
    }
    int64_t span = in + g.pad[2 * d] + g.pad[2 * d + 1] - ext;
    (d == 0 ? g.out_h : g.out_w) = span < 0 ? 0 : span / g.stride[d] + 1;
  }
  return g;
}

SliceGeometry resolve_slice(const OpContext& c) {
  const TensorType& x = c.type("x");
  size_t r = static_cast<size_t>(x.rank());
  auto begin = c.ints("begin");
  bool by_size = c.op().op == "slice_by_size";
  auto second = c.ints(by_size ? "size" : "end");
  if (begin.size() != r || second.size() != r)
    c.fail("begin ", shape_str(begin), " and ", by_size ? "size " : "end ", shape_str(second),
           " must have one entry per dim of ", c.desc("x"));
  SliceGeometry g;
  g.begin.resize(r), g.stride.assign(r, 1), g.length.resize(r), g.squeeze.assign(r, false);
  if (by_size) {
    for (size_t i = 0; i < r; ++i) {
      int64_t n = x.shape[i], b = begin[i] < 0 ? begin[i] + n : begin[i];
      int64_t len = second[i] == -1 ? n - b : second[i];
      if (b < 0 || b >= n || len < 1 || b + len > n)
        c.fail("begin ", shape_str(begin), " size ", shape_str(second), " out of bounds for ", c.desc("x"), " at dim ",
               i);
      g.begin[i] = b, g.length[i] = len;
    }
    return g;
  }
  auto mask = [&](const char* arg) {
    std::vector<int64_t> m = c.has(arg) ? c.ints(arg) : std::vector<int64_t>(r, 0);
    if (m.size() != r) c.fail(arg, " ", shape_str(m), " must have one entry per dim of ", c.desc("x"));
    return m;
  };
  auto stride = c.has("stride") ? c.ints("stride") : std::vector<int64_t>(r, 1);
  if (stride.size() != r) c.fail("stride ", shape_str(stride), " must have one entry per dim of ", c.desc("x"));
  auto bm = mask("begin_mask"), em = mask("end_mask"), sm = mask("squeeze_mask");
  for (size_t i = 0; i < r; ++i) {
    int64_t n = x.shape[i], s = stride[i];
    if (s == 0) c.fail("stride ", shape_str(stride), " has a zero entry");
    auto norm = [&](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
    int64_t b = bm[i] ? (s > 0 ? 0 : n - 1) : (s > 0 ? norm(begin[i], 0, n) : norm(begin[i], -1, n - 1));
    int64_t e = em[i] ? (s > 0 ? n : -1) : (s > 0 ? norm(second[i], 0, n) : norm(second[i], -1, n - 1));
    int64_t len = s > 0 ? (e - b + s - 1) / s : (b - e - s - 1) / -s;
    if (sm[i]) {
      int64_t bi = begin[i] < 0 ? begin[i] + n : begin[i];
      if (bi < 0 || bi >= n) c.fail("squeezed dim ", i, " index ", begin[i], " out of range for ", c.desc("x"));
      b = bi, len = 1, g.squeeze[i] = true;
    }
    if (len < 1)
      c.fail("begin ", shape_str(begin), " end ", shape_str(second), " stride ", shape_str(stride),
             " selects nothing in dim ", i, " of ", c.desc("x"));
    g.begin[i] = b, g.stride[i] = s, g.length[i] = len;
  }
  return g;
}

}  // namespace
}  // namespace anelab::mil
