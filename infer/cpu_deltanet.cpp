#include "infer/cpu_deltanet.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "framework/simd/simd.h"
#include "infer/cpu_math.h"

namespace anelab::infer {

// The file-local helpers in a namespace of their own: the library is a unity build.
namespace deltanet_detail {
namespace {

constexpr int64_t kW = simd::kWidth;
constexpr int kMR = simd::kGemmMR, kNV = simd::kGemmNV;  // micro-tile: kMR rows x kNV vectors of columns
constexpr int64_t kNB = kNV * kW;                        // columns per micro-tile

void check_shape(const DeltaShape& s) {
  if (s.n_k_heads <= 0 || s.n_v_heads <= 0 || s.dk <= 0 || s.dv <= 0 || s.n_v_heads % s.n_k_heads != 0)
    fail("deltanet", "shape: n_k_heads ", s.n_k_heads, ", n_v_heads ", s.n_v_heads, ", dk ", s.dk, ", dv ", s.dv,
         " (all > 0, n_v_heads a multiple of n_k_heads)");
}

// One micro-tile of C [MR, cols] (+)= A [MR, k] B [k, cols], row strides lda / ldb / ldc; cols <= kNB, Tail: cols
// may be < kNB (masked loads and stores). Each C value is the fp32 FMA chain over p = 0..k-1 in order.
template <int MR, bool Tail>
void tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t k, int64_t cols,
          bool accumulate) {
  simd::F32 acc[MR][kNV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < kNV; ++v)
      acc[r][v] = !accumulate ? simd::zero()
                  : Tail      ? simd::load_n(C + r * ldc + v * kW, cols - v * kW)
                              : simd::load(C + r * ldc + v * kW);
  for (int64_t p = 0; p < k; ++p) {
    simd::F32 b[kNV];
    for (int v = 0; v < kNV; ++v)
      b[v] = Tail ? simd::load_n(B + p * ldb + v * kW, cols - v * kW) : simd::load(B + p * ldb + v * kW);
    for (int r = 0; r < MR; ++r) {
      const simd::F32 a = simd::set1(A[r * lda + p]);
      for (int v = 0; v < kNV; ++v) acc[r][v] = simd::fmadd(a, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < kNV; ++v)
      if (Tail)
        simd::store_n(C + r * ldc + v * kW, acc[r][v], cols - v * kW);
      else
        simd::store(C + r * ldc + v * kW, acc[r][v]);
}

template <int MR>
void tile_cols(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t k, int64_t n,
               bool accumulate) {
  int64_t j = 0;
  for (; j + kNB <= n; j += kNB) tile<MR, false>(A, lda, B + j, ldb, C + j, ldc, k, kNB, accumulate);
  if (j < n) tile<MR, true>(A, lda, B + j, ldb, C + j, ldc, k, n - j, accumulate);
}

template <int MR>
void tile_rows(int64_t rows, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t k,
               int64_t n, bool accumulate) {
  if constexpr (MR > 1) {
    if (rows < MR) return tile_rows<MR - 1>(rows, A, lda, B, ldb, C, ldc, k, n, accumulate);
  }
  tile_cols<MR>(A, lda, B, ldb, C, ldc, k, n, accumulate);
}

// Which part of a row block of C a product needs: all of it, the columns below the block's last row + 1 (a lower
// triangle of [m, m] with the diagonal), or all columns over the k below the block's last row + 1 (A lower triangular,
// its entries above the diagonal zero).
enum class Tri { kFull, kLowerCols, kLowerK };

// C [m, n] (+)= A [m, k] B [k, n], row-major with row strides lda, ldb, ldc.
void matmul(Tri tri, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
            float* C, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < m; i += kMR) {
    const int64_t rows = std::min<int64_t>(kMR, m - i), end = i + rows;
    const int64_t nn = tri == Tri::kLowerCols ? std::min(n, end) : n;
    const int64_t kk = tri == Tri::kLowerK ? std::min(k, end) : k;
    tile_rows<kMR>(rows, A + i * lda, lda, B, ldb, C + i * ldc, ldc, kk, nn, accumulate);
  }
}

}  // namespace
}  // namespace deltanet_detail

void delta_rule_step(const DeltaShape& s, float* state, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* out, ThreadPool* pool) {
  auto head = [&](int64_t h) {
    const int64_t group = s.n_v_heads / s.n_k_heads, dk = s.dk, dv = s.dv, kW = deltanet_detail::kW;
    float* S = state + h * dk * dv;
    const float* kh = k + (h / group) * dk;
    const float* qh = q + (h / group) * dk;
    const simd::F32 decay = simd::set1(std::exp(g[h])), bh = simd::set1(beta[h]);
    float* oh = out + h * dv;
    // Two passes over the state: pred = (decay S)^T k (decay S not stored); then, with delta = beta (v - pred),
    // S = decay S + k delta^T and o = S^T q row by row of the new S.
    for (int64_t b = 0; b < dv; b += kW) {
      simd::F32 p = simd::zero();
      for (int64_t a = 0; a < dk; ++a)
        p = simd::fmadd(simd::set1(kh[a]), simd::mul(decay, simd::load_n(S + a * dv + b, dv - b)), p);
      const simd::F32 d = simd::mul(bh, simd::sub(simd::load_n(v + h * dv + b, dv - b), p));
      simd::F32 o = simd::zero();
      for (int64_t a = 0; a < dk; ++a) {
        float* row = S + a * dv + b;
        const simd::F32 sn = simd::fmadd(simd::set1(kh[a]), d, simd::mul(decay, simd::load_n(row, dv - b)));
        simd::store_n(row, sn, dv - b);
        o = simd::fmadd(simd::set1(qh[a]), sn, o);
      }
      simd::store_n(oh + b, o, dv - b);
    }
  };
  if (pool && pool->size() > 1)
    pool->run_chunks(s.n_v_heads, [&](int64_t h, int) { head(h); });
  else
    for (int64_t h = 0; h < s.n_v_heads; ++h) head(h);
}

DeltaRuleChunked::DeltaRuleChunked(const DeltaShape& s, int workers) : s_(s), workers_(std::max(1, workers)) {
  deltanet_detail::check_shape(s);
  const int64_t per = 2 * kChunk * s.dv + s.dk * kChunk + 2 * kChunk * kChunk + 3 * kChunk;
  scratch_.assign(static_cast<size_t>(workers_ * per), 0.0f);
}

void DeltaRuleChunked::run(float* state, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, int64_t n, float* out, ThreadPool* pool) {
  if (pool && pool->size() > 1) {
    ANELAB_CHECK(pool->size() <= workers_, "infer", "chunked delta rule: a pool of ", pool->size(),
                 " threads, scratch for ", workers_);
    pool->run_chunks(s_.n_v_heads, [&](int64_t h, int w) { run_head(h, w, state, q, k, v, g, beta, n, out); });
    return;
  }
  for (int64_t h = 0; h < s_.n_v_heads; ++h) run_head(h, 0, state, q, k, v, g, beta, n, out);
}

void DeltaRuleChunked::run_head(int64_t h, int worker, float* state, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, int64_t n, float* out) {
  using deltanet_detail::matmul;
  using deltanet_detail::Tri;
  const int64_t group = s_.n_v_heads / s_.n_k_heads, dk = s_.dk, dv = s_.dv, kW = deltanet_detail::kW;
  const int64_t qk_row = s_.n_k_heads * dk, v_row = s_.n_v_heads * dv, nh = s_.n_v_heads, C = kChunk;
  float* U = scratch_.data() + worker * (2 * C * dv + dk * C + 2 * C * C + 3 * C);  // [C, dv]
  float* KS = U + C * dv;                                                           // [C, dv]: K S0
  float* Kt = KS + C * dv;                                                          // [dk, C]: K^T
  float* G = Kt + dk * C;  // [C, C]: beta_i (k_i . k_j) exp(c_i - c_j), j < i
  float* P = G + C * C;    // [C, C]: (q_i . k_j) exp(c_i - c_j), j <= i; 0 above
  float* c = P + C * C;    // [C]: cumulative log decay within the chunk
  float* ec = c + C;       // [C]: exp(c)
  float* d = ec + C;       // [C]: exp(c_i - c_j) of row i
  float* S = state + h * dk * dv;
  const int64_t kq_off = (h / group) * dk;
  for (int64_t start = 0; start < n; start += C) {
    const int64_t L = std::min(C, n - start);
    const float* K = k + start * qk_row + kq_off;  // [L, dk], row stride qk_row
    const float* Q = q + start * qk_row + kq_off;
    const float* V = v + start * v_row + h * dv;  // [L, dv], row stride v_row
    float* O = out + start * v_row + h * dv;
    float acc = 0.0f;
    for (int64_t i = 0; i < L; ++i) c[i] = acc += g[(start + i) * nh + h];
    std::copy(c, c + L, ec);
    exp_inplace(ec, L);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t a = 0; a < dk; ++a) Kt[a * C + i] = K[i * qk_row + a];
    // Products with the state at the chunk start, and the chunk's Gram matrices (lower triangles).
    matmul(Tri::kFull, L, dv, dk, K, qk_row, S, dv, KS, dv, false);
    matmul(Tri::kFull, L, dv, dk, Q, qk_row, S, dv, O, v_row, false);
    matmul(Tri::kLowerCols, L, L, dk, K, qk_row, Kt, C, G, C, false);
    matmul(Tri::kLowerCols, L, L, dk, Q, qk_row, Kt, C, P, C, false);
    // U by forward substitution (the unit lower-triangular system (I + G) U = beta (v - exp(c) S0^T k)); the
    // decays of P and the outputs' exp(c_i) S0^T q_i on the way.
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j <= i; ++j) d[j] = c[i] - c[j];
      exp_inplace(d, i + 1);
      const float bi = beta[(start + i) * nh + h];
      float* gi = G + i * C;
      float* pi = P + i * C;
      for (int64_t j = 0; j <= i; ++j) {  // (G's diagonal is not read)
        gi[j] *= bi * d[j];
        pi[j] *= d[j];
      }
      std::fill(pi + i + 1, pi + L, 0.0f);
      const simd::F32 bv = simd::set1(bi), ev = simd::set1(ec[i]);
      float* ui = U + i * dv;
      for (int64_t b = 0; b < dv; b += kW) {
        const int64_t m = dv - b;
        simd::F32 u =
            simd::mul(bv, simd::fnmadd(ev, simd::load_n(KS + i * dv + b, m), simd::load_n(V + i * v_row + b, m)));
        for (int64_t j = 0; j < i; ++j) u = simd::fnmadd(simd::set1(gi[j]), simd::load_n(U + j * dv + b, m), u);
        simd::store_n(ui + b, u, m);
        float* oi = O + i * v_row + b;
        simd::store_n(oi, simd::mul(ev, simd::load_n(oi, m)), m);
      }
    }
    // Outputs: exp(c_i) S0^T q_i + sum_{j<=i} P_ij U_j.
    matmul(Tri::kLowerK, L, dv, L, P, C, U, dv, O, v_row, true);
    // The state at the chunk end: exp(c_L) S0 + sum_j exp(c_L - c_j) k_j U_j^T (the weights on K^T's columns).
    const float cl = c[L - 1];
    for (int64_t j = 0; j < L; ++j) d[j] = cl - c[j];
    exp_inplace(d, L);
    for (int64_t a = 0; a < dk; ++a)
      for (int64_t j = 0; j < L; ++j) Kt[a * C + j] *= d[j];
    const simd::F32 el = simd::set1(ec[L - 1]);
    for (int64_t i = 0; i < dk * dv; i += kW)
      simd::store_n(S + i, simd::mul(el, simd::load_n(S + i, dk * dv - i)), dk * dv - i);
    matmul(Tri::kFull, dk, dv, L, Kt, C, U, dv, S, dv, true);
  }
}

void conv1d_silu_rows(int64_t channels, int64_t kernel, float* conv_state, const float* w, const float* x, int64_t n,
                      float* y, ThreadPool* pool) {
  const int64_t hist = kernel - 1, C = channels, kW = deltanet_detail::kW;
  // The input of token t - hist + j (j < hist) of channel ch: the conv state's row before the first token.
  auto in = [&](int64_t tau) { return tau < 0 ? conv_state + (hist + tau) * C : x + tau * C; };
  auto channel_range = [&](int64_t c0, int64_t c1) {
    // Channels by groups of cw whose weights, transposed to [kernel, cw], sit in a stack buffer; tokens in order
    // within a group (rows of x and y read and written contiguously).
    constexpr int64_t kBuf = 4096;
    alignas(64) float wt[kBuf];
    const int64_t cw = std::max<int64_t>(kW, kBuf / kernel / kW * kW);
    ANELAB_CHECK(kernel * kW <= kBuf, "deltanet", "conv kernel ", kernel, " above ", kBuf / kW);
    for (int64_t g0 = c0; g0 < c1; g0 += cw) {
      const int64_t gn = std::min(cw, c1 - g0);
      for (int64_t l = 0; l < gn; ++l)
        for (int64_t j = 0; j < kernel; ++j) wt[j * cw + l] = w[(g0 + l) * kernel + j];
      for (int64_t t = 0; t < n; ++t) {
        float* yt = y + t * C + g0;
        // y = w[hist] x_t, then + w[j] x_{t-hist+j} for j = 0..hist-1 in order, then SiLU.
        for (int64_t l = 0; l < gn; l += kW) {
          const int64_t m = gn - l;
          simd::F32 acc = simd::mul(simd::load_n(wt + hist * cw + l, m), simd::load_n(x + t * C + g0 + l, m));
          for (int64_t j = 0; j < hist; ++j)
            acc = simd::fmadd(simd::load_n(wt + j * cw + l, m), simd::load_n(in(t - hist + j) + g0 + l, m), acc);
          simd::store_n(yt + l, acc, m);
        }
        silu_inplace(yt, gn);
      }
      // The history becomes the last hist inputs (row r from token n - hist + r: a later row, or x).
      for (int64_t r = 0; r < hist; ++r)
        std::memmove(conv_state + r * C + g0, in(n - hist + r) + g0, gn * sizeof(float));
    }
  };
  if (pool && pool->size() > 1 && n > 1)
    pool->parallel_for(C, kW, channel_range);
  else
    channel_range(0, C);
}

void conv1d_silu_step(int64_t channels, int64_t kernel, float* conv_state, const float* w, const float* x, float* y) {
  conv1d_silu_rows(channels, kernel, conv_state, w, x, 1, y);
}

void l2_normalize_rows(float* x, int64_t n, int64_t d, float eps, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    float* r = x + i * d;
    const float f = scale / std::sqrt(dot(r, r, d) + eps);
    for (int64_t j = 0; j < d; ++j) r[j] *= f;
  }
}

}  // namespace anelab::infer
