// GEMM-based kernels of the emulator: conv (im2col or direct 1x1), batched matmul, and
// scaled_dot_product_attention. The GEMM is Eigen's cache-blocked kernel driven directly (sequential
// per task, packing buffers from per-thread workspaces allocated at compile time), with our own task
// split over (batch x m-tile x n-tile). Tile sizes and blocking depend only on the GEMM shape, so the
// fp32 accumulation order — and therefore every result bit — is independent of the thread count.

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/fp16.h"
#include "framework/emulator/plan.h"

namespace anelab::emu {
namespace {

using Eigen::Index;
namespace ei = Eigen::internal;

// Eigen level-3 blocking that uses caller-owned packing buffers (no allocation inside the product).
class FixedBlocking : public ei::level3_blocking<float, float> {
 public:
  FixedBlocking(Index mc, Index nc, Index kc, float* a, float* b) {
    this->m_mc = mc;
    this->m_nc = nc;
    this->m_kc = kc;
    this->m_blockA = a;
    this->m_blockB = b;
  }
};

template <int LO, int RO>
void eigen_tile(const float* a, Index lda, const float* b, Index ldb, float* c, Index ldc, Index m, Index n, Index k,
                FixedBlocking& bl) {
  ei::general_matrix_matrix_product<Index, float, LO, false, float, RO, false, Eigen::RowMajor, 1>::run(
      m, n, k, a, lda, b, ldb, c, 1, ldc, 1.0f, bl, nullptr);
}

void gemm_tile(const GemmPlan& g, const float* a, const float* b, float* c, Index m, Index n, FixedBlocking& bl) {
  for (Index i = 0; i < m; ++i) std::memset(c + i * g.ldc, 0, static_cast<size_t>(n) * sizeof(float));
  if (g.k == 0) return;
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (!g.ta && !g.tb) eigen_tile<R, R>(a, g.lda, b, g.ldb, c, g.ldc, m, n, g.k, bl);
  else if (!g.ta && g.tb) eigen_tile<R, C>(a, g.lda, b, g.ldb, c, g.ldc, m, n, g.k, bl);
  else if (g.ta && !g.tb) eigen_tile<C, R>(a, g.lda, b, g.ldb, c, g.ldc, m, n, g.k, bl);
  else eigen_tile<C, C>(a, g.lda, b, g.ldb, c, g.ldc, m, n, g.k, bl);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void plan_gemm(GemmPlan& g) {
  const int64_t batch = static_cast<int64_t>(g.a_off.size());
  g.tile_m = std::max<int64_t>(1, std::min<int64_t>(256, g.m));
  g.tile_n = std::max<int64_t>(1, std::min<int64_t>(512, g.n));
  // Enough tasks to keep a few threads busy; decided from the shape only (determinism).
  while (batch * ceil_div(g.m, g.tile_m) * ceil_div(g.n, g.tile_n) < 8 && g.tile_m > 32)
    g.tile_m = std::max<int64_t>(32, ceil_div(g.tile_m / 2, 16) * 16);
  // The RowMajor product runs as the ColMajor product C^T = B^T A^T: rows <-> cols swap.
  Index kc = std::max<int64_t>(1, g.k), mc = g.tile_n, nc = g.tile_m;
  ei::computeProductBlockingSizes<float, float, 1, Index>(kc, mc, nc, 1);
  g.kc = kc;
  g.mc = mc;
  g.nc = nc;
  g.ws_a = static_cast<size_t>(kc * mc) + 64;
  g.ws_b = static_cast<size_t>(kc * nc) + 64;
}

void run_gemm(const GemmPlan& g, const float* a, const float* b, float* c, const ExecCtx& ctx) {
  const int64_t batch = static_cast<int64_t>(g.a_off.size());
  const int64_t tm = ceil_div(g.m, g.tile_m), tn = ceil_div(g.n, g.tile_n), tasks = batch * tm * tn;
  // Static contiguous partition of the tiles over the workers; each tile is computed by one worker with
  // its own packing workspace, so results do not depend on the thread count.
  par_workers(ctx, tasks, [&](int tid, int64_t t) {
    const int64_t bi = t / (tm * tn), r = t % (tm * tn);
    const int64_t i0 = (r / tn) * g.tile_m, j0 = (r % tn) * g.tile_n;
    const int64_t mm = std::min(g.tile_m, g.m - i0), nn = std::min(g.tile_n, g.n - j0);
    const float* at = a + g.a_off[bi] + (g.ta ? i0 : i0 * g.lda);
    const float* bt = b + g.b_off[bi] + (g.tb ? j0 * g.ldb : j0);
    float* ct = c + g.c_off[bi] + i0 * g.ldc + j0;
    FixedBlocking bl(g.mc, g.nc, g.kc, ctx.ws_a[tid], ctx.ws_b[tid]);
    gemm_tile(g, at, bt, ct, mm, nn, bl);
    if (g.round_fp16)
      for (int64_t i = 0; i < mm; ++i) round_fp16_inplace(ct + i * g.ldc, static_cast<size_t>(nn));
  });
}

// ---- conv -----------------------------------------------------------------------------------------
// iv: N, Cin, H, W, Cout, kh, kw, groups, sh, sw, dh, dw, pad_top, pad_left, Ho, Wo, direct, has_bias
// in: x [N, Cin, H, W], weight [Cout, Cin/groups, kh, kw], (bias [Cout]); scratch: im2col columns.
void k_conv(const Step& s, const ExecCtx& ctx) {
  const int64_t* p = s.iv.data();
  const int64_t N = p[0], Cin = p[1], H = p[2], W = p[3], Cout = p[4], kh = p[5], kw = p[6];
  const int64_t sh = p[8], sw = p[9], dh = p[10], dw = p[11], pt = p[12], pl = p[13], Ho = p[14], Wo = p[15];
  const bool direct = p[16] != 0, has_bias = p[17] != 0;
  const float* x = s.in[0];
  const float* cols = x;
  if (!direct) {
    // cols[(n*Cin + c)*kh*kw + ki*kw + kj][oh*Wo + ow] = x[n, c, oh*sh - pt + ki*dh, ow*sw - pl + kj*dw]
    const int64_t rows = N * Cin * kh * kw;
    float* col = s.scratch;
    par_for(ctx, rows, rows * Ho * Wo > 32768, [&](int64_t row) {
      const int64_t kj = row % kw, ki = (row / kw) % kh, nc = row / (kw * kh);
      const float* xp = x + nc * H * W;
      float* dst = col + row * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t ih = oh * sh - pt + ki * dh;
        float* d = dst + oh * Wo;
        if (ih < 0 || ih >= H) {
          std::fill(d, d + Wo, 0.0f);
          continue;
        }
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t iw = ow * sw - pl + kj * dw;
          d[ow] = (iw >= 0 && iw < W) ? xp[ih * W + iw] : 0.0f;
        }
      }
    });
    cols = col;
  }
  run_gemm(s.gemms[0], s.in[1], cols, s.out, ctx);
  if (has_bias) {
    const float* bias = s.in[2];
    const int64_t hw = Ho * Wo;
    par_for(ctx, N * Cout, N * Cout * hw > 32768, [&](int64_t nc) {
      float* o = s.out + nc * hw;
      const float b = bias[nc % Cout];
      for (int64_t i = 0; i < hw; ++i) o[i] += b;
      if (s.out_dtype == mil::DType::kFp16) round_fp16_inplace(o, static_cast<size_t>(hw));
    });
  }
}

void k_matmul(const Step& s, const ExecCtx& ctx) { run_gemm(s.gemms[0], s.in[0], s.in[1], s.out, ctx); }

// ---- scaled_dot_product_attention -------------------------------------------------------------------
// scores = fp16(Q K^T * (1/sqrt(E))) per batch; P = fp16(softmax_fp32(scores)); out = fp16(P V).
// iv: batch, L, S; fv: scale. scratch: [batch, L, S].
void k_sdpa(const Step& s, const ExecCtx& ctx) {
  const int64_t batch = s.iv[0], L = s.iv[1], S = s.iv[2];
  const float scale = s.fv[0];
  run_gemm(s.gemms[0], s.in[0], s.in[1], s.scratch, ctx);
  const int64_t n = batch * L * S;
  par_for(ctx, batch * L, n > 65536, [&](int64_t r) {
    float* row = s.scratch + r * S;
    for (int64_t j = 0; j < S; ++j) row[j] *= scale;
    round_fp16_inplace(row, static_cast<size_t>(S));
  });
  softmax_rows(s.scratch, batch * L, S, ctx);
  run_gemm(s.gemms[1], s.scratch, s.in[2], s.out, ctx);
}

}  // namespace anelab::emu
