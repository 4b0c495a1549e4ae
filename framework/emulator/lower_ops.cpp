// Per-op lowering: checks shapes against the op's semantics (the declared output type must match),
// precomputes kernel parameters (strides, offsets, GEMM plans) and appends a Step.
#include <algorithm>
#include <cmath>
#include <map>

#include "framework/core/error.h"
#include "framework/emulator/lower_ops.h"

namespace anelab::emu {

using mil::DType;
using mil::Shape;

namespace {

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d)
    st[static_cast<size_t>(d)] = st[static_cast<size_t>(d) + 1] * s[static_cast<size_t>(d) + 1];
  return st;
}

int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < s.size(); ++i) p *= s[i];
  return p;
}

// numpy-style broadcast; empty optional-like result signalled by ok=false.
Shape broadcast(const Shape& a, const Shape& b, bool* ok) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  *ok = true;
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) *ok = false;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Element strides of a value (its view strides, or the contiguous ones).
std::vector<int64_t> strides_of(const ValueInfo& v) {
  return v.strides.empty() ? contiguous_strides(v.type.shape) : v.strides;
}

// Strides `st` of shape `s` right-aligned into rank r, 0 on broadcast dims.
std::vector<int64_t> bcast_strides(const Shape& s, const std::vector<int64_t>& st, const Shape& out) {
  const size_t r = out.size(), off = r - s.size();
  std::vector<int64_t> res(r, 0);
  for (size_t i = off; i < r; ++i) res[i] = s[i - off] == 1 ? 0 : st[i - off];
  return res;
}

// Strides that let `to` (same element count) read a view of shape `from` with strides `st` without a
// copy, when the reshape only splits/merges dims that are contiguous in the view. false: needs a copy.
bool reshape_view(const Shape& from, const std::vector<int64_t>& st, const Shape& to, std::vector<int64_t>* out) {
  Shape os;
  std::vector<int64_t> ost;
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1) os.push_back(from[d]), ost.push_back(st[d]);
  out->assign(to.size(), 1);
  size_t oi = 0, ni = 0;
  while (oi < os.size() && ni < to.size()) {
    if (to[ni] == 1) {
      ++ni;
      continue;
    }
    int64_t np = to[ni], op = os[oi];
    size_t nj = ni + 1, oj = oi + 1;
    while (np != op) {
      if (np < op) {
        if (nj >= to.size()) return false;
        np *= to[nj++];
      } else {
        if (oj >= os.size()) return false;
        op *= os[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k)
      if (ost[k] != os[k + 1] * ost[k + 1]) return false;
    (*out)[nj - 1] = ost[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) (*out)[k - 1] = (*out)[k] * to[k];
    ni = nj, oi = oj;
  }
  return oi == os.size();
}

}  // namespace

void Lowerer::expect_shape(const mil::Operation& op, const Shape& want) const {
  ANELAB_CHECK(op.type.shape == want, "emulator", where(op), ": declared output ", op.type.str(),
               " but the op produces shape ", mil::shape_str(want));
}

int64_t Lowerer::norm_axis(const mil::Operation& op, int64_t axis, int64_t rank) const {
  const int64_t a = axis < 0 ? axis + rank : axis;
  ANELAB_CHECK(a >= 0 && a < rank, "emulator", where(op), ": axis ", axis, " out of range for rank ", rank);
  return a;
}

void Lowerer::lower_op(const mil::Operation& op) {
  static const std::map<std::string, int64_t> kBin = {{"add", kAdd},     {"sub", kSub},         {"mul", kMul},
                                                      {"real_div", kDiv}, {"pow", kPow},         {"maximum", kMax},
                                                      {"minimum", kMin}};
  static const std::map<std::string, int64_t> kUn = {{"sigmoid", kSigmoid}, {"tanh", kTanh}, {"exp", kExp},
                                                     {"relu", kRelu},       {"sqrt", kSqrt}, {"rsqrt", kRsqrt}};
  const std::string& k = op.op;
  if (k == "const") return lower_const(op);
  if (k == "constexpr_affine_dequantize") return lower_affine_dequantize(op);
  if (auto it = kBin.find(k); it != kBin.end()) return lower_binary(op, it->second);
  if (auto it = kUn.find(k); it != kUn.end()) return lower_unary(op, it->second);
  if (k == "conv") return lower_conv(op);
  if (k == "matmul") return lower_matmul(op);
  if (k == "scaled_dot_product_attention") return lower_sdpa(op);
  if (k == "reshape" || k == "identity") return lower_copy(op);
  if (k == "transpose") return lower_transpose(op);
  if (k == "slice_by_size") return lower_slice_by_size(op);
  if (k == "slice_by_index") return lower_slice_by_index(op);
  if (k == "concat") return lower_concat(op);
  if (k == "softmax") return lower_softmax(op);
  if (k == "reduce_sum") return lower_reduce(op, kSum);
  if (k == "reduce_max") return lower_reduce(op, kRMax);
  if (k == "reduce_mean") return lower_reduce(op, kMean);
  if (k == "cast") return lower_cast(op);
  if (k == "quantize") return lower_quant(op, true);
  if (k == "dequantize") return lower_quant(op, false);
  fail("emulator", where(op), ": op '", k, "' is not implemented by the emulator (see framework/emulator/README.md)");
}

// ---- elementwise ----------------------------------------------------------------------------------
void Lowerer::lower_binary(const mil::Operation& op, int64_t bop) {
  const ValueInfo& a = view(op, "x");  // views are read in place through their strides
  const ValueInfo& b = view(op, "y");
  bool ok = false;
  const Shape out = broadcast(a.type.shape, b.type.shape, &ok);
  ANELAB_CHECK(ok, "emulator", where(op), ": shapes ", mil::shape_str(a.type.shape), " and ",
               mil::shape_str(b.type.shape), " do not broadcast");
  expect_shape(op, out);
  auto sa = bcast_strides(a.type.shape, strides_of(a), out), sb = bcast_strides(b.type.shape, strides_of(b), out);
  // Collapse: drop size-1 dims, merge neighbours that are contiguous for both operands.
  std::vector<int64_t> sh, xa, xb;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (!sh.empty() && xa.back() == sa[d] * out[d] && xb.back() == sb[d] * out[d]) {
      sh.back() *= out[d];
      xa.back() = sa[d];
      xb.back() = sb[d];
      continue;
    }
    sh.push_back(out[d]);
    xa.push_back(sa[d]);
    xb.push_back(sb[d]);
  }
  if (sh.empty()) sh = {1}, xa = {0}, xb = {0};
  Step& s = new_step(op, k_binary, {&a, &b});
  s.iv = {bop, static_cast<int64_t>(sh.size())};
  s.iv.insert(s.iv.end(), sh.begin(), sh.end());
  s.iv.insert(s.iv.end(), xa.begin(), xa.end());
  s.iv.insert(s.iv.end(), xb.begin(), xb.end());
}

void Lowerer::lower_unary(const mil::Operation& op, int64_t uop) {
  const ValueInfo& x = value(op, "x");
  expect_shape(op, x.type.shape);
  new_step(op, k_unary, {&x}).iv = {uop};
}

void Lowerer::lower_cast(const mil::Operation& op) {
  const ValueInfo& x = value(op, "x");
  expect_shape(op, x.type.shape);
  const std::string to = lit_str(op, "dtype", "");
  auto t = mil::parse_dtype(to);
  ANELAB_CHECK(t && *t == op.type.dtype, "emulator", where(op), ": dtype '", to, "' does not match the declared ",
               op.type.str());
  Step& s = new_step(op, k_cast, {&x});
  switch (*t) {
    case DType::kInt8: s.iv = {-128, 127}; break;
    case DType::kUint8: s.iv = {0, 255}; break;
    case DType::kInt16: s.iv = {-32768, 32767}; break;
    case DType::kInt32: s.iv = {-2147483647, 2147483647}; break;
    default:
      ANELAB_CHECK(mil::is_float(*t), "emulator", where(op), ": cast to ", to, " is not supported");
  }
}

// quantize(input, output_dtype, scale[, zero_point, axis]) / dequantize(input, scale[, zero_point, axis])
void Lowerer::lower_quant(const mil::Operation& op, bool quantize) {
  const ValueInfo& x = value(op, "input");
  expect_shape(op, x.type.shape);
  const Shape& sh = x.type.shape;
  std::vector<float> scale = lit_floats(op, "scale");
  std::vector<float> zp = op.arg("zero_point") ? lit_floats(op, "zero_point") : std::vector<float>{0.0f};
  int64_t outer = 1, len = 1, inner = x.type.numel();
  if (op.arg("axis") || scale.size() > 1) {
    const int64_t a = norm_axis(op, lit_int(op, "axis", 1), static_cast<int64_t>(sh.size()));
    outer = prod(sh, 0, static_cast<size_t>(a));
    len = sh[static_cast<size_t>(a)];
    inner = prod(sh, static_cast<size_t>(a) + 1, sh.size());
  }
  auto expand = [&](std::vector<float>& v, const char* what) {
    ANELAB_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == len, "emulator", where(op), ": ", what, " has ",
                 v.size(), " elements; expected 1 or ", len);
    if (v.size() == 1) v.assign(static_cast<size_t>(len), v[0]);
  };
  expand(scale, "scale");
  expand(zp, "zero_point");
  Step& s = new_step(op, quantize ? k_quantize : k_dequantize, {&x});
  s.iv = {outer, len, inner};
  if (quantize) {
    const std::string to = lit_str(op, "output_dtype", "int8");
    ANELAB_CHECK(to == "int8" || to == "uint8", "emulator", where(op), ": output_dtype '", to,
                 "' (expected int8 or uint8)");
    s.iv.push_back(to == "int8" ? -128 : 0);
    s.iv.push_back(to == "int8" ? 127 : 255);
  }
  s.fv = scale;
  s.fv.insert(s.fv.end(), zp.begin(), zp.end());
}

// ---- layout ---------------------------------------------------------------------------------------
// reshape / identity: an alias of the input (or a view of a view) when the dtype is unchanged.
void Lowerer::lower_copy(const mil::Operation& op) {
  const ValueInfo& xv = view(op, "x");
  ANELAB_CHECK(xv.type.numel() == op.type.numel(), "emulator", where(op), ": input ", xv.type.str(), " has ",
               xv.type.numel(), " elements, the declared output ", op.type.str(), " has ", op.type.numel());
  if (op.op == "identity") expect_shape(op, xv.type.shape);
  if (xv.type.dtype == op.type.dtype) {
    std::vector<int64_t> st;
    if (xv.strides.empty()) return set_view(op, xv, {}, 0);
    if (reshape_view(xv.type.shape, xv.strides, op.type.shape, &st)) return set_view(op, xv, st, 0);
  }
  const ValueInfo& x = value(op, "x");
  if (x.type.dtype == op.type.dtype) return set_view(op, x, {}, 0);
  new_step(op, k_copy, {&x}).iv = {1};
}

// The op's output is a view of x's buffer: element strides `strides` (empty: contiguous) at offset `off`
// (elements) past x's own offset.
void Lowerer::set_view(const mil::Operation& op, const ValueInfo& x, std::vector<int64_t> strides, int64_t off) {
  if (!strides.empty() && strides.size() == op.type.shape.size()) {
    const auto cs = contiguous_strides(op.type.shape);
    bool contiguous = true;
    for (size_t d = 0; d < cs.size(); ++d) contiguous = contiguous && (op.type.shape[d] == 1 || strides[d] == cs[d]);
    if (contiguous) strides.clear();
  }
  ValueInfo v{op.type, x.ref, std::move(strides)};
  v.ref.off += off;
  values_[op.output] = std::move(v);
}

void Lowerer::add_strided(const mil::Operation& op, const ValueInfo& x, const Shape& shape,
                          const std::vector<int64_t>& strides, int64_t base) {
  expect_shape(op, shape);
  set_view(op, x, shape.empty() ? std::vector<int64_t>{} : strides, base);
}

void Lowerer::lower_transpose(const mil::Operation& op) {
  const ValueInfo& x = view(op, "x");
  const Shape& in = x.type.shape;
  const auto perm = lit_ints(op, "perm", {});
  ANELAB_CHECK(perm.size() == in.size(), "emulator", where(op), ": perm has ", perm.size(), " entries for rank ",
               in.size());
  const auto ist = strides_of(x);
  Shape out(in.size());
  std::vector<int64_t> st(in.size());
  std::vector<bool> seen(in.size(), false);
  for (size_t d = 0; d < perm.size(); ++d) {
    const int64_t p = norm_axis(op, perm[d], static_cast<int64_t>(in.size()));
    ANELAB_CHECK(!seen[static_cast<size_t>(p)], "emulator", where(op), ": perm repeats axis ", p);
    seen[static_cast<size_t>(p)] = true;
    out[d] = in[static_cast<size_t>(p)];
    st[d] = ist[static_cast<size_t>(p)];
  }
  add_strided(op, x, out, st, 0);
}

void Lowerer::lower_slice_by_size(const mil::Operation& op) {
  const ValueInfo& x = view(op, "x");
  const Shape& in = x.type.shape;
  const auto begin = lit_ints(op, "begin", {}), size = lit_ints(op, "size", {});
  ANELAB_CHECK(begin.size() == in.size() && size.size() == in.size(), "emulator", where(op),
               ": begin/size need ", in.size(), " entries");
  const auto ist = strides_of(x);
  Shape out(in.size());
  int64_t base = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t b = begin[d] < 0 ? begin[d] + in[d] : begin[d];
    const int64_t n = size[d] < 0 ? in[d] - b : size[d];
    ANELAB_CHECK(b >= 0 && n >= 0 && b + n <= in[d], "emulator", where(op), ": slice [", begin[d], ", +", size[d],
                 ") out of range for dim ", d, " of ", x.type.str());
    out[d] = n;
    base += b * ist[d];
  }
  add_strided(op, x, out, ist, base);
}

void Lowerer::lower_slice_by_index(const mil::Operation& op) {
  const ValueInfo& x = view(op, "x");
  const Shape& in = x.type.shape;
  const size_t r = in.size();
  const auto begin = lit_ints(op, "begin", {}), end = lit_ints(op, "end", {});
  const auto stride = lit_ints(op, "stride", std::vector<int64_t>(r, 1));
  const auto bm = lit_ints(op, "begin_mask", std::vector<int64_t>(r, 0));
  const auto em = lit_ints(op, "end_mask", std::vector<int64_t>(r, 0));
  const auto sq = lit_ints(op, "squeeze_mask", std::vector<int64_t>(r, 0));
  ANELAB_CHECK(begin.size() == r && end.size() == r && stride.size() == r && bm.size() == r && em.size() == r &&
                   sq.size() == r,
               "emulator", where(op), ": begin/end/stride/masks need ", r, " entries");
  const auto ist = strides_of(x);
  Shape out;
  std::vector<int64_t> st;
  int64_t base = 0;
  for (size_t d = 0; d < r; ++d) {
    const int64_t n = in[d], s = stride[d];
    ANELAB_CHECK(s != 0, "emulator", where(op), ": stride 0 on dim ", d);
    auto norm = [&](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
    int64_t b, e;
    if (s > 0) {
      b = bm[d] ? 0 : norm(begin[d], 0, n);
      e = em[d] ? n : norm(end[d], 0, n);
    } else {
      b = bm[d] ? n - 1 : norm(begin[d], -1, n - 1);
      e = em[d] ? -1 : norm(end[d], -1, n - 1);
    }
    const int64_t len = s > 0 ? std::max<int64_t>(0, (e - b + s - 1) / s) : std::max<int64_t>(0, (b - e - s - 1) / -s);
    base += (len > 0 ? b : 0) * ist[d];
    if (sq[d]) {
      ANELAB_CHECK(len == 1, "emulator", where(op), ": squeeze_mask on dim ", d, " of extent ", len);
      continue;
    }
    out.push_back(len);
    st.push_back(s * ist[d]);
  }
  add_strided(op, x, out, st, base);
}

void Lowerer::lower_concat(const mil::Operation& op) {
  const mil::Arg* vals = op.arg("values");
  ANELAB_CHECK(vals && !vals->names.empty(), "emulator", where(op), ": missing values=(...)");
  ANELAB_CHECK(!lit_bool(op, "interleave", false), "emulator", where(op),
               ": interleave=true is not implemented by the emulator");
  std::vector<const ValueInfo*> ins;
  for (const auto& n : vals->names) ins.push_back(&value_named(op, n));
  const Shape& s0 = ins[0]->type.shape;
  const int64_t axis = norm_axis(op, lit_int(op, "axis", 0), static_cast<int64_t>(s0.size()));
  Shape out = s0;
  out[static_cast<size_t>(axis)] = 0;
  for (const ValueInfo* v : ins) {
    const Shape& s = v->type.shape;
    bool same = s.size() == s0.size();
    for (size_t d = 0; same && d < s.size(); ++d) same = static_cast<int64_t>(d) == axis || s[d] == s0[d];
    ANELAB_CHECK(same, "emulator", where(op), ": input ", v->type.str(), " does not match ", ins[0]->type.str(),
                 " outside axis ", axis);
    out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
  }
  expect_shape(op, out);
  const int64_t inner = prod(out, static_cast<size_t>(axis) + 1, out.size());
  Step& st = new_step(op, k_concat, ins);
  st.iv = {static_cast<int64_t>(ins.size()), prod(out, 0, static_cast<size_t>(axis))};
  for (const ValueInfo* v : ins) st.iv.push_back(v->type.shape[static_cast<size_t>(axis)] * inner);
}

// ---- softmax / reductions -------------------------------------------------------------------------
void Lowerer::lower_softmax(const mil::Operation& op) {
  const ValueInfo& x = value(op, "x");
  const Shape& sh = x.type.shape;
  expect_shape(op, sh);
  const int64_t a = norm_axis(op, lit_int(op, "axis", -1), static_cast<int64_t>(sh.size()));
  new_step(op, k_softmax, {&x}).iv = {prod(sh, 0, static_cast<size_t>(a)), sh[static_cast<size_t>(a)],
                                      prod(sh, static_cast<size_t>(a) + 1, sh.size())};
}

void Lowerer::lower_reduce(const mil::Operation& op, int64_t kind) {
  const ValueInfo& x = value(op, "x");
  const Shape& sh = x.type.shape;
  const int64_t r = static_cast<int64_t>(sh.size());
  std::vector<int64_t> all(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) all[static_cast<size_t>(i)] = i;
  std::vector<int64_t> axes = lit_ints(op, "axes", all);
  for (auto& a : axes) a = norm_axis(op, a, r);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  ANELAB_CHECK(!axes.empty() && axes.back() - axes.front() + 1 == static_cast<int64_t>(axes.size()), "emulator",
               where(op), ": reduced axes must be adjacent in the emulator");
  const bool keep = lit_bool(op, "keep_dims", false);
  Shape out;
  for (int64_t d = 0; d < r; ++d) {
    const bool red = d >= axes.front() && d <= axes.back();
    if (!red) out.push_back(sh[static_cast<size_t>(d)]);
    else if (keep) out.push_back(1);
  }
  expect_shape(op, out);
  const size_t a0 = static_cast<size_t>(axes.front()), a1 = static_cast<size_t>(axes.back()) + 1;
  new_step(op, k_reduce, {&x}).iv = {kind, prod(sh, 0, a0), prod(sh, a0, a1), prod(sh, a1, sh.size())};
}

// ---- GEMM ops -------------------------------------------------------------------------------------
// A matmul operand read in place: its last two dims [R, C] must have unit stride in one of them.
// Gives the GEMM transpose flag (the op's flag, flipped for a column-major view) and leading dimension.
bool gemm_operand(const ValueInfo& v, bool op_t, bool* t, int64_t* ld) {
  const Shape& sh = v.type.shape;
  const auto st = strides_of(v);
  const size_t r = sh.size();
  const int64_t R = sh[r - 2], C = sh[r - 1], sr = st[r - 2], sc = st[r - 1];
  if (sc == 1 || C == 1) {
    *t = op_t, *ld = R == 1 ? std::max<int64_t>(C, 1) : sr;
    return *ld >= 1;
  }
  if (sr == 1 || R == 1) {
    *t = !op_t, *ld = sc;
    return true;
  }
  return false;
}

void Lowerer::lower_matmul(const mil::Operation& op) {
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  const bool tx0 = lit_bool(op, "transpose_x", false), ty0 = lit_bool(op, "transpose_y", false);
  {  // views whose matrix dims have a unit stride are read in place; others are materialised
    const ValueInfo& xv = view(op, "x");
    const ValueInfo& yv = view(op, "y");
    ANELAB_CHECK(xv.type.shape.size() >= 2 && yv.type.shape.size() >= 2, "emulator", where(op),
                 ": operands must have rank >= 2, got ", xv.type.str(), " and ", yv.type.str());
    if (!gemm_operand(xv, tx0, &ta, &lda)) gemm_operand(value(op, "x"), tx0, &ta, &lda);
    if (!gemm_operand(yv, ty0, &tb, &ldb)) gemm_operand(value(op, "y"), ty0, &tb, &ldb);
  }
  const ValueInfo& x = view(op, "x");
  const ValueInfo& y = view(op, "y");
  const bool tx = lit_bool(op, "transpose_x", false), ty = lit_bool(op, "transpose_y", false);
  const Shape &xs = x.type.shape, &ys = y.type.shape;
  ANELAB_CHECK(xs.size() >= 2 && ys.size() >= 2, "emulator", where(op), ": operands must have rank >= 2, got ",
               x.type.str(), " and ", y.type.str());
  const size_t rx = xs.size(), ry = ys.size();
  const int64_t M = tx ? xs[rx - 1] : xs[rx - 2], K = tx ? xs[rx - 2] : xs[rx - 1];
  const int64_t K2 = ty ? ys[ry - 1] : ys[ry - 2], N = ty ? ys[ry - 2] : ys[ry - 1];
  ANELAB_CHECK(K == K2, "emulator", where(op), ": inner dimensions differ (", x.type.str(), " x ", y.type.str(), ")");
  const Shape xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
  bool ok = false;
  Shape ob = broadcast(xb, yb, &ok);
  ANELAB_CHECK(ok, "emulator", where(op), ": batch dims of ", x.type.str(), " and ", y.type.str(), " do not broadcast");
  Shape out = ob;
  out.push_back(M);
  out.push_back(N);
  expect_shape(op, out);
  GemmPlan g;
  g.m = M, g.n = N, g.k = K, g.ta = ta, g.tb = tb, g.lda = lda, g.ldb = ldb, g.ldc = N;
  g.round_fp16 = op.type.dtype == DType::kFp16;
  const auto xst = strides_of(x), yst = strides_of(y);  // element strides; batch dims broadcast with 0
  const auto sx = bcast_strides(xb, std::vector<int64_t>(xst.begin(), xst.end() - 2), ob);
  const auto sy = bcast_strides(yb, std::vector<int64_t>(yst.begin(), yst.end() - 2), ob);
  const int64_t nb = prod(ob, 0, ob.size());
  for (int64_t b = 0; b < nb; ++b) {
    int64_t rem = b, ox = 0, oy = 0;
    for (int d = static_cast<int>(ob.size()) - 1; d >= 0; --d) {
      const int64_t i = rem % ob[static_cast<size_t>(d)];
      rem /= ob[static_cast<size_t>(d)];
      ox += i * sx[static_cast<size_t>(d)];
      oy += i * sy[static_cast<size_t>(d)];
    }
    g.a_off.push_back(ox);
    g.b_off.push_back(oy);
    g.c_off.push_back(b * M * N);
  }
  plan_gemm(g);
  if (x.ref.kind == Ref::kConst) prepack_gemm_a(g, plan_.ptr(x.ref));  // const A packed once
  new_step(op, k_matmul, {&x, &y}).gemms.push_back(std::move(g));
}

void Lowerer::lower_sdpa(const mil::Operation& op) {
  ANELAB_CHECK(!op.arg("attn_mask"), "emulator", where(op),
               ": attn_mask is ignored by the ANE (digest §2.6.4); use matmul + add(mask) + softmax + matmul");
  const ValueInfo& q = value(op, "query");
  const ValueInfo& k = value(op, "key");
  const ValueInfo& v = value(op, "value");
  const Shape &qs = q.type.shape, &ks = k.type.shape, &vs = v.type.shape;
  const size_t r = qs.size();
  ANELAB_CHECK(r >= 2 && ks.size() == r && vs.size() == r, "emulator", where(op), ": query/key/value ranks differ");
  const int64_t L = qs[r - 2], E = qs[r - 1], S = ks[r - 2], Ev = vs[r - 1];
  ANELAB_CHECK(ks[r - 1] == E && vs[r - 2] == S && Shape(qs.begin(), qs.end() - 2) == Shape(ks.begin(), ks.end() - 2) &&
                   Shape(qs.begin(), qs.end() - 2) == Shape(vs.begin(), vs.end() - 2),
               "emulator", where(op), ": incompatible query ", q.type.str(), ", key ", k.type.str(), ", value ",
               v.type.str());
  Shape out(qs.begin(), qs.end() - 1);
  out.push_back(Ev);
  expect_shape(op, out);
  const int64_t B = prod(qs, 0, r - 2);
  GemmPlan g1, g2;
  g1.m = L, g1.n = S, g1.k = E, g1.tb = true, g1.lda = E, g1.ldb = E, g1.ldc = S;
  g1.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  g2.m = L, g2.n = Ev, g2.k = S, g2.lda = S, g2.ldb = Ev, g2.ldc = Ev;
  for (int64_t b = 0; b < B; ++b) {
    g1.a_off.push_back(b * L * E), g1.b_off.push_back(b * S * E), g1.c_off.push_back(b * L * S);
    g2.a_off.push_back(b * L * S), g2.b_off.push_back(b * S * Ev), g2.c_off.push_back(b * L * Ev);
  }
  plan_gemm(g1);
  plan_gemm(g2);
  Step& s = new_step(op, k_sdpa, {&q, &k, &v});
  s.iv = {B, L, S};
  s.gemms.push_back(std::move(g1));
  s.gemms.push_back(std::move(g2));
  set_scratch(s, static_cast<size_t>(B * L * S));
}

}  // namespace anelab::emu
