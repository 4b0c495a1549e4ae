// Reductions and softmax: x viewed as [outer, len, inner] and reduced / normalised over len. fp32
// accumulation in a fixed order (results do not depend on the thread count), rounded once.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "framework/emulator/lower.h"

namespace anelab::emu {

using mil::Shape;

namespace {

enum ReduceKind : int { kSum, kRMax };

// ---- step functions --------------------------------------------------------------------------------------

void k_softmax(const Step& s, const ExecCtx& ctx) {
  const SoftmaxArgs& a = step_args<SoftmaxArgs>(s);
  const int64_t outer = a.outer, len = a.len, inner = a.inner;
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

// Output [outer, inner]; fp32 accumulation over len in order.
void k_reduce(const Step& s, const ExecCtx& ctx) {
  const ReduceArgs& a = step_args<ReduceArgs>(s);
  const int kind = a.kind;
  const int64_t outer = a.outer, R = a.len, inner = a.inner;
  const float* x = s.in[0];
  if (inner == 1) {
    par_for(ctx, outer, outer * R > kParMin, [&](int64_t o) {
      const float* p = x + o * R;
      float acc = kind == kRMax ? -INFINITY : 0.0f;
      for (int64_t r = 0; r < R; ++r) acc = kind == kRMax ? std::max(acc, p[r]) : acc + p[r];
      s.out[o] = acc;
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
    });
  }
  round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
}

// ---- lowering -------------------------------------------------------------------------------------
void lower_softmax(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const size_t a = static_cast<size_t>(std::get<mil::AxisParams>(r.params).axis);
  const ValueInfo& x = l.value(op, "x");
  const Shape& sh = x.type.shape;
  l.new_step(op, k_softmax, {&x}, SoftmaxArgs{prod(sh, 0, a), sh[a], prod(sh, a + 1, sh.size())});
}

template <int KIND>
void lower_reduce(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const auto& axes = std::get<mil::ReduceParams>(r.params).axes;  // sorted, unique
  ANELAB_CHECK(!axes.empty() && axes.back() - axes.front() + 1 == static_cast<int>(axes.size()), "emulator",
               l.where(op), ": reduced axes must be adjacent in the emulator");
  const ValueInfo& x = l.value(op, "x");
  const Shape& sh = x.type.shape;
  const size_t a0 = static_cast<size_t>(axes.front()), a1 = static_cast<size_t>(axes.back()) + 1;
  l.new_step(op, k_reduce, {&x}, ReduceArgs{KIND, prod(sh, 0, a0), prod(sh, a0, a1), prod(sh, a1, sh.size())});
}

constexpr LowerRule kReduceRules[] = {
    {"softmax", lower_softmax},
    {"reduce_sum", lower_reduce<kSum>},
    {"reduce_max", lower_reduce<kRMax>},
};

}  // namespace

std::span<const LowerRule> reduce_rules() { return kReduceRules; }

}  // namespace anelab::emu
