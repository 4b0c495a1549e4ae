// Non-GEMM kernels of the emulator: elementwise (broadcasting binary, unary), layout (copy, strided
// transpose/slice, concat), softmax, reductions, cast, quantize/dequantize.
//
// Every kernel reads fp32 arrays that hold dtype-exact values and writes its result rounded to the
// op's declared dtype (fp16: round-to-nearest-even, overflow to +-inf). Arithmetic is fp32; reductions
// and softmax accumulate in fp32 in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/fp16.h"
#include "framework/emulator/plan.h"

namespace anelab::emu {
namespace {

constexpr int64_t kParMin = 1 << 15;  // elements below which a kernel stays single-threaded

namespace W = simd;

// exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n ln2 (two-part ln2), p = degree-7 Taylor
// polynomial (relative error < 1e-8 on |r| <= ln2/2), scaled by 2^n in one rounding (W::ldexp).
// Inputs below -86 (and NaN) give exactly 0 (exp(-86) ~ 4e-38): results stay normal floats. Subnormal
// results (e.g. the masked half of causal attention scores, ~-65504) cost ~100 cycles per operation
// downstream and are far below fp16's smallest subnormal (6e-8) anyway. Same operations in the same order
// on every architecture, hence the same bits.
inline W::F32 exp_v(W::F32 x) {
  const W::Mask keep = W::ge(x, W::set1(-86.0f));
  x = W::min(W::set1(88.8f), W::max(W::set1(-86.0f), x));
  const W::F32 n = W::round_even(W::mul(x, W::set1(1.44269504088896341f)));
  W::F32 r = W::fnmadd(n, W::set1(0.693145751953125f), x);
  r = W::fnmadd(n, W::set1(1.428606765330187e-06f), r);
  W::F32 p = W::set1(1.0f / 5040.0f);
  p = W::fmadd(p, r, W::set1(1.0f / 720.0f));
  p = W::fmadd(p, r, W::set1(1.0f / 120.0f));
  p = W::fmadd(p, r, W::set1(1.0f / 24.0f));
  p = W::fmadd(p, r, W::set1(1.0f / 6.0f));
  p = W::fmadd(p, r, W::set1(0.5f));
  p = W::fmadd(p, r, W::set1(1.0f));
  p = W::fmadd(p, r, W::set1(1.0f));
  return W::select(keep, W::ldexp(p, n), W::zero());
}

void round_range(float* x, int64_t n, mil::DType t) {
  if (t == mil::DType::kFp16) {
    round_fp16_inplace(x, static_cast<size_t>(n));
  } else if (t != mil::DType::kFp32) {
    for (int64_t i = 0; i < n; ++i) x[i] = std::nearbyint(x[i]);
  }
}

inline float apply_bin(int64_t op, float a, float b) {
  switch (op) {
    case kAdd: return a + b;
    case kSub: return a - b;
    case kMul: return a * b;
    case kDiv: return a / b;
    case kPow: return std::pow(a, b);
    case kMax: return std::max(a, b);
    default: return std::min(a, b);
  }
}

inline float apply_un(int64_t op, float a) {
  switch (op) {
    case kSigmoid: return 1.0f / (1.0f + std::exp(-a));
    case kTanh: return std::tanh(a);
    case kExp: return std::exp(a);
    case kRelu: return a > 0.0f ? a : 0.0f;
    case kSqrt: return std::sqrt(a);
    default: return 1.0f / std::sqrt(a);
  }
}

template <int64_t OP>
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

void bin_row_dispatch(int64_t op, const float* a, int64_t sa, const float* b, int64_t sb, float* o, int64_t n) {
  switch (op) {
    case kAdd: return bin_row<kAdd>(a, sa, b, sb, o, n);
    case kSub: return bin_row<kSub>(a, sa, b, sb, o, n);
    case kMul: return bin_row<kMul>(a, sa, b, sb, o, n);
    case kDiv: return bin_row<kDiv>(a, sa, b, sb, o, n);
    case kPow: return bin_row<kPow>(a, sa, b, sb, o, n);
    case kMax: return bin_row<kMax>(a, sa, b, sb, o, n);
    default: return bin_row<kMin>(a, sa, b, sb, o, n);
  }
}

}  // namespace

void exp_inplace_fp32(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + W::kWidth <= n; i += W::kWidth) W::store(x + i, exp_v(W::load(x + i)));
  if (i < n) W::store_n(x + i, exp_v(W::load_n(x + i, n - i)), n - i);
}

void round_to_dtype(float* x, int64_t n, mil::DType t, const ExecCtx& ctx) {
  if (t == mil::DType::kFp32) return;
  const int64_t chunk = 1 << 14, nc = (n + chunk - 1) / chunk;
  par_for(ctx, nc, n > kParMin, [&](int64_t c) { round_range(x + c * chunk, std::min(chunk, n - c * chunk), t); });
}

void softmax_rows(float* x, int64_t rows, int64_t len, const ExecCtx& ctx) {
  par_for(ctx, rows, rows * len > kParMin, [&](int64_t r) {
    float* row = x + r * len;
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j < len; ++j) row[j] -= mx;
    exp_inplace_fp32(row, len);
    float sum = 0.0f;
    for (int64_t j = 0; j < len; ++j) sum += row[j];
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < len; ++j) row[j] *= inv;
    round_fp16_inplace(row, static_cast<size_t>(len));
  });
}

// ---- layout ---------------------------------------------------------------------------------------
void k_copy(const Step& s, const ExecCtx& ctx) {
  std::memcpy(s.out, s.in[0], static_cast<size_t>(s.out_n) * sizeof(float));
  if (s.iv.empty() || s.iv[0] != 0) round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
}

// iv: rank, shape[rank], in_strides[rank], base. Output contiguous in `shape` order.
void k_strided(const Step& s, const ExecCtx& ctx) {
  const int64_t rank = s.iv[0];
  const int64_t* shape = s.iv.data() + 1;
  const int64_t* st = shape + rank;
  const int64_t base = st[rank];
  const int64_t inner = shape[rank - 1], ist = st[rank - 1];
  const int64_t rows = s.out_n / std::max<int64_t>(1, inner);
  const float* in = s.in[0] + base;
  par_for(ctx, rows, s.out_n > kParMin, [&](int64_t r) {
    int64_t off = 0, rem = r;
    for (int64_t d = rank - 2; d >= 0; --d) {
      off += (rem % shape[d]) * st[d];
      rem /= shape[d];
    }
    float* o = s.out + r * inner;
    const float* ip = in + off;
    if (ist == 1) std::memcpy(o, ip, static_cast<size_t>(inner) * sizeof(float));
    else
      for (int64_t i = 0; i < inner; ++i) o[i] = ip[i * ist];
  });
}

// iv: n_inputs, outer, chunk_0..chunk_{n-1} (elements each input contributes per outer index).
void k_concat(const Step& s, const ExecCtx& ctx) {
  const int64_t n = s.iv[0], outer = s.iv[1];
  int64_t row = 0;
  for (int64_t i = 0; i < n; ++i) row += s.iv[2 + i];
  par_for(ctx, outer, s.out_n > kParMin, [&](int64_t o) {
    float* dst = s.out + o * row;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = s.iv[2 + i];
      std::memcpy(dst, s.in[static_cast<size_t>(i)] + o * c, static_cast<size_t>(c) * sizeof(float));
      dst += c;
    }
  });
}

// ---- elementwise ----------------------------------------------------------------------------------
// iv: op, rank, shape[rank], sa[rank], sb[rank] (broadcast strides, 0 on broadcast dims).
void k_binary(const Step& s, const ExecCtx& ctx) {
  const int64_t op = s.iv[0], rank = s.iv[1];
  const int64_t* shape = s.iv.data() + 2;
  const int64_t* sa = shape + rank;
  const int64_t* sb = sa + rank;
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
  const int64_t op = s.iv[0], n = s.out_n, chunk = 4096, nc = (n + chunk - 1) / chunk;
  par_for(ctx, nc, n > kParMin / 4, [&](int64_t c) {
    const int64_t b = c * chunk, e = std::min(n, b + chunk);
    for (int64_t i = b; i < e; ++i) s.out[i] = apply_un(op, s.in[0][i]);
    round_range(s.out + b, e - b, s.out_dtype);
  });
}

// cast to fp16/fp32 rounds to nearest even; to integer types truncates toward zero and saturates.
// iv: qmin, qmax (integer targets only).
void k_cast(const Step& s, const ExecCtx& ctx) {
  if (mil::is_float(s.out_dtype)) {
    std::memcpy(s.out, s.in[0], static_cast<size_t>(s.out_n) * sizeof(float));
    round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
    return;
  }
  const float lo = static_cast<float>(s.iv[0]), hi = static_cast<float>(s.iv[1]);
  for (int64_t i = 0; i < s.out_n; ++i) {
    const float v = s.in[0][i];
    s.out[i] = std::isnan(v) ? 0.0f : std::clamp(std::trunc(v), lo, hi);
  }
}

// ---- softmax / reductions -------------------------------------------------------------------------
// iv: outer, len (softmax axis), inner
void k_softmax(const Step& s, const ExecCtx& ctx) {
  const int64_t outer = s.iv[0], len = s.iv[1], inner = s.iv[2];
  std::memcpy(s.out, s.in[0], static_cast<size_t>(s.out_n) * sizeof(float));
  if (inner == 1) return softmax_rows(s.out, outer, len, ctx);
  constexpr int64_t kCols = 256;
  const int64_t nchunk = (inner + kCols - 1) / kCols, tasks = outer * nchunk;
  par_for(ctx, tasks, s.out_n > kParMin, [&](int64_t t) {
    const int64_t o = t / nchunk, j0 = (t % nchunk) * kCols, w = std::min(kCols, inner - j0);
    float mx[kCols], sum[kCols];
    float* base = s.out + o * len * inner + j0;
    std::fill(mx, mx + w, -INFINITY);
    std::fill(sum, sum + w, 0.0f);
    for (int64_t a = 0; a < len; ++a)
      for (int64_t j = 0; j < w; ++j) mx[j] = std::max(mx[j], base[a * inner + j]);
    for (int64_t a = 0; a < len; ++a) {
      float* row = base + a * inner;
      for (int64_t j = 0; j < w; ++j) row[j] -= mx[j];
      exp_inplace_fp32(row, w);
      for (int64_t j = 0; j < w; ++j) sum[j] += row[j];
    }
    for (int64_t j = 0; j < w; ++j) sum[j] = 1.0f / sum[j];
    for (int64_t a = 0; a < len; ++a) {
      float* row = base + a * inner;
      for (int64_t j = 0; j < w; ++j) row[j] *= sum[j];
      round_fp16_inplace(row, static_cast<size_t>(w));
    }
  });
}

// iv: kind, outer, r (reduced extent), inner. Output [outer, inner]; fp32 accumulation over r in order.
void k_reduce(const Step& s, const ExecCtx& ctx) {
  const int64_t kind = s.iv[0], outer = s.iv[1], R = s.iv[2], inner = s.iv[3];
  const float* x = s.in[0];
  if (inner == 1) {
    par_for(ctx, outer, outer * R > kParMin, [&](int64_t o) {
      const float* p = x + o * R;
      float acc = kind == kRMax ? -INFINITY : 0.0f;
      for (int64_t r = 0; r < R; ++r) acc = kind == kRMax ? std::max(acc, p[r]) : acc + p[r];
      s.out[o] = kind == kMean ? acc / static_cast<float>(R) : acc;
    });
  } else {
    constexpr int64_t kCols = 512;
    const int64_t nchunk = (inner + kCols - 1) / kCols, tasks = outer * nchunk;
    par_for(ctx, tasks, outer * R * inner > kParMin, [&](int64_t t) {
      const int64_t o = t / nchunk, j0 = (t % nchunk) * kCols, w = std::min(kCols, inner - j0);
      float* dst = s.out + o * inner + j0;
      const float* p = x + o * R * inner + j0;
      std::fill(dst, dst + w, kind == kRMax ? -INFINITY : 0.0f);
      for (int64_t r = 0; r < R; ++r) {
        const float* row = p + r * inner;
        if (kind == kRMax)
          for (int64_t j = 0; j < w; ++j) dst[j] = std::max(dst[j], row[j]);
        else
          for (int64_t j = 0; j < w; ++j) dst[j] += row[j];
      }
      if (kind == kMean)
        for (int64_t j = 0; j < w; ++j) dst[j] /= static_cast<float>(R);
    });
  }
  round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
}

// ---- quantization ---------------------------------------------------------------------------------
// quantize: q = clamp(round_half_even(x / scale) + zp, qmin, qmax).
// iv: outer, len (quantization axis; 1 for per-tensor), inner, qmin, qmax; fv: scale[len], zp[len].
void k_quantize(const Step& s, const ExecCtx& ctx) {
  const int64_t outer = s.iv[0], len = s.iv[1], inner = s.iv[2];
  const float lo = static_cast<float>(s.iv[3]), hi = static_cast<float>(s.iv[4]);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < len; ++a) {
      const float sc = s.fv[static_cast<size_t>(a)], zp = s.fv[static_cast<size_t>(len + a)];
      const float* x = s.in[0] + (o * len + a) * inner;
      float* q = s.out + (o * len + a) * inner;
      for (int64_t j = 0; j < inner; ++j) {
        const float v = std::nearbyint(x[j] / sc) + zp;  // default rounding mode: nearest-even
        q[j] = std::isnan(v) ? zp : std::clamp(v, lo, hi);
      }
    }
}

// dequantize: y = (q - zp) * scale, rounded to the declared dtype. Same iv/fv layout as quantize.
void k_dequantize(const Step& s, const ExecCtx& ctx) {
  const int64_t outer = s.iv[0], len = s.iv[1], inner = s.iv[2];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < len; ++a) {
      const float sc = s.fv[static_cast<size_t>(a)], zp = s.fv[static_cast<size_t>(len + a)];
      const float* q = s.in[0] + (o * len + a) * inner;
      float* y = s.out + (o * len + a) * inner;
      for (int64_t j = 0; j < inner; ++j) y[j] = (q[j] - zp) * sc;
    }
  round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
}

}  // namespace anelab::emu
