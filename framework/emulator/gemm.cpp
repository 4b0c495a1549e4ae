// The emulator's GEMM, shared by conv, matmul and scaled_dot_product_attention (linear.cpp), written
// against the SIMD layer (framework/simd): packed
// panels (A: kGemmMR rows interleaved per k, B: kGemmNR columns per k), a register-blocked micro-kernel
// (AVX-512 12x32, AVX2 6x16, NEON 6x16, scalar 4x8), and an epilogue (alpha, bias, fp16 rounding)
// applied in registers on the last k block. Work is split into (batch x m-tile x n-tile) tasks over the
// thread pool; every C element accumulates over k in order (one fused multiply-add per k) in kc blocks
// that depend only on the GEMM shape, so every result bit is independent of the task split, the thread
// count and the micro-tile shape, hence of the host architecture. Const A operands (conv weights) are
// packed once at compile time.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "framework/core/fp16.h"
#include "framework/emulator/plan.h"

namespace anelab::emu {
namespace {

namespace W = simd;
constexpr int64_t MR = kGemmMR, NR = kGemmNR, NV = W::kGemmNV, VW = W::kWidth;
static_assert(NR == NV * VW, "micro-tile columns = vectors x lanes");

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

struct Epilogue {
  float alpha = 1.0f;
  bool scale = false, round = false;
  const float* bias = nullptr;  // per row of this micro-tile, or nullptr
};

// C[R x NR] (first `cols` columns) (+)= A panel [kc][MR] x B panel [kc][NR]; `first`: start from 0
// instead of C; epi != nullptr on the last k block.
template <int R>
void micro_kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int64_t cols, bool first,
                  const Epilogue* epi) {
  W::F32 acc[R][NV];
  const bool full = cols >= NR;
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      acc[i][v] = first  ? W::zero()
                  : full ? W::load(c + i * ldc + v * VW)
                         : W::load_n(c + i * ldc + v * VW, cols - v * VW);
  for (int64_t k = 0; k < kc; ++k) {
    W::F32 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = W::load(bp + v * VW);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const W::F32 a = W::set1(ap[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = W::fmadd(a, b[v], acc[i][v]);
    }
    ap += MR;
    bp += NR;
  }
  if (epi) {
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if (epi->scale) acc[i][v] = W::mul(acc[i][v], W::set1(epi->alpha));
        if (epi->bias) acc[i][v] = W::add(acc[i][v], W::set1(epi->bias[i]));
        if (epi->round) acc[i][v] = W::round_fp16(acc[i][v]);
      }
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (full)
        W::store(c + i * ldc + v * VW, acc[i][v]);
      else
        W::store_n(c + i * ldc + v * VW, acc[i][v], cols - v * VW);
    }
}

using MicroKernel = void (*)(int64_t, const float*, const float*, float*, int64_t, int64_t, bool, const Epilogue*);
template <int... I>
constexpr std::array<MicroKernel, sizeof...(I)> micro_table(std::integer_sequence<int, I...>) {
  return {&micro_kernel<I + 1>...};
}
constexpr auto kMicro = micro_table(std::make_integer_sequence<int, MR>{});  // kMicro[r - 1]: r rows

constexpr int64_t kTB = 16;  // transpose block (k values moved per row at a time)

// Packs rows [0, rows) x k [k0, k0 + kcb) of op(A) into ceil(rows / MR) panels [kcb][MR] (zero padded).
void pack_a(const float* a, int64_t lda, bool ta, int64_t rows, int64_t k0, int64_t kcb, float* dst) {
  for (int64_t r0 = 0; r0 < rows; r0 += MR) {
    const int64_t rr = std::min(MR, rows - r0);
    float* d = dst + (r0 / MR) * MR * kcb;
    if (ta) {  // element (i, k) at a[k * lda + i]: MR contiguous floats per k
      for (int64_t k = 0; k < kcb; ++k) {
        const float* src = a + (k0 + k) * lda + r0;
        float* dk = d + k * MR;
        for (int64_t i = 0; i < rr; ++i) dk[i] = src[i];
        for (int64_t i = rr; i < MR; ++i) dk[i] = 0.0f;
      }
    } else {  // element (i, k) at a[i * lda + k]: kTB k at a time, transposed through a block
      int64_t k = 0;
      for (; k + kTB <= kcb; k += kTB) {
        alignas(64) float t[MR][kTB];
        for (int64_t i = 0; i < MR; ++i)
          for (int64_t kk = 0; kk < kTB; kk += VW)
            W::store(t[i] + kk, i < rr ? W::load(a + (r0 + i) * lda + k0 + k + kk) : W::zero());
        for (int64_t kk = 0; kk < kTB; ++kk)
          for (int64_t i = 0; i < MR; ++i) d[(k + kk) * MR + i] = t[i][kk];
      }
      for (; k < kcb; ++k)
        for (int64_t i = 0; i < MR; ++i) d[k * MR + i] = i < rr ? a[(r0 + i) * lda + k0 + k] : 0.0f;
    }
  }
}

// Packs k [k0, k0 + kcb) x columns [0, cols) of op(B) into ceil(cols / NR) panels [kcb][NR] (zero padded).
void pack_b(const float* b, int64_t ldb, bool tb, int64_t cols, int64_t k0, int64_t kcb, float* dst) {
  for (int64_t c0 = 0; c0 < cols; c0 += NR) {
    const int64_t cc = std::min(NR, cols - c0);
    float* d = dst + (c0 / NR) * NR * kcb;
    if (!tb) {  // element (k, j) at b[k * ldb + j]
      for (int64_t k = 0; k < kcb; ++k) {
        const float* src = b + (k0 + k) * ldb + c0;
        if (cc == NR)
          for (int64_t v = 0; v < NV; ++v) W::store(d + k * NR + v * VW, W::load(src + v * VW));
        else
          for (int64_t v = 0; v < NV; ++v) W::store(d + k * NR + v * VW, W::load_n(src + v * VW, cc - v * VW));
      }
    } else {  // element (k, j) at b[j * ldb + k]: kTB k at a time, transposed through a block
      int64_t k = 0;
      for (; k + kTB <= kcb; k += kTB) {
        alignas(64) float t[NR][kTB];
        for (int64_t j = 0; j < NR; ++j)
          for (int64_t kk = 0; kk < kTB; kk += VW)
            W::store(t[j] + kk, j < cc ? W::load(b + (c0 + j) * ldb + k0 + k + kk) : W::zero());
        for (int64_t kk = 0; kk < kTB; ++kk)
          for (int64_t j = 0; j < NR; ++j) d[(k + kk) * NR + j] = t[j][kk];
      }
      for (; k < kcb; ++k)
        for (int64_t j = 0; j < NR; ++j) d[k * NR + j] = j < cc ? b[(c0 + j) * ldb + k0 + k] : 0.0f;
    }
  }
}

// One task: C tile [mm x nn] at c (row stride ldc). `apacked`: this batch's A in the compile-time packed
// layout (k block at k0 starts at k0 * mpad; the tile's rows start at panel row0 / MR), or nullptr to pack
// from `a`.
void gemm_task(const GemmPlan& g, const float* a, const float* b, float* c, int64_t mm, int64_t nn,
               const float* apacked, int64_t mpad, int64_t row0, const float* bias, float* wa, float* wb) {
  const int64_t K = g.k;
  if (K == 0) {
    for (int64_t i = 0; i < mm; ++i)
      for (int64_t j = 0; j < nn; ++j) {
        float v = bias ? bias[i] : 0.0f;
        c[i * g.ldc + j] = g.round_fp16 ? round_fp16(v) : v;
      }
    return;
  }
  Epilogue epi;
  epi.alpha = g.alpha;
  epi.scale = g.alpha != 1.0f;
  epi.round = g.round_fp16;
  for (int64_t k0 = 0; k0 < K; k0 += g.kc) {
    const int64_t kcb = std::min(g.kc, K - k0);
    const bool first = k0 == 0, last = k0 + kcb == K;
    pack_b(b, g.ldb, g.tb, nn, k0, kcb, wb);
    const float* ap = apacked ? apacked + k0 * mpad + row0 * kcb : wa;
    if (!apacked) pack_a(a, g.lda, g.ta, mm, k0, kcb, wa);
    for (int64_t j0 = 0; j0 < nn; j0 += NR) {
      const float* bp = wb + (j0 / NR) * NR * kcb;
      for (int64_t i0 = 0; i0 < mm; i0 += MR) {
        const int64_t r = std::min(MR, mm - i0);
        epi.bias = bias ? bias + i0 : nullptr;
        kMicro[static_cast<size_t>(r - 1)](kcb, ap + (i0 / MR) * MR * kcb, bp, c + i0 * g.ldc + j0, g.ldc, nn - j0,
                                           first, last ? &epi : nullptr);
      }
    }
  }
}

}  // namespace

void plan_gemm(GemmPlan& g) {
  const int64_t batch = static_cast<int64_t>(g.a_off.size());
  // k blocks of ~256 (equal sizes); they fix the accumulation order together with the shape.
  const int64_t nkb = std::max<int64_t>(1, ceil_div(g.k, 256));
  g.kc = std::max<int64_t>(1, ceil_div(g.k, nkb));
  g.tile_n = std::max<int64_t>(1, std::min<int64_t>(512, g.n));
  // An even number of m tiles of ~256 rows (multiples of MR); more, smaller tiles when there are few tasks.
  int64_t ntm = ceil_div(g.m, 256);
  if (ntm > 1 && ntm % 2) ++ntm;
  g.tile_m = std::max(MR, round_up(ceil_div(g.m, ntm), MR));
  while (batch * ceil_div(g.m, g.tile_m) * ceil_div(g.n, g.tile_n) < 8 && g.tile_m > 4 * MR)
    g.tile_m = round_up(g.tile_m / 2, MR);
  g.ws_a = static_cast<size_t>(g.tile_m * g.kc) + 64;
  g.ws_b = static_cast<size_t>(round_up(g.tile_n, NR) * g.kc) + 64;
}

void prepack_gemm_a(GemmPlan& g, const float* a) {
  const int64_t mpad = round_up(g.m, MR), per = mpad * g.k;
  std::vector<int64_t> distinct;
  g.a_packed_off.clear();
  for (int64_t off : g.a_off) {
    auto it = std::find(distinct.begin(), distinct.end(), off);
    g.a_packed_off.push_back(per * (it - distinct.begin()));
    if (it == distinct.end()) distinct.push_back(off);
  }
  g.a_packed = AlignedFloats(static_cast<size_t>(per) * distinct.size() + 16);
  for (size_t d = 0; d < distinct.size(); ++d)
    for (int64_t k0 = 0; k0 < g.k; k0 += g.kc) {
      const int64_t kcb = std::min(g.kc, g.k - k0);
      pack_a(a + distinct[d], g.lda, g.ta, g.m, k0, kcb, g.a_packed.data() + per * static_cast<int64_t>(d) + k0 * mpad);
    }
}

void run_gemm(const GemmPlan& g, const float* a, const float* b, float* c, const ExecCtx& ctx, const float* bias) {
  const int64_t batch = static_cast<int64_t>(g.a_off.size());
  const int64_t tm = ceil_div(g.m, g.tile_m), tn = ceil_div(g.n, g.tile_n), tasks = batch * tm * tn;
  const int64_t mpad = round_up(g.m, MR);
  const bool packed = g.a_packed.size() > 0;
  par_workers(ctx, tasks, [&](int tid, int64_t t) {
    const int64_t bi = t / (tm * tn), r = t % (tm * tn);
    const int64_t i0 = (r / tn) * g.tile_m, j0 = (r % tn) * g.tile_n;
    const int64_t mm = std::min(g.tile_m, g.m - i0), nn = std::min(g.tile_n, g.n - j0);
    const float* at = a + g.a_off[bi] + (g.ta ? i0 : i0 * g.lda);
    const float* bt = b + g.b_off[bi] + (g.tb ? j0 * g.ldb : j0);
    float* ct = c + g.c_off[bi] + i0 * g.ldc + j0;
    const float* ap = packed ? g.a_packed.data() + g.a_packed_off[bi] : nullptr;
    const float* bs = bias && !g.bias_off.empty() ? bias + g.bias_off[bi] + i0 : nullptr;
    gemm_task(g, at, bt, ct, mm, nn, ap, mpad, i0, bs, ctx.ws_a[tid], ctx.ws_b[tid]);
  });
}

}  // namespace anelab::emu
