// One op-test harness over (op case x available backend): each case builds a small MIL program with
// the typed builder, random fp16 inputs and an independent fp64 reference (tests/emulator/reference.h),
// and checks per-element bounds + NMSE (see op_harness.h for the tolerance derivation), NaN/Inf and
// guard bytes after every output surface.
#include <map>
#include <set>

#include "framework/backends/registry.h"
#include "framework/emulator/emulator.h"
#include "framework/runtime/backend.h"
#include "tests/emulator/op_harness.h"
#include "tests/emulator/reference.h"

namespace anelab::test {
namespace {

using mil::DType;
using mil::Shape;
using mil::Value;

struct CaseResult {
  Reference ref;
  Tolerance tol;
};
using CaseFn = std::function<CaseResult(ProgramUnderTest&)>;

// ---- elementwise ------------------------------------------------------------------------------------
CaseResult binary_case(ProgramUnderTest& p, const char* op, Shape sy, double lo, double hi,
                       const std::function<double(double, double)>& f) {
  const Shape sx{1, 16, 1, 64};
  Vec xv = rand_vec(1024, lo, hi, 1), yv = rand_vec(static_cast<size_t>(ref::numel(sy)), lo, hi, 2);
  Value x = p.input("x", sx, xv);
  Value y = p.weight(sy, yv);
  auto& b = *p.b;
  std::string o = op;
  Value r = o == "add"        ? b.add(x, y)
            : o == "sub"      ? b.sub(x, y)
            : o == "mul"      ? b.mul(x, y)
            : o == "real_div" ? b.real_div(x, y)
                              : b.pow(x, y);
  b.output(r);
  Vec want = ref::binary(xv, sx, yv, sy, sx, f);
  return {{{want}, {ref::abs_vec(want)}, 1}, {1.01, 0, 1e-6}};
}

CaseResult unary_case(ProgramUnderTest& p, const char* op, double lo, double hi,
                      const std::function<double(double)>& f) {
  Vec xv = rand_vec(2048, lo, hi, 3);
  Value x = p.input("x", {1, 32, 1, 64}, xv);
  auto& b = *p.b;
  std::string o = op;
  b.output(o == "sigmoid"    ? b.sigmoid(x)
           : o == "tanh"     ? b.tanh(x)
           : o == "exp"      ? b.exp(x)
           : o == "relu"     ? b.relu(x)
           : o == "softplus" ? b.softplus(x)
                             : b.identity(x));
  Vec want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = f(xv[i]);
  return {{{want}, {ref::abs_vec(want)}, 1}, {1.02, 0, 1e-6}};
}

// ---- conv -------------------------------------------------------------------------------------------
CaseResult conv_case(ProgramUnderTest& p, ref::ConvGeom c, const std::string& pad_type, std::vector<int64_t> pad,
                     bool bias) {
  Vec xv = rand_vec(static_cast<size_t>(c.N * c.Cin * c.H * c.W), -1, 1, 4);
  Vec wv = rand_vec(static_cast<size_t>(c.Cout * (c.Cin / c.G) * c.kh * c.kw), -0.5, 0.5, 5);
  Vec bv = rand_vec(static_cast<size_t>(c.Cout), -1, 1, 6);
  Value x = p.input("x", {c.N, c.Cin, c.H, c.W}, xv);
  Value w = p.weight({c.Cout, c.Cin / c.G, c.kh, c.kw}, wv);
  mil::ConvOptions o;
  o.strides = {c.sh, c.sw};
  o.dilations = {c.dh, c.dw};
  o.groups = c.G;
  o.pad_type = pad_type;
  o.pad = pad;
  if (bias) o.bias = p.weight({c.Cout}, bv);
  Value y = p.b->conv(x, w, o);
  p.b->output(y);
  c.Ho = y.dim(2), c.Wo = y.dim(3);
  if (pad_type == "custom") c.pt = pad[0], c.pl = pad[2];
  if (pad_type == "same") {  // MIL "same": extra padding at the end
    c.pt = std::max<int64_t>(0, (c.Ho - 1) * c.sh + (c.kh - 1) * c.dh + 1 - c.H) / 2;
    c.pl = std::max<int64_t>(0, (c.Wo - 1) * c.sw + (c.kw - 1) * c.dw + 1 - c.W) / 2;
  }
  Vec want, mag;
  ref::conv2d(xv, wv, bias ? &bv : nullptr, c, &want, &mag);
  return {{{want}, {mag}, (c.Cin / c.G) * c.kh * c.kw + 1}, {1.0, 1.0, 1e-6}};
}

ref::ConvGeom geom(int64_t cin, int64_t h, int64_t w, int64_t cout, int64_t k, int64_t g, int64_t s, int64_t d) {
  return {1, cin, h, w, cout, k, k, g, s, s, d, d, 0, 0, 0, 0};
}

// ---- matmul / attention -----------------------------------------------------------------------------
CaseResult matmul_case(ProgramUnderTest& p, Shape xs, bool tx, Shape ys, bool ty, bool y_const) {
  Vec xv = rand_vec(static_cast<size_t>(ref::numel(xs)), -1, 1, 7),
      yv = rand_vec(static_cast<size_t>(ref::numel(ys)), -1, 1, 8);
  Value x = p.input("x", xs, xv);
  Value y = y_const ? p.weight(ys, yv) : p.input("y", ys, yv);
  p.b->output(p.b->matmul(x, y, tx, ty));
  Vec want, mag;
  Shape os;
  ref::matmul(xv, xs, tx, yv, ys, ty, &want, &mag, &os);
  return {{{want}, {mag}, tx ? xs[xs.size() - 2] : xs.back()}, {1.0, 1.0, 1e-6}};
}

// The dynamic-weights pattern (digest §5.4): one input [1, IC, 1, S + OC] holding activations | weights;
// slice_by_size + reshape + transpose views feed the matmul (the emulator reads them in place).
CaseResult matmul_on_views_case(ProgramUnderTest& p) {
  const int64_t IC = 64, S = 32, OC = 40;
  Vec xv = rand_vec(static_cast<size_t>(IC * (S + OC)), -1, 1, 12);
  auto& b = *p.b;
  Value x = p.input("x", {1, IC, 1, S + OC}, xv);
  Value act = b.transpose(b.reshape(b.slice_by_size(x, {0, 0, 0, 0}, {1, IC, 1, S}), {1, 1, IC, S}), {0, 1, 3, 2});
  Value w = b.reshape(b.slice_by_size(x, {0, 0, 0, S}, {1, IC, 1, OC}), {1, 1, IC, OC});
  b.output(b.matmul(act, w));  // [1, 1, S, OC]
  Vec a(static_cast<size_t>(IC * S)), wv(static_cast<size_t>(IC * OC));
  for (int64_t ic = 0; ic < IC; ++ic) {
    for (int64_t t = 0; t < S; ++t) a[ic * S + t] = xv[ic * (S + OC) + t];
    for (int64_t o = 0; o < OC; ++o) wv[ic * OC + o] = xv[ic * (S + OC) + S + o];
  }
  Vec want, mag;
  Shape os;
  ref::matmul(a, {1, 1, IC, S}, true, wv, {1, 1, IC, OC}, false, &want, &mag, &os);
  return {{{want}, {mag}, IC}, {1.0, 1.0, 1e-6}};
}

// sdpa: three fp16 roundings (scores, probabilities, output). A relative error u on a score s moves
// the probabilities by <= u|s|; the probability rounding adds u; the output rounding u. With |s| <= 4
// here every output element is within ~ (1 + 1 + 4) u sum_j P_j |v_j| + u|y|.
CaseResult sdpa_case(ProgramUnderTest& p) {
  const Shape s{1, 4, 64, 32};
  Vec q = rand_vec(8192, -1, 1, 9), k = rand_vec(8192, -1, 1, 10), v = rand_vec(8192, -1, 1, 11);
  Value Q = p.input("q", s, q), K = p.input("k", s, k), V = p.input("v", s, v);
  p.b->output(p.b->scaled_dot_product_attention(Q, K, V));
  Vec scores, m, P, y, mag;
  Shape os;
  ref::matmul(q, s, false, k, s, true, &scores, &m, &os);
  for (auto& x : scores) x /= std::sqrt(32.0);
  P = ref::softmax(scores, os, 3);
  ref::matmul(P, os, false, v, s, false, &y, &mag, &os);
  for (auto& x : mag) x *= 6.0 * kU / (64 * kU32);  // express 6u sum P|v| in the acc term (K = 64)
  return {{{y}, {mag}, 64}, {1.0, 1.0, 1e-5}};
}

// ---- layout -----------------------------------------------------------------------------------------
Vec permute(const Vec& x, const Shape& s, const std::vector<int64_t>& perm, Shape* os) {
  os->clear();
  for (auto p : perm) os->push_back(s[static_cast<size_t>(p)]);
  Vec y(x.size());
  for (int64_t i = 0; i < ref::numel(*os); ++i) {
    auto oi = ref::unravel(i, *os);
    std::vector<int64_t> ii(s.size());
    for (size_t d = 0; d < perm.size(); ++d) ii[static_cast<size_t>(perm[d])] = oi[d];
    int64_t off = 0;
    for (size_t d = 0; d < s.size(); ++d) off = off * s[d] + ii[d];
    y[static_cast<size_t>(i)] = x[static_cast<size_t>(off)];
  }
  return y;
}

CaseResult exact(Vec want) { return {{{want}, {ref::abs_vec(want)}, 1}, {0.0, 0.0, 0.0}}; }

CaseResult transpose_case(ProgramUnderTest& p) {
  const Shape s{1, 32, 2, 48};
  Vec x = rand_vec(3072, -4, 4, 12);
  Value X = p.input("x", s, x);
  p.b->output(p.b->transpose(X, {0, 2, 3, 1}));
  Shape os;
  return exact(permute(x, s, {0, 2, 3, 1}, &os));
}

CaseResult reshape_slice_case(ProgramUnderTest& p) {
  Vec x = rand_vec(64 * 96, -4, 4, 13);
  Value X = p.input("x", {1, 64, 1, 96}, x);
  auto& b = *p.b;
  Value r = b.reshape(X, {1, 64, 2, 48});
  Value s = b.slice_by_size(r, {0, 8, 1, 0}, {1, 16, 1, 48});  // [1,16,1,48]
  b.output(s);
  Vec want;
  for (int64_t c = 8; c < 24; ++c)
    for (int64_t j = 0; j < 48; ++j) want.push_back(x[static_cast<size_t>(c * 96 + 48 + j)]);
  return exact(want);
}

CaseResult slice_by_index_case(ProgramUnderTest& p) {
  Vec x = rand_vec(32 * 128, -4, 4, 14);
  Value X = p.input("x", {1, 32, 1, 128}, x);
  mil::SliceByIndexOptions o;
  o.stride = {1, 3, 1, 2};
  o.begin_mask = {true, false, false, false};
  o.end_mask = {true, false, false, true};
  p.b->output(p.b->slice_by_index(X, {0, 1, 0, 4}, {1, 30, 1, 0}, o));  // channels 1,4,..,28; cols 4,6,..,126
  Vec want;
  for (int64_t c = 1; c < 30; c += 3)
    for (int64_t j = 4; j < 128; j += 2) want.push_back(x[static_cast<size_t>(c * 128 + j)]);
  return exact(want);
}

CaseResult concat_case(ProgramUnderTest& p, int64_t axis) {
  Vec a = rand_vec(16 * 32, -4, 4, 15), c = rand_vec(8 * 32, -4, 4, 16);
  Value A = p.input("a", {1, 16, 1, 32}, a);
  Shape cs = axis == 1 ? Shape{1, 8, 1, 32} : Shape{1, 16, 1, 16};
  if (axis == 3) c.resize(256);
  Value C = p.weight(cs, c);
  p.b->output(p.b->concat({A, C, A}, axis));
  Vec want;
  if (axis == 1) {
    want = a;
    want.insert(want.end(), c.begin(), c.end());
    want.insert(want.end(), a.begin(), a.end());
  } else {
    for (int64_t r = 0; r < 16; ++r) {
      for (int k = 0; k < 3; ++k) {
        const Vec& src = k == 1 ? c : a;
        const int64_t w = k == 1 ? 16 : 32;
        want.insert(want.end(), src.begin() + r * w, src.begin() + (r + 1) * w);
      }
    }
  }
  return exact(want);
}

// ---- softmax / reductions ---------------------------------------------------------------------------
CaseResult softmax_case(ProgramUnderTest& p, int axis) {
  const Shape s{1, 32, 1, 64};
  Vec x = rand_vec(2048, -6, 6, 17);
  p.b->output(p.b->softmax(p.input("x", s, x), axis));
  Vec want = ref::softmax(x, s, axis);
  return {{{want}, {want}, s[static_cast<size_t>(axis)]}, {1.0, 4.0, 1e-6}};
}

// RMSNorm-style: y = x * pow(reduce_sum(x*x, axis 1) * (1/C) + eps, -0.5): roundings of x*x (u each,
// summed: u * sum x^2), of the sum, of the mean, of pow and of the product: ~5u relative overall.
CaseResult rmsnorm_case(ProgramUnderTest& p) {
  const int64_t C = 64, S = 32;
  Vec x = rand_vec(static_cast<size_t>(C * S), -2, 2, 18);
  auto& b = *p.b;
  Value X = p.input("x", {1, C, 1, S}, x);
  Value ss = b.reduce_sum(b.mul(X, X), {1}, true);
  Value r = b.pow(b.add(b.mul(ss, 1.0 / 64.0), 1e-5), -0.5);
  b.output(b.mul(X, r));
  Vec want(x.size());
  for (int64_t s = 0; s < S; ++s) {
    double acc = 0;
    for (int64_t c = 0; c < C; ++c) acc += x[static_cast<size_t>(c * S + s)] * x[static_cast<size_t>(c * S + s)];
    const double inv = 1.0 / std::sqrt(acc / C + 1e-5);
    for (int64_t c = 0; c < C; ++c) want[static_cast<size_t>(c * S + s)] = x[static_cast<size_t>(c * S + s)] * inv;
  }
  return {{{want}, {ref::abs_vec(want)}, 1}, {6.0, 0.0, 2e-6}};
}

// x - reduce_max(x, axis -1): the max is exact; one rounding of the difference.
CaseResult reduce_max_case(ProgramUnderTest& p) {
  const int64_t C = 16, S = 64;
  Vec x = rand_vec(static_cast<size_t>(C * S), -8, 8, 19);
  auto& b = *p.b;
  Value X = p.input("x", {1, C, 1, S}, x);
  b.output(b.sub(X, b.reduce_max(X, {-1}, true)));
  Vec want(x.size());
  for (int64_t c = 0; c < C; ++c) {
    double mx = -INFINITY;
    for (int64_t s = 0; s < S; ++s) mx = std::max(mx, x[static_cast<size_t>(c * S + s)]);
    for (int64_t s = 0; s < S; ++s) want[static_cast<size_t>(c * S + s)] = x[static_cast<size_t>(c * S + s)] - mx;
  }
  return {{{want}, {ref::abs_vec(want)}, 1}, {1.0, 0.0, 1e-6}};
}

// ---- cast / quantization ----------------------------------------------------------------------------
CaseResult cast_case(ProgramUnderTest& p) {
  std::mt19937 g(20);
  std::uniform_real_distribution<double> d(-100, 100);
  Vec x(2048);
  for (auto& v : x) v = static_cast<float>(d(g));  // fp32 values, not fp16-representable
  Value X = p.input("x", {1, 64, 1, 32}, x, DType::kFp32);
  p.b->output(p.b->cast(X, DType::kFp16));
  Vec want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = r16(x[i]);
  return exact(want);  // cast must round to nearest even exactly
}

// quantize -> dequantize with a power-of-two scale (exact division): q = clamp(rne(x/s) + zp), y = (q - zp) s.
CaseResult quant_case(ProgramUnderTest& p, bool per_channel) {
  const int64_t C = 8, S = 64;
  Vec x = rand_vec(static_cast<size_t>(C * S), -20, 20, 21);
  auto& b = *p.b;
  Value X = p.input("x", {1, C, 1, S}, x);
  Vec scales(C, 0.125);
  if (per_channel)
    for (int64_t c = 0; c < C; ++c) scales[static_cast<size_t>(c)] = std::ldexp(1.0, static_cast<int>(c % 4) - 3);
  mil::QuantParams qp;
  Value sc = per_channel ? b.const_tensor(mil::tensor_type(DType::kFp16, {C}), scales) : b.scalar(DType::kFp16, 0.125);
  qp.zero_point = per_channel ? b.const_tensor(mil::tensor_type(DType::kInt8, {C}), Vec(C, 3.0))
                              : b.constant(mil::ConstValue::int8(3));
  if (per_channel) qp.axis = 1;
  Value q = b.quantize(X, DType::kInt8, sc, qp);
  b.output(b.dequantize(q, sc, qp));
  Vec want(x.size());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t s = 0; s < S; ++s) {
      const double scl = scales[static_cast<size_t>(c)], v = x[static_cast<size_t>(c * S + s)] / scl;
      const double qv = std::clamp(std::nearbyint(v) + 3.0, -128.0, 127.0);
      want[static_cast<size_t>(c * S + s)] = r16((qv - 3.0) * scl);
    }
  return exact(want);
}

CaseResult affine_dequant_case(ProgramUnderTest& p) {
  const int64_t C = 16, S = 32;
  Vec x = rand_vec(static_cast<size_t>(C * S), -1, 1, 22);
  std::vector<int8_t> q(static_cast<size_t>(C * S));
  std::mt19937 g(23);
  for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(g() % 255) - 127);
  const uint64_t off = p.blob.add_int8(q);
  Vec scales(C);
  for (int64_t c = 0; c < C; ++c) scales[static_cast<size_t>(c)] = r16(0.01 * (c + 1));
  auto& b = *p.b;
  Value X = p.input("x", {1, C, 1, S}, x);
  Value W = b.constexpr_affine_dequantize(
      mil::ConstValue::blobfile(mil::tensor_type(DType::kInt8, {1, C, 1, S}), kWeightsPath, off),
      mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {C}), scales), mil::ConstValue::int8(-2), 1);
  b.output(b.add(X, W));
  Vec want(x.size());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t s = 0; s < S; ++s) {
      const size_t i = static_cast<size_t>(c * S + s);
      want[i] = x[i] + r16((q[i] + 2.0) * scales[static_cast<size_t>(c)]);  // dequantized const is fp16
    }
  return {{{want}, {ref::abs_vec(want)}, 1}, {1.01, 0, 1e-6}};
}

// 4-bit weights packed here by hand (MILBlob UInt4: element 2k in the low nibble of byte k), independent of
// mil::pack_uint4, so a wrong nibble order in the writer or the reader fails these cases.
std::vector<uint8_t> nibbles_by_hand(const std::vector<uint8_t>& v) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < v.size(); i += 2)
    out.push_back(static_cast<uint8_t>(v[i] + 16 * (i + 1 < v.size() ? v[i + 1] : 0)));
  return out;
}

std::vector<uint8_t> random_nibbles(size_t n, unsigned seed) {
  std::vector<uint8_t> q(n);
  std::mt19937 g(seed);
  for (auto& v : q) v = static_cast<uint8_t>(g() % 16);
  return q;
}

// The three 4-bit forms on W [1, C, 1, S]; the output is x + W with x = 0 (exact in fp16), so it is the
// dequantized weight itself and must equal the op's definition evaluated here bit for bit.
//   affine:    W[c, s] = fp16((q - zp) * scale[c])                       (constexpr_affine_dequantize, axis 1)
//   blockwise: W[c, s] = fp16(scale[c, s / 32] * (q - offset[c, s / 32])) (constexpr_blockwise_shift_scale)
//   lut:       W[c, s] = lut[c][q]                                         (constexpr_lut_to_dense, 16 entries)
CaseResult uint4_weight_case(ProgramUnderTest& p, const std::string& form) {
  const int64_t C = 8, S = 64, B = 32, NB = S / B;
  const std::vector<uint8_t> q = random_nibbles(static_cast<size_t>(C * S), 31);
  const uint64_t off = p.blob.add_raw(nibbles_by_hand(q), mil::BlobDType::kUInt4);
  const auto data = mil::ConstValue::blobfile(mil::tensor_type(DType::kUint4, {1, C, 1, S}), kWeightsPath, off);
  Vec per(static_cast<size_t>(C * NB * 16));  // scales / offsets / lut entries, fp16 values
  std::mt19937 g(32);
  for (auto& v : per) v = r16(std::uniform_real_distribution<double>(-1, 1)(g));
  auto& b = *p.b;
  Value X = p.input("x", {1, C, 1, S}, Vec(static_cast<size_t>(C * S), 0.0));
  Value W;
  Vec want(static_cast<size_t>(C * S));
  auto at = [&](int64_t c, int64_t s) { return static_cast<size_t>(c * S + s); };
  if (form == "affine") {
    const Vec sc(per.begin(), per.begin() + C);
    W = b.constexpr_affine_dequantize(data, mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {C}), sc),
                                      {mil::scalar_type(DType::kUint4), {}, {3}, {}, {}}, 1);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) want[at(c, s)] = r16((q[at(c, s)] - 3.0) * sc[static_cast<size_t>(c)]);
  } else if (form == "blockwise") {
    const Vec sc(per.begin(), per.begin() + C * NB);
    std::vector<int64_t> offs(static_cast<size_t>(C * NB));
    for (size_t i = 0; i < offs.size(); ++i) offs[i] = static_cast<int64_t>(i % 16);
    W = b.constexpr_blockwise_shift_scale(
        data, mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {1, C, 1, NB}), sc),
        mil::ConstValue{mil::tensor_type(DType::kUint4, {1, C, 1, NB}), {}, offs, {}, {}});
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        const auto k = static_cast<size_t>(c * NB + s / B);
        want[at(c, s)] = r16(sc[k] * (q[at(c, s)] - static_cast<double>(offs[k])));
      }
  } else {
    const Vec lut(per.begin(), per.begin() + C * 16);
    W = b.constexpr_lut_to_dense(data,
                                 mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {1, C, 1, 1, 16, 1}), lut));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) want[at(c, s)] = lut[static_cast<size_t>(c * 16 + q[at(c, s)])];
  }
  b.output(b.add(X, W));
  return exact(want);
}

// 6-bit values packed bit by bit, as MILBlob packs a sub-byte type that is not byte aligned (SubByteTypes.cpp): bit b
// of element i is bit (6 i + b) of the payload, bytes low bit first.
std::vector<uint8_t> sixes_by_hand(const std::vector<uint8_t>& v) {
  std::vector<uint8_t> out((v.size() * 6 + 7) / 8, 0);
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t bit = 0; bit < 6; ++bit)
      if ((v[i] >> bit) & 1) out[(6 * i + bit) / 8] |= static_cast<uint8_t>(1u << ((6 * i + bit) % 8));
  return out;
}

// The issue-39 forms beyond 4 bits, checked like uint4_weight_case:
//   lut6:  W[c, s] = lut[c / 4][q]  (constexpr_lut_to_dense, uint6 indices, 64 entries, one table per 4 channels)
//   int8 blockwise: W[c, s] = fp16(scale[c, s / 32] * q)  (constexpr_blockwise_shift_scale, int8 data, no offset:
//   GGUF Q8_0's d * q)
CaseResult wide_weight_case(ProgramUnderTest& p, const std::string& form) {
  const int64_t C = 8, S = 64, B = 32, NB = S / B, G = 4;
  std::mt19937 g(33);
  auto& b = *p.b;
  Value X = p.input("x", {1, C, 1, S}, Vec(static_cast<size_t>(C * S), 0.0));
  Value W;
  Vec want(static_cast<size_t>(C * S));
  auto at = [&](int64_t c, int64_t s) { return static_cast<size_t>(c * S + s); };
  if (form == "lut6") {
    std::vector<uint8_t> q(static_cast<size_t>(C * S));
    for (auto& v : q) v = static_cast<uint8_t>(g() % 64);
    const uint64_t off = p.blob.add_raw(sixes_by_hand(q), mil::BlobDType::kUInt6);
    Vec lut(static_cast<size_t>(C / G * 64));
    for (auto& v : lut) v = r16(std::uniform_real_distribution<double>(-1, 1)(g));
    W = b.constexpr_lut_to_dense(
        mil::ConstValue::blobfile(mil::tensor_type(DType::kUint6, {1, C, 1, S}), kWeightsPath, off),
        mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {1, C / G, 1, 1, 64, 1}), lut));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) want[at(c, s)] = lut[static_cast<size_t>(c / G * 64 + q[at(c, s)])];
  } else {
    std::vector<uint8_t> q(static_cast<size_t>(C * S));
    for (auto& v : q) v = static_cast<uint8_t>(g() % 256);
    const uint64_t off = p.blob.add_raw(q, mil::BlobDType::kInt8);
    Vec sc(static_cast<size_t>(C * NB));
    for (auto& v : sc) v = r16(std::uniform_real_distribution<double>(-0.01, 0.01)(g));
    W = b.constexpr_blockwise_shift_scale(
        mil::ConstValue::blobfile(mil::tensor_type(DType::kInt8, {1, C, 1, S}), kWeightsPath, off),
        mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {1, C, 1, NB}), sc));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s)
        want[at(c, s)] = r16(sc[static_cast<size_t>(c * NB + s / B)] * static_cast<int8_t>(q[at(c, s)]));
  }
  b.output(b.add(X, W));
  return exact(want);
}

const std::map<std::string, CaseFn>& cases() {
  static const std::map<std::string, CaseFn> m = {
      {"add_bcast_channel",
       [](auto& p) {
         return binary_case(p, "add", {1, 16, 1, 1}, -4, 4, std::plus<>());
       }},
      {"sub_bcast_spatial",
       [](auto& p) {
         return binary_case(p, "sub", {1, 1, 1, 64}, -4, 4, std::minus<>());
       }},
      {"mul_same_shape",
       [](auto& p) {
         return binary_case(p, "mul", {1, 16, 1, 64}, -4, 4, std::multiplies<>());
       }},
      {"real_div",
       [](auto& p) {
         return binary_case(p, "real_div", {1, 16, 1, 64}, 0.5, 4, std::divides<>());
       }},
      {"pow",
       [](auto& p) {
         return binary_case(p, "pow", {1, 16, 1, 1}, 0.25, 2, [](double a, double b) { return std::pow(a, b); });
       }},
      {"sigmoid",
       [](auto& p) { return unary_case(p, "sigmoid", -8, 8, [](double a) { return 1 / (1 + std::exp(-a)); }); }},
      {"tanh", [](auto& p) { return unary_case(p, "tanh", -4, 4, [](double a) { return std::tanh(a); }); }},
      {"exp", [](auto& p) { return unary_case(p, "exp", -8, 8, [](double a) { return std::exp(a); }); }},
      {"identity", [](auto& p) { return unary_case(p, "identity", -8, 8, [](double a) { return a; }); }},
      {"relu", [](auto& p) { return unary_case(p, "relu", -4, 4, [](double a) { return std::max(a, 0.0); }); }},
      {"softplus",
       [](auto& p) { return unary_case(p, "softplus", -24, 24, [](double a) { return std::log1p(std::exp(a)); }); }},
      {"conv_1x1",
       [](auto& p) {
         return conv_case(p, geom(64, 1, 64, 96, 1, 1, 1, 1), "valid", {0, 0, 0, 0}, false);
       }},
      {"conv_3x3_same_bias",
       [](auto& p) {
         return conv_case(p, geom(8, 8, 40, 16, 3, 1, 1, 1), "same", {0, 0, 0, 0}, true);
       }},
      {"conv_stride2_custom_pad",
       [](auto& p) {
         return conv_case(p, geom(8, 9, 70, 8, 3, 1, 2, 1), "custom", {1, 0, 2, 1}, false);
       }},
      {"conv_dilation2",
       [](auto& p) {
         return conv_case(p, geom(4, 8, 40, 8, 3, 1, 1, 2), "valid", {0, 0, 0, 0}, false);
       }},
      {"conv_groups4",
       [](auto& p) {
         return conv_case(p, geom(16, 4, 36, 8, 3, 4, 1, 1), "same", {0, 0, 0, 0}, false);
       }},
      {"conv_depthwise",
       [](auto& p) {
         return conv_case(p, geom(16, 1, 64, 16, 1, 16, 1, 1), "valid", {0, 0, 0, 0}, true);
       }},
      {"matmul_batched",
       [](auto& p) {
         return matmul_case(p, {1, 4, 32, 48}, false, {1, 4, 48, 40}, false, false);
       }},
      {"matmul_transpose_x",
       [](auto& p) {
         return matmul_case(p, {1, 4, 48, 32}, true, {1, 4, 48, 40}, false, false);
       }},
      {"matmul_transpose_y_bcast",
       [](auto& p) {
         return matmul_case(p, {1, 4, 32, 48}, false, {1, 1, 64, 48}, true, true);
       }},
      {"matmul_both_transposed",
       [](auto& p) {
         return matmul_case(p, {2, 48, 32}, true, {2, 40, 48}, true, false);
       }},
      {"matmul_large_k",
       [](auto& p) {
         return matmul_case(p, {1, 2, 40, 600}, false, {1, 2, 600, 48}, false, false);
       }},
      {"matmul_on_views", [](auto& p) { return matmul_on_views_case(p); }},
      {"sdpa_no_mask", [](auto& p) { return sdpa_case(p); }},
      {"softmax_last", [](auto& p) { return softmax_case(p, 3); }},
      {"softmax_channels", [](auto& p) { return softmax_case(p, 1); }},
      {"reduce_sum_rmsnorm", [](auto& p) { return rmsnorm_case(p); }},
      {"reduce_max", [](auto& p) { return reduce_max_case(p); }},
      {"transpose", [](auto& p) { return transpose_case(p); }},
      {"reshape_slice_by_size", [](auto& p) { return reshape_slice_case(p); }},
      {"slice_by_index_strided", [](auto& p) { return slice_by_index_case(p); }},
      {"concat_channels", [](auto& p) { return concat_case(p, 1); }},
      {"concat_spatial", [](auto& p) { return concat_case(p, 3); }},
      {"cast_fp32_to_fp16", [](auto& p) { return cast_case(p); }},
      {"quant_dequant_tensor", [](auto& p) { return quant_case(p, false); }},
      {"quant_dequant_channel", [](auto& p) { return quant_case(p, true); }},
      {"constexpr_affine_dequantize", [](auto& p) { return affine_dequant_case(p); }},
      {"constexpr_affine_dequantize_uint4", [](auto& p) { return uint4_weight_case(p, "affine"); }},
      {"constexpr_blockwise_shift_scale_uint4", [](auto& p) { return uint4_weight_case(p, "blockwise"); }},
      {"constexpr_lut_to_dense_lut4", [](auto& p) { return uint4_weight_case(p, "lut"); }},
      {"constexpr_lut_to_dense_lut6_grouped", [](auto& p) { return wide_weight_case(p, "lut6"); }},
      {"constexpr_blockwise_shift_scale_int8", [](auto& p) { return wide_weight_case(p, "int8"); }},
  };
  return m;
}

std::vector<std::string> case_names() {
  std::vector<std::string> v;
  for (const auto& [k, f] : cases()) v.push_back(k);
  return v;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> v;
  for (const auto& b : rt::backends()) {
    std::string why;
    if (b.available(&why)) v.push_back(b.name);
  }
  return v;
}

class BackendOps : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(BackendOps, MatchesFp64Reference) {
  const auto& [case_name, backend] = GetParam();
  ProgramUnderTest p;
  CaseResult c = cases().at(case_name)(p);
  BackendRun r = run_on(backend, p);
  ASSERT_EQ(r.out.size(), c.ref.y.size());
  for (size_t i = 0; i < r.out.size(); ++i)
    expect_close(case_name + " on " + backend, r.out[i], c.ref.y[i], c.ref.mag[i], c.ref.K, c.tol);
}

// Every op the emulator lowers is exercised by at least one case above.
TEST(BackendOpsCoverage, EveryLoweredOpHasACase) {
  std::set<std::string> used;
  for (const auto& [name, fn] : cases()) {
    ProgramUnderTest p;
    fn(p);
    for (const auto& op : p.b->function().ops) used.insert(op.op);
  }
  for (const auto& op : emu::lowered_ops())
    EXPECT_TRUE(used.count(op)) << op << " is lowered by the emulator but no op-harness case uses it";
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOps,
                         ::testing::Combine(::testing::ValuesIn(case_names()),
                                            ::testing::ValuesIn(available_backends())),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace anelab::test
