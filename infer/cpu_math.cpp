#include "infer/cpu_math.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "framework/core/error.h"
#include "framework/quant/qdot.h"
#include "framework/quant/qgemm.h"

namespace anelab::infer {

namespace {

namespace W = simd;
constexpr int64_t VW = W::kWidth;
constexpr int64_t kMinParallelWork = 1 << 16;

inline W::F32 load_w(const half_bits* p) { return W::load_h(p); }
inline W::F32 load_w(const float* p) { return W::load(p); }
inline W::F32 load_w_n(const half_bits* p, int64_t n) { return W::load_h_n(p, n); }
inline W::F32 load_w_n(const float* p, int64_t n) { return W::load_n(p, n); }

// exp (Cephes-style: n = round(x log2 e), r = x - n ln2 in two parts, degree-6 polynomial, scaled by 2^n
// in one rounding); ~1 ulp, exp(-inf) = 0, large x saturates to +inf.
inline W::F32 exp_v(W::F32 x) {
  x = W::min(W::max(x, W::set1(-104.0f)), W::set1(88.7f));
  const W::F32 n = W::round_even(W::mul(x, W::set1(1.44269504088896341f)));
  W::F32 r = W::fnmadd(n, W::set1(0.693359375f), x);
  r = W::fnmadd(n, W::set1(-2.12194440e-4f), r);
  W::F32 p = W::set1(1.9875691500e-4f);
  p = W::fmadd(p, r, W::set1(1.3981999507e-3f));
  p = W::fmadd(p, r, W::set1(8.3334519073e-3f));
  p = W::fmadd(p, r, W::set1(4.1665795894e-2f));
  p = W::fmadd(p, r, W::set1(1.6666665459e-1f));
  p = W::fmadd(p, r, W::set1(5.0000001201e-1f));
  p = W::fmadd(p, W::mul(r, r), W::add(r, W::set1(1.0f)));
  return W::ldexp(p, n);
}

// y[r] = dot(W[r, :], x) for rows [r, r1) in groups of R rows while whole groups fit, each group streamed once,
// kGemvNV vectors of columns per step per row (R x kGemvNV FMA chains in flight), software prefetch 2 KiB ahead on
// each row stream; returns the first row not done. Per row the order does not depend on R.
template <int R, typename T>
int64_t gemv_row_groups(const T* w, int64_t cols, const float* x, const float* bias, float* y, int64_t r, int64_t r1) {
  constexpr int NV = W::kGemvNV;
  constexpr int64_t kStep = NV * VW, kAhead = 2048 / sizeof(T);
  const int64_t main = cols / kStep * kStep;
  for (; r + R <= r1; r += R) {
    const T* wr[R];
    for (int i = 0; i < R; ++i) wr[i] = w + (r + i) * cols;
    W::F32 acc[R][NV];
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = W::zero();
    int64_t k = 0;
    for (; k < main; k += kStep) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) W::prefetch(wr[i] + k + kAhead);
      W::F32 xv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) xv[v] = W::load(x + k + v * VW);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) acc[i][v] = W::fmadd(load_w(wr[i] + k + v * VW), xv[v], acc[i][v]);
    }
    for (; k < cols; k += VW) {
      const W::F32 xv = W::load_n(x + k, cols - k);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][0] = W::fmadd(load_w_n(wr[i] + k, cols - k), xv, acc[i][0]);
    }
    for (int i = 0; i < R; ++i) {
      W::F32 s = acc[i][0];
      for (int v = 1; v < NV; ++v) s = W::add(s, acc[i][v]);
      y[r + i] = W::reduce_add(s) + (bias ? bias[r + i] : 0.0f);
    }
  }
  return r;
}

// y[r] = dot(W[r, :], x) for rows [r0, r1): gemv_row_groups of 4 rows (of 8 first where kGemvNV is 1: 8 chains in
// flight), the rest one row at a time.
template <typename T>
void gemv_rows(const T* w, int64_t cols, const float* x, const float* bias, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  if constexpr (W::kGemvNV == 1) r = gemv_row_groups<8>(w, cols, x, bias, y, r, r1);
  r = gemv_row_groups<4>(w, cols, x, bias, y, r, r1);
  for (; r < r1; ++r) {
    const T* w0 = w + r * cols;
    W::F32 a0 = W::zero();
    for (int64_t k = 0; k < cols; k += VW) a0 = W::fmadd(load_w_n(w0 + k, cols - k), W::load_n(x + k, cols - k), a0);
    y[r] = W::reduce_add(a0) + (bias ? bias[r] : 0.0f);
  }
}

void gemv_range(const GemvOut& o, const float* x, const quant::Q8Acts& acts, int64_t r0, int64_t r1) {
  if (is_quantized(o.w->type)) {
    const quant::BlockType bt = block_type(o.w->type);
    const int64_t row_bytes = o.w->cols / quant::block_info(bt).values * quant::block_info(bt).bytes;
    constexpr int64_t kT = quant::kTileRows;
    int64_t r = r0;
    for (const int64_t tr = std::min(r1, o.w->tiled_rows); r < tr;) {  // row tiles: whole ones, else via a tile's 16
      if (r % kT == 0 && r + kT <= tr) {
        const int64_t n = (tr - r) / kT;
        quant::dot_tiles(bt, o.w->tile(r / kT), n, acts, o.y + r);
        r += n * kT;
      } else {
        float y16[kT];
        quant::dot_tiles(bt, o.w->tile(r / kT), 1, acts, y16);
        const int64_t n = std::min(kT - r % kT, tr - r);
        std::copy_n(y16 + r % kT, n, o.y + r);
        r += n;
      }
    }
    if (r < r1) quant::dot_rows(bt, o.w->row_blocks(r), row_bytes, r1 - r, acts, o.y + r);
    if (o.bias)
      for (int64_t r = r0; r < r1; ++r) o.y[r] += o.bias[r];
  } else if (o.w->type == WType::kF16)
    gemv_rows(o.w->f16(), o.w->cols, x, o.bias, o.y, r0, r1);
  else
    gemv_rows(o.w->f32(), o.w->cols, x, o.bias, o.y, r0, r1);
}

// gemv_rows for n_tok inputs x [n_tok, cols] into y + t ldy. Rows in groups of kRowGroup (multiples of 4 rows),
// tokens in blocks of kTokBlock, columns in blocks of kColBlock; over a column block the group's rows run in register
// tiles of kTileR rows x kTileT tokens, each (row, token) with its own kGemvNV accumulator chains (kTileR kTileT
// kGemvNV accumulators, about 3/4 of the registers): per step each weight vector is loaded and converted once for the
// kTileT tokens and each input vector loaded once for the kTileR rows (a token tile's inputs over a column block,
// kTileT x kColBlock floats, 24 KiB on AVX-512 (4 x 6 tiles), stay in L1 while the group's row tiles run over them).
// The accumulators wait between column blocks in a small buffer. Rows past the last group of 4 as gemv_rows' tail. Per
// token and row the operations of gemv_rows in its order: the same bits.
// Measured (scripts/gemv_batch_bench, 896 x 4864 fp16, 1 thread, Zen 4 AVX-512): 8 tokens 2.1x faster than 8 single
// calls (the previous one-row kernel 1.24x: one input load per FMA). Converting a group's fp16 block once into an fp32
// L1 buffer for all the tokens measured slower than this conversion per token tile (1.3-1.7x); column blocks of 256
// slower than 1024 (1.95x). On AVX-512 kGemvNV 1 (tiles of 4 rows x 6 tokens, 8 tokens in 2 passes over a column
// block) against 2 (4 x 3, 3 passes), the Qwen2.5-0.5B-shaped fp16 engine step at 8 threads on the device's Xeon
// (scripts/gemv_batch_bench PROG=split, 2026-11-29): B = 8 30.6 -> 27.4 ms and 33.4 -> 30.3 ms in two sessions; 2 x 12
// tiles (one pass) 27.5 ms; on the dev box's Zen 4 (1 thread, 896 x 4864 in cache) 4 x 6 is 8 % slower than 4 x 3.
// Software prefetch: the first token tile over a column block streams the block 2 on (the next row group's where the
// rows are one block wide, as in all but the FFN down matrix) into L2, so the weights arrive while the tiles compute
// (gemv_rows' 2 KiB ahead along each row lands in the group's own next rows when a row is 896 fp16 values). Device
// Xeon, same session (PROG=split, f16, 8 threads, 2026-11-29 16:48, two rounds each): B = 8 step 34.2, 36.1 ms with
// gemv_rows' prefetch; 30.3, 31.1 with 2 blocks on into L2; 1 block on into L2 32.6, 30.8, into L1 30.4, 32.8; 4
// blocks on into L2 30.8, 32.5; the server's 8 clients / 1 at f16 went from 3.49, 3.95 to 4.21, 4.19. The blocks 2 on
// are another worker's where the pool's chunk ends within 2 blocks (both row groups of an o chunk, 2 of the 2-4 of a
// q/k/v one). Bounding the prefetch by the chunk (gemv_batch passing its end) did not pay, device Xeon, one call
// (2026-11-29 17:35, interleaved with this code, B = 8 means): with gemv_rows' 2 KiB along each row where the chunk
// ends (3 runs) q/k/v -3 %, o -8 %, but gate/up +9 %, head +10 %, step +13 % (its object code has two branches and a
// jump more per step in the hot loop); with no prefetch there (2 runs) q/k/v -7 %, o -4 %, the others -4 to -7 %, step
// -3 %, within the machine's spread (steps of this code 24.4-32.0 ms in the same call).
template <typename T>
void gemv_rows_tokens(const T* w, int64_t rows, int64_t cols, const float* x, int64_t n_tok, const float* bias,
                      float* y, int64_t ldy, int64_t r0, int64_t r1) {
  constexpr int NV = W::kGemvNV;
  constexpr int kTileR = W::kRegs >= 32 && NV <= 2 ? 4 : 2;  // divides 4: the 4-row groups hold whole tiles
  constexpr int kTileT = std::max(1, W::kRegs * 3 / 4 / (kTileR * NV));
  constexpr int64_t kStep = NV * VW, kRowGroup = 8, kColBlock = 1024, kTokBlock = 4 * kTileT;
  static_assert(kColBlock % kStep == 0 && kRowGroup % kTileR == 0);
  constexpr int64_t kPfAhead = 2;  // blocks on (see the prefetch below)
  const int64_t main = cols / kStep * kStep, grouped = r0 + (r1 - r0) / 4 * 4;
  const int64_t ncb = (main + kColBlock - 1) / kColBlock;  // column blocks per row group
  W::F32 saved[kRowGroup][kTokBlock][NV];                  // the accumulators between column blocks
  for (int64_t g = r0; g < grouped; g += kRowGroup) {
    const int64_t ng = std::min(kRowGroup, grouped - g);  // a multiple of 4
    for (int64_t tb = 0; tb < n_tok; tb += kTokBlock) {
      const int64_t nb = std::min(kTokBlock, n_tok - tb);
      for (int64_t i = 0; i < ng; ++i)
        for (int64_t t = 0; t < kTokBlock; ++t)
          for (int v = 0; v < NV; ++v) saved[i][t][v] = W::zero();
      for (int64_t kb = 0; kb < main; kb += kColBlock) {
        const int64_t ke = std::min(main, kb + kColBlock);
        // The block (row group g_next, columns from kb_next) kPfAhead blocks on in this loop's order (past r1 too, up
        // to the matrix's last rows: the caller's next rows), streamed into L2 by the first token tile's steps.
        const int64_t c_next = (g - r0) / kRowGroup * ncb + kb / kColBlock + kPfAhead;
        const int64_t g_next = r0 + c_next / ncb * kRowGroup, kb_next = c_next % ncb * kColBlock;
        for (int64_t t0 = 0; t0 < nb; t0 += kTileT) {
          const int nt = static_cast<int>(std::min<int64_t>(kTileT, nb - t0));
          const float* xt = x + (tb + t0) * cols;
          for (int64_t i0 = 0; i0 < ng; i0 += kTileR) {
            const T* wr = w + (g + i0) * cols;  // row i0 + i at wr + i cols
            // its row i0 + i at column kb_next + k - kb: pf + i cols + k (a row past it, at most, where the block is
            // narrower than this one: so the rows below the matrix's last one)
            const T* pf = t0 == 0 && g_next + i0 + kTileR < rows ? w + (g_next + i0) * cols + kb_next - kb : nullptr;
            W::F32 acc[kTileR][kTileT][NV];
#pragma GCC unroll 4
            for (int i = 0; i < kTileR; ++i)
#pragma GCC unroll 16
              for (int t = 0; t < kTileT; ++t)
#pragma GCC unroll 8
                for (int v = 0; v < NV; ++v) acc[i][t][v] = saved[i0 + i][t0 + t][v];
            for (int64_t k = kb; k < ke; k += kStep) {
              if (pf)
#pragma GCC unroll 4
                for (int i = 0; i < kTileR; ++i) W::prefetch_l2(pf + i * cols + k);
#pragma GCC unroll 8
              for (int v = 0; v < NV; ++v) {
                W::F32 wv[kTileR];
#pragma GCC unroll 4
                for (int i = 0; i < kTileR; ++i) wv[i] = load_w(wr + i * cols + k + v * VW);
#pragma GCC unroll 16
                for (int t = 0; t < kTileT; ++t)
                  if (t < nt) {
                    // in a register for the kTileR FMAs (as their memory operand it would be loaded kTileR times)
                    const W::F32 xv = W::in_reg(W::load(xt + t * cols + k + v * VW));
#pragma GCC unroll 4
                    for (int i = 0; i < kTileR; ++i) acc[i][t][v] = W::fmadd(wv[i], xv, acc[i][t][v]);
                  }
              }
            }
#pragma GCC unroll 4
            for (int i = 0; i < kTileR; ++i)
#pragma GCC unroll 16
              for (int t = 0; t < kTileT; ++t)
#pragma GCC unroll 8
                for (int v = 0; v < NV; ++v) saved[i0 + i][t0 + t][v] = acc[i][t][v];
          }
        }
      }
      for (int64_t i = 0; i < ng; ++i) {
        const int64_t r = g + i;
        const T* wr = w + r * cols;
        for (int64_t k = main; k < cols; k += VW) {
          const W::F32 wv = load_w_n(wr + k, cols - k);
          for (int64_t t = 0; t < nb; ++t)
            saved[i][t][0] = W::fmadd(wv, W::load_n(x + (tb + t) * cols + k, cols - k), saved[i][t][0]);
        }
        for (int64_t t = 0; t < nb; ++t) {
          W::F32 s = saved[i][t][0];
          for (int v = 1; v < NV; ++v) s = W::add(s, saved[i][t][v]);
          y[(tb + t) * ldy + r] = W::reduce_add(s) + (bias ? bias[r] : 0.0f);
        }
      }
    }
  }
  for (int64_t t = 0; t < n_tok; ++t)
    if (grouped < r1) gemv_rows(w, cols, x + t * cols, bias, y + t * ldy, grouped, r1);
}

// gemv_range for n_tok inputs (x [n_tok, cols], acts [n_tok] their quantized forms) into o.y + t o.w->rows: whole row
// tiles through quant::dot_tiles_tokens (each tile block read once for the tokens), the rest per token as gemv_range.
void gemv_range_tokens(const GemvOut& o, const float* x, int64_t cols, const quant::Q8Acts* acts, int64_t n_tok,
                       int64_t r0, int64_t r1) {
  const int64_t ldy = o.w->rows;
  if (is_quantized(o.w->type)) {
    const quant::BlockType bt = block_type(o.w->type);
    constexpr int64_t kT = quant::kTileRows;
    const int64_t tr = std::min(r1, o.w->tiled_rows);
    const int64_t first = std::min(tr, (r0 + kT - 1) / kT * kT), last = std::max(first, tr / kT * kT);
    if (first < last) {
      quant::dot_tiles_tokens(bt, o.w->tile(first / kT), (last - first) / kT, acts, n_tok, o.y + first, ldy);
      if (o.bias)
        for (int64_t t = 0; t < n_tok; ++t)
          for (int64_t r = first; r < last; ++r) o.y[t * ldy + r] += o.bias[r];
    }
    for (int64_t t = 0; t < n_tok; ++t) {  // partial tiles and untiled rows: per token
      const GemvOut ot{o.w, o.bias, o.y + t * ldy};
      if (r0 < first) gemv_range(ot, x + t * cols, acts[t], r0, first);
      if (std::max(r0, last) < r1) gemv_range(ot, x + t * cols, acts[t], std::max(r0, last), r1);
    }
  } else if (o.w->type == WType::kF16)
    gemv_rows_tokens(o.w->f16(), o.w->rows, cols, x, n_tok, o.bias, o.y, ldy, r0, r1);
  else
    gemv_rows_tokens(o.w->f32(), o.w->rows, cols, x, n_tok, o.bias, o.y, ldy, r0, r1);
}

// ---- GEMM: Y[t, r] = sum_k X[t, k] W[r, k] (+ bias[r]) ----
// Outer-product form: W is packed per (kNR-row panel, kc-column block) into fp32 [kc][kNR] (converted and
// transposed once, then reused from L1 by every token of the chunk), and a micro-kernel keeps an
// MR-token x kNR-row tile of Y in MR * kGemmNV vector registers, broadcasting X[t, k] from the
// (L2-resident) activation block. Each Y element accumulates over k in order in fp32.
constexpr int64_t kNV = W::kGemmNV, kNR = W::kGemmNR, kMR = W::kGemmMR, kKC = 256;

inline void widen(const half_bits* src, float* dst, int64_t n) { half_to_float(src, dst, static_cast<size_t>(n)); }
inline void widen(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

template <typename T>
void pack_panel(const T* w, int64_t cols, int64_t r0, int64_t nr, int64_t k0, int64_t kc, float* dst) {
  alignas(64) float row[kKC];
  for (int64_t j = 0; j < kNR; ++j) {
    if (j >= nr) {
      for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = 0.0f;
      continue;
    }
    widen(w + (r0 + j) * cols + k0, row, kc);
    for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = row[k];
  }
}

// Y[t, 0..nr) (+)= X[t, k0..k0+kc) . panel for t < MR. First k block: Y = acc + bias; later: Y += acc.
template <int MR>
void micro_kernel(int64_t kc, const float* x, int64_t ldx, const float* wp, float* y, int64_t ldy, int64_t nr,
                  bool first, const float* bias) {
  W::F32 c[MR][kNV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < kNV; ++v) c[i][v] = W::zero();
  for (int64_t k = 0; k < kc; ++k) {
    W::F32 wv[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) wv[v] = W::load(wp + k * kNR + v * VW);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const W::F32 xb = W::set1(x[i * ldx + k]);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) c[i][v] = W::fmadd(wv[v], xb, c[i][v]);
    }
  }
  for (int v = 0; v < kNV; ++v) {
    const int64_t n = nr - v * VW;
    const W::F32 b = first && bias ? W::load_n(bias + v * VW, n) : W::zero();
    for (int i = 0; i < MR; ++i) {
      float* yi = y + i * ldy + v * VW;
      W::store_n(yi, W::add(c[i][v], first ? b : W::load_n(yi, n)), n);
    }
  }
}

using KernelFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t, bool, const float*);
template <int... I>
constexpr std::array<KernelFn, sizeof...(I)> kernel_table(std::integer_sequence<int, I...>) {
  return {&micro_kernel<I + 1>...};
}
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kMR>{});

// Row panels [p0, p1) of Y (kNR rows each) for all n_tok tokens.
template <typename T>
void gemm_panels(const T* w, int64_t rows, int64_t cols, const float* x, int64_t n_tok, int64_t ldy, const float* bias,
                 float* y, int64_t p0, int64_t p1) {
  alignas(64) float packed[kKC * kNR];
  for (int64_t k0 = 0; k0 < cols; k0 += kKC) {
    const int64_t kc = std::min(kKC, cols - k0);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r0 = p * kNR, nr = std::min(kNR, rows - r0);
      pack_panel(w, cols, r0, nr, k0, kc, packed);
      for (int64_t t = 0; t < n_tok; t += kMR) {
        const int64_t mr = std::min(kMR, n_tok - t);
        kKernels[static_cast<size_t>(mr - 1)](kc, x + t * cols + k0, cols, packed, y + t * ldy + r0, ldy, nr, k0 == 0,
                                              bias ? bias + r0 : nullptr);
      }
    }
  }
}

}  // namespace

void gemv(ThreadPool& pool, std::initializer_list<GemvOut> outs, const float* x) {
  int64_t total = 0, work = 0;
  unsigned forms = 0;  // the activation forms the block types among outs read
  for (const auto& o : outs) {
    total += o.w->rows;
    work += o.w->rows * o.w->cols;
    if (is_quantized(o.w->type)) forms |= quant::acts_form(block_type(o.w->type));
  }
  // The caller's per-thread buffer (grows to the widest input once, then reused); the workers read it through
  // this reference (naming the thread_local inside the lambda would give each worker its own, empty one).
  thread_local quant::Q8Acts caller_acts;
  quant::Q8Acts& acts = caller_acts;
  if (forms) quant::quantize_acts(x, outs.begin()->w->cols, forms, acts);
  // Below ~64K multiply-adds a wake-up of the other worker costs more than it saves.
  auto body = [&](int64_t b, int64_t e) {
    int64_t base = 0;
    for (const auto& o : outs) {
      const int64_t lo = std::max(b, base), hi = std::min(e, base + o.w->rows);
      if (lo < hi) gemv_range(o, x, acts, lo - base, hi - base);
      base += o.w->rows;
    }
  };
  if (work < kMinParallelWork)
    body(0, total);
  else
    pool.parallel_for(total, quant::kTileRows, body);  // whole row tiles where the matrices' rows allow
}

void gemv_batch(ThreadPool& pool, std::initializer_list<GemvOut> outs, const float* x, int64_t n_tok) {
  if (n_tok == 1) return gemv(pool, outs, x);
  int64_t total = 0, work = 0;
  unsigned forms = 0;
  const int64_t cols = outs.begin()->w->cols;
  for (const auto& o : outs) {
    total += o.w->rows;
    work += o.w->rows * o.w->cols;
    if (is_quantized(o.w->type)) forms |= quant::acts_form(block_type(o.w->type));
  }
  // One activation buffer per token, the caller's (grown once to the most tokens and the widest input, then reused).
  thread_local std::vector<quant::Q8Acts> caller_acts;
  std::vector<quant::Q8Acts>& acts = caller_acts;
  if (static_cast<int64_t>(acts.size()) < n_tok) acts.resize(static_cast<size_t>(n_tok));
  if (forms)
    for (int64_t t = 0; t < n_tok; ++t) quant::quantize_acts(x + t * cols, cols, forms, acts[static_cast<size_t>(t)]);
  constexpr int64_t kBlock = 4 * quant::kTileRows;  // rows applied to every token in turn (a multiple of the tiles)
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t sb = b; sb < e; sb += kBlock) {
      const int64_t se = std::min(e, sb + kBlock);
      int64_t base = 0;
      for (const auto& o : outs) {
        const int64_t lo = std::max(sb, base), hi = std::min(se, base + o.w->rows);
        if (lo < hi) gemv_range_tokens(o, x, cols, acts.data(), n_tok, lo - base, hi - base);
        base += o.w->rows;
      }
    }
  };
  if (work < kMinParallelWork)
    body(0, total);
  else
    pool.parallel_for(total, quant::kTileRows, body);
}

void gemm(ThreadPool& pool, const Mat& w, const float* bias, const float* x, int64_t n_tok, float* y) {
  if (n_tok == 1) {
    gemv(pool, w, bias, x, y);
    return;
  }
  if (is_quantized(w.type)) {
    quant::gemm(pool, block_type(w.type), static_cast<const uint8_t*>(w.data), w.rows, w.cols, bias, x, n_tok, y,
                w.tiled_rows);
    return;
  }
  const int64_t panels = (w.rows + kNR - 1) / kNR;
  auto body = [&](int64_t b, int64_t e) {
    if (w.type == WType::kF16)
      gemm_panels(w.f16(), w.rows, w.cols, x, n_tok, w.rows, bias, y, b, e);
    else
      gemm_panels(w.f32(), w.rows, w.cols, x, n_tok, w.rows, bias, y, b, e);
  };
  if (w.rows * w.cols * n_tok < kMinParallelWork)
    body(0, panels);
  else
    pool.parallel_for(panels, 1, body);
}

float dot(const float* a, const float* b, int64_t n) {
  W::F32 acc = W::zero();
  for (int64_t k = 0; k < n; k += VW) acc = W::fmadd(W::load_n(a + k, n - k), W::load_n(b + k, n - k), acc);
  return W::reduce_add(acc);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const W::F32 av = W::set1(a);
  for (int64_t k = 0; k < n; k += VW)
    W::store_n(y + k, W::fmadd(av, W::load_n(x + k, n - k), W::load_n(y + k, n - k)), n - k);
}

float gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
float silu(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }

void exp_inplace(float* x, int64_t n) {
  for (int64_t k = 0; k < n; k += VW) W::store_n(x + k, exp_v(W::load_n(x + k, n - k)), n - k);
}

float exp_sub_sum(float* x, float sub, int64_t n) {
  const W::F32 s = W::set1(sub);
  W::F32 acc = W::zero();
  int64_t k = 0;
  for (; k + VW <= n; k += VW) {
    const W::F32 e = exp_v(W::sub(W::load(x + k), s));
    W::store(x + k, e);
    acc = W::add(acc, e);
  }
  if (k < n) {  // tail: stored lanes only, re-read with zeros beyond n
    W::store_n(x + k, exp_v(W::sub(W::load_n(x + k, n - k), s)), n - k);
    acc = W::add(acc, W::load_n(x + k, n - k));
  }
  return W::reduce_add(acc);
}

float max_of(const float* x, int64_t n) {
  W::F32 mx = W::set1(-INFINITY);
  int64_t k = 0;
  for (; k + VW <= n; k += VW) mx = W::max(mx, W::load(x + k));
  float m = W::reduce_max(mx);
  for (; k < n; ++k) m = m > x[k] ? m : x[k];
  return m;
}

// a = silu(a) * b = a b / (1 + exp(-a)).
void silu_mul(float* a, const float* b, int64_t n) {
  const W::F32 one = W::set1(1.0f);
  for (int64_t k = 0; k < n; k += VW) {
    const W::F32 v = W::load_n(a + k, n - k);
    const W::F32 d = W::add(one, exp_v(W::sub(W::zero(), v)));
    W::store_n(a + k, W::div(W::mul(v, W::load_n(b + k, n - k)), d), n - k);
  }
}

// a = silu(a) = a / (1 + exp(-a)).
void silu_inplace(float* a, int64_t n) {
  const W::F32 one = W::set1(1.0f);
  for (int64_t k = 0; k < n; k += VW) {
    const W::F32 v = W::load_n(a + k, n - k);
    W::store_n(a + k, W::div(v, W::add(one, exp_v(W::sub(W::zero(), v)))), n - k);
  }
}

// GELU (tanh form): 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
void gelu_tanh_inplace(float* a, int64_t n) {
  const W::F32 one = W::set1(1.0f), c0 = W::set1(-2.0f * 0.7978845608028654f), c1 = W::set1(0.044715f);
  for (int64_t k = 0; k < n; k += VW) {
    const W::F32 x = W::load_n(a + k, n - k);
    const W::F32 u = W::mul(c0, W::fmadd(W::mul(c1, x), W::mul(x, x), x));
    W::store_n(a + k, W::div(x, W::add(one, exp_v(u))), n - k);
  }
}

void mat_row(const Mat& m, int64_t row, float* out) {
  ANELAB_CHECK(row >= 0 && row < m.rows, "infer", "row ", row, " out of range [0, ", m.rows, ")");
  m.row_values(row, out);
}

}  // namespace anelab::infer
