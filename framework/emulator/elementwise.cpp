// Elementwise ops: broadcasting binary ops (add, sub, mul, real_div, pow; operands read through their
// view strides), unary ops (sigmoid, tanh, exp, relu, softplus) and cast. Arithmetic is fp32, rounded once to the
// declared dtype.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "framework/emulator/lower.h"

namespace anelab::emu {

using mil::DType;
using mil::Shape;

namespace {

enum BinOp : int { kAdd, kSub, kMul, kDiv, kPow };
enum UnOp : int { kSigmoid, kTanh, kExp, kRelu, kSoftplus };

// ---- step functions --------------------------------------------------------------------------------------
inline float apply_bin(int op, float a, float b) {
  switch (op) {
    case kAdd:
      return a + b;
    case kSub:
      return a - b;
    case kMul:
      return a * b;
    case kDiv:
      return a / b;
    default:
      return std::pow(a, b);
  }
}

inline float apply_un(int op, float a) {
  switch (op) {
    case kSigmoid:
      return 1.0f / (1.0f + std::exp(-a));
    case kTanh:
      return std::tanh(a);
    case kExp:
      return std::exp(a);
    case kSoftplus:  // log1p(exp(a)), a itself past 20 (torch's threshold; exp(a) would swamp the 1 in fp32 anyway)
      return a > 20.0f ? a : std::log1p(std::exp(a));
    default:
      return a > 0.0f ? a : 0.0f;
  }
}

template <int OP>
void bin_row(const float* a, int64_t sa, const float* b, int64_t sb, float* o, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = apply_bin(OP, a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const float bv = b[0];
    for (int64_t i = 0; i < n; ++i) o[i] = apply_bin(OP, a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = a[0];
    for (int64_t i = 0; i < n; ++i) o[i] = apply_bin(OP, av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = apply_bin(OP, a[i * sa], b[i * sb]);
  }
}

void bin_row_dispatch(int op, const float* a, int64_t sa, const float* b, int64_t sb, float* o, int64_t n) {
  switch (op) {
    case kAdd:
      return bin_row<kAdd>(a, sa, b, sb, o, n);
    case kSub:
      return bin_row<kSub>(a, sa, b, sb, o, n);
    case kMul:
      return bin_row<kMul>(a, sa, b, sb, o, n);
    case kDiv:
      return bin_row<kDiv>(a, sa, b, sb, o, n);
    default:
      return bin_row<kPow>(a, sa, b, sb, o, n);
  }
}

void k_binary(const Step& s, const ExecCtx& ctx) {
  const BinaryArgs& a = step_args<BinaryArgs>(s);
  const int op = a.op;
  const int64_t rank = static_cast<int64_t>(a.shape.size());
  const int64_t* shape = a.shape.data();
  const int64_t* sa = a.sa.data();
  const int64_t* sb = a.sb.data();
  const int64_t inner = shape[rank - 1];
  const int64_t rows = s.out_n / std::max<int64_t>(1, inner);
  par_for(ctx, rows, s.out_n > kParMin, [&](int64_t r) {
    int64_t oa = 0, ob = 0, rem = r;
    for (int64_t d = rank - 2; d >= 0; --d) {
      const int64_t i = rem % shape[d];
      rem /= shape[d];
      oa += i * sa[d];
      ob += i * sb[d];
    }
    float* o = s.out + r * inner;
    bin_row_dispatch(op, s.in[0] + oa, sa[rank - 1], s.in[1] + ob, sb[rank - 1], o, inner);
    round_range(o, inner, s.out_dtype);
  });
}

void k_unary(const Step& s, const ExecCtx& ctx) {
  const int op = step_args<UnaryArgs>(s).op;
  const int64_t n = s.out_n, chunk = 4096, nc = (n + chunk - 1) / chunk;
  par_for(ctx, nc, n > kParMin / 4, [&](int64_t c) {
    const int64_t b = c * chunk, e = std::min(n, b + chunk);
    for (int64_t i = b; i < e; ++i) s.out[i] = apply_un(op, s.in[0][i]);
    round_range(s.out + b, e - b, s.out_dtype);
  });
}

// cast to fp16/fp32 rounds to nearest even; to integer types truncates toward zero and saturates.
void k_cast(const Step& s, const ExecCtx& ctx) {
  if (mil::is_float(s.out_dtype)) {
    std::memcpy(s.out, s.in[0], static_cast<size_t>(s.out_n) * sizeof(float));
    round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
    return;
  }
  const CastArgs& a = step_args<CastArgs>(s);
  const float lo = a.lo, hi = a.hi;
  for (int64_t i = 0; i < s.out_n; ++i) {
    const float v = s.in[0][i];
    s.out[i] = std::isnan(v) ? 0.0f : std::clamp(std::trunc(v), lo, hi);
  }
}

// ---- lowering -------------------------------------------------------------------------------------
// Both operands are read in place through their (view) strides, broadcast to the registry's output
// shape; size-1 dims are dropped and neighbours contiguous for both operands merged.
template <int OP>
void lower_binary(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const Shape& out = std::get<mil::BroadcastParams>(r.params).out;
  const ValueInfo& a = l.view(op, "x");
  const ValueInfo& b = l.view(op, "y");
  auto sa = bcast_strides(a.type.shape, strides_of(a), out), sb = bcast_strides(b.type.shape, strides_of(b), out);
  BinaryArgs k{OP, {}, {}, {}};
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (!k.shape.empty() && k.sa.back() == sa[d] * out[d] && k.sb.back() == sb[d] * out[d]) {
      k.shape.back() *= out[d];
      k.sa.back() = sa[d];
      k.sb.back() = sb[d];
      continue;
    }
    k.shape.push_back(out[d]);
    k.sa.push_back(sa[d]);
    k.sb.push_back(sb[d]);
  }
  if (k.shape.empty()) k.shape = {1}, k.sa = {0}, k.sb = {0};
  l.new_step(op, k_binary, {&a, &b}, std::move(k));
}

template <int OP>
void lower_unary(Lowerer& l, const mil::Operation& op, const mil::Resolved&) {
  l.new_step(op, k_unary, {&l.value(op, "x")}, UnaryArgs{OP});
}

void lower_cast(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const DType to = std::get<mil::CastParams>(r.params).to;
  CastArgs a;
  switch (to) {
    case DType::kInt8:
      a = {-128, 127};
      break;
    case DType::kUint8:
      a = {0, 255};
      break;
    case DType::kInt16:
      a = {-32768, 32767};
      break;
    case DType::kInt32:
      a = {-2147483647.0f, 2147483647.0f};
      break;
    default:
      ANELAB_CHECK(mil::is_float(to), "emulator", l.where(op), ": cast to ", mil::dtype_name(to), " is not supported");
  }
  l.new_step(op, k_cast, {&l.value(op, "x")}, a);
}

constexpr LowerRule kElementwiseRules[] = {
    {"add", lower_binary<kAdd>},          {"sub", lower_binary<kSub>}, {"mul", lower_binary<kMul>},
    {"real_div", lower_binary<kDiv>},     {"pow", lower_binary<kPow>}, {"sigmoid", lower_unary<kSigmoid>},
    {"tanh", lower_unary<kTanh>},         {"exp", lower_unary<kExp>},  {"relu", lower_unary<kRelu>},
    {"softplus", lower_unary<kSoftplus>}, {"cast", lower_cast},
};

}  // namespace

std::span<const LowerRule> elementwise_rules() { return kElementwiseRules; }

}  // namespace anelab::emu
