#include "infer/cpu_attention.h"

#include <algorithm>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "infer/cpu_math.h"

namespace anelab::infer {

namespace {

namespace W = simd;
constexpr int64_t VW = W::kWidth;
constexpr int R = CpuAttention::kTileRows;
constexpr int CV = CpuAttention::kTileCols;
constexpr int64_t KB = CV * VW;  // keys per score block (divides 64, so blocks never pass kt's row end)
static_assert(64 % KB == 0, "score blocks tile the 64-key rows of kt");

// The first key a query at position p sees: p - window + 1 with a key window, else 0.
int64_t first_key(const AttentionShape& s, int64_t p) {
  return s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Cache rows of either type read as fp32: whole vectors and scalars; partial fp16 vectors (lanes >= n are 0)
// for the fp16 dot / axpy (the fp32 ones are cpu_math.h's).
inline W::F32 load_kv(const float* p) { return W::load(p); }
inline W::F32 load_kv(const half_bits* p) { return W::load_h(p); }
inline W::F32 load_kv_n(const half_bits* p, int64_t n) { return W::load_h_n(p, n); }
inline float kv_f32(float x) { return x; }
inline float kv_f32(half_bits h) { return W::h2f(h); }

// q . k over n values (the operations and order of infer/cpu_math.h's dot, which serves fp32 rows).
template <typename T>
float dot_kv(const float* q, const T* k, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return dot(q, k, n);
  } else {
    W::F32 acc = W::zero();
    for (int64_t i = 0; i < n; i += VW) acc = W::fmadd(W::load_n(q + i, n - i), load_kv_n(k + i, n - i), acc);
    return W::reduce_add(acc);
  }
}

// y += a x over n values (as infer/cpu_math.h's axpy, which serves fp32 rows).
template <typename T>
void axpy_kv(float a, const T* x, float* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    axpy(a, x, y, n);
  } else {
    const W::F32 av = W::set1(a);
    for (int64_t i = 0; i < n; i += VW)
      W::store_n(y + i, W::fmadd(av, load_kv_n(x + i, n - i), W::load_n(y + i, n - i)), n - i);
  }
}

// fn(k, v) with the view's rows as typed pointers (const float* or const half_bits*).
template <typename Fn>
void with_rows(const KvView& kv, Fn&& fn) {
  if (kv.type == KvType::kF16)
    fn(static_cast<const half_bits*>(kv.k), static_cast<const half_bits*>(kv.v));
  else
    fn(static_cast<const float*>(kv.k), static_cast<const float*>(kv.v));
}

// kt[c][t] = k[t][c] (as fp32) for columns c in [c0, c1) and keys t in [t_begin, t_end) (k rows kvd apart,
// kt rows ld apart), in 16 x 16 blocks: 16 source rows and 16 destination rows in flight.
template <typename T>
void transpose_keys(const T* k, int64_t kvd, int64_t t_begin, int64_t t_end, int64_t c0, int64_t c1, float* kt,
                    int64_t ld) {
  constexpr int64_t B = 16;
  for (int64_t t0 = t_begin; t0 < t_end; t0 += B)
    for (int64_t c = c0; c < c1; c += B) {
      const T* src = k + t0 * kvd + c;
      float* dst = kt + c * ld + t0;
      if (t0 + B <= t_end && c + B <= c1) {
        for (int64_t j = 0; j < B; ++j)
#pragma GCC unroll 16
          for (int64_t i = 0; i < B; ++i) dst[j * ld + i] = kv_f32(src[i * kvd + j]);
      } else {
        for (int64_t j = 0; j < std::min(B, c1 - c); ++j)
          for (int64_t i = 0; i < std::min(B, t_end - t0); ++i) dst[j * ld + i] = kv_f32(src[i * kvd + j]);
      }
    }
}

// S[r][j] = scale * q[r] . key j for r < R, j < NV * VW (kt = the keys' transposed rows [hd] x ld from
// the first of them; S rows sld apart). Each key vector loaded from kt serves all R queries: R x NV
// accumulators, summed over head_dim in order.
template <int NV>
void score_block(const float* const* q, const float* kt, int64_t ld, int64_t hd, float scale, float* S, int64_t sld) {
  W::F32 a[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) a[r][j] = W::zero();
  for (int64_t d = 0; d < hd; ++d) {
    W::F32 kv[NV];
    for (int j = 0; j < NV; ++j) kv[j] = W::load(kt + d * ld + VW * j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const W::F32 qd = W::set1(q[r][d]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) a[r][j] = W::fmadd(qd, kv[j], a[r][j]);
    }
  }
  const W::F32 sv = W::set1(scale);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) W::store(S + r * sld + VW * j, W::mul(a[r][j], sv));
}

// score_block<nv> for nv <= NV vectors of keys (a tile's last, partial block).
template <int NV>
void score_tail(int64_t nv, const float* const* q, const float* kt, int64_t ld, int64_t hd, float scale, float* S,
                int64_t sld) {
  if constexpr (NV > 0) {
    if (nv == NV)
      score_block<NV>(q, kt, ld, hd, scale, S, sld);
    else
      score_tail<NV - 1>(nv, q, kt, ld, hd, scale, S, sld);
  }
}

// S[r][0..n_keys) (rounded up to whole vectors): whole KB-key blocks, then the 0..CV vectors left.
void scores_tile(const float* const* q, const float* kt, int64_t ld, int64_t hd, int64_t n_keys, float scale, float* S,
                 int64_t sld) {
  int64_t b = 0;
  for (; b + KB <= n_keys; b += KB) score_block<CV>(q, kt + b, ld, hd, scale, S + b, sld);
  score_tail<CV>((n_keys - b + VW - 1) / VW, q, kt + b, ld, hd, scale, S + b, sld);
}

// o[r][0..hd) = inv[r] * sum_{t<nt} P[r*sld + t] v[t*ldv ..] for r < R: CV vectors (KB columns) of head_dim
// at a time, each V vector loaded once for all R rows.
template <typename T>
void pv_tile(const float* P, int64_t sld, const T* v, int64_t ldv, int64_t nt, int64_t hd, const float* inv,
             float* const* o) {
  for (int64_t c0 = 0; c0 < hd; c0 += KB) {
    W::F32 a[R][CV];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < CV; ++j) a[r][j] = W::zero();
    const T* vc = v + c0;
    for (int64_t t = 0; t < nt; ++t) {
      W::F32 vv[CV];
      for (int j = 0; j < CV; ++j) vv[j] = load_kv(vc + t * ldv + VW * j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const W::F32 w = W::set1(P[r * sld + t]);
#pragma GCC unroll 4
        for (int j = 0; j < CV; ++j) a[r][j] = W::fmadd(w, vv[j], a[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const W::F32 s = W::set1(inv[r]);
      for (int j = 0; j < CV; ++j) W::store(o[r] + c0 + VW * j, W::mul(a[r][j], s));
    }
  }
}

// One work item of the blocked path: tokens [i0, i0 + R) of head h (rows past n repeat the last token and
// write to a spare row). S: the worker's [R, ld] scores. T: the cache's V element type.
template <typename T>
struct Tile {
  const AttentionShape& s;
  const float *q, *kt;
  const T* v;
  float* out;
  int64_t ld, pos, n;

  void run(int64_t i0, int64_t h, float* S) const {
    const int64_t hd = s.head_dim, g = h / (s.n_heads / s.n_kv_heads);
    alignas(64) float spare[256];  // head_dim <= 256
    const float* qr[R];
    float* orow[R];
    int64_t t0[R], p[R];
    for (int r = 0; r < R; ++r) {
      const int64_t i = std::min(i0 + r, n - 1);
      qr[r] = q + i * s.q_dim() + h * hd;
      orow[r] = i0 + r < n ? out + i * s.q_dim() + h * hd : spare;
      p[r] = pos + i;
      t0[r] = first_key(s, p[r]);
    }
    // The keys some row sees: [t_lo, t_hi]; scores start at the block holding t_lo.
    const int64_t t_lo = t0[0], t_hi = p[R - 1], tb = t_lo / KB * KB, sld = round_up(t_hi + 1 - tb, KB);
    scores_tile(qr, kt + g * hd * ld + tb, ld, hd, t_hi + 1 - tb, s.scale, S, sld);
    float inv[R];
    for (int r = 0; r < R; ++r) {  // softmax over the row's keys; the tile's other keys get weight 0
      float* sr = S + r * sld;     // sr[t - tb]: key t
      const int64_t len = p[r] + 1 - t0[r];
      inv[r] = 1.0f / exp_sub_sum(sr + (t0[r] - tb), max_of(sr + (t0[r] - tb), len), len);
      std::fill(sr + (t_lo - tb), sr + (t0[r] - tb), 0.0f);
      std::fill(sr + (p[r] + 1 - tb), sr + (t_hi + 1 - tb), 0.0f);
    }
    pv_tile(S + (t_lo - tb), sld, v + t_lo * s.kv_dim() + g * hd, s.kv_dim(), t_hi + 1 - t_lo, hd, inv, orow);
  }
};

}  // namespace

KvType parse_kv_type(const std::string& s) {
  if (s == "f32") return KvType::kF32;
  if (s == "f16") return KvType::kF16;
  fail("infer", "unknown --kv-type '", s, "' (choices: f32, f16)");
}

void CpuAttention::reserve(int workers, int64_t context) { scores_.grow(workers * R * round_up(context, 64)); }

void CpuAttention::run(ThreadPool& pool, const AttentionShape& s, const float* q, const KvView& kv, int64_t pos,
                       int64_t n, float* out) {
  if (blocked_fits(n, s.head_dim))
    blocked(pool, s, q, kv, pos, n, out);
  else
    rows(pool, s, q, kv, pos, n, out);
}

namespace {
// Head h of one query at position p (q: its row [q_dim]) over cache rows k, v (of either type) into o [head_dim]:
// scores into sc [p + 1], softmax, the weighted values. rows() and rows_batch() run every (query, head) through it.
template <typename T>
void query_head(const AttentionShape& s, const float* q, const T* k, const T* v, int64_t p, int64_t h, float* sc,
                float* o) {
  const int64_t hd = s.head_dim, kvd = s.kv_dim(), group = s.n_heads / s.n_kv_heads, t0 = first_key(s, p);
  const float* qi = q + h * hd;
  const T* kc = k + (h / group) * hd;
  const T* vc = v + (h / group) * hd;
  for (int64_t t = t0; t <= p; ++t) sc[t] = dot_kv(qi, kc + t * kvd, hd) * s.scale;
  const float inv_sum = 1.0f / exp_sub_sum(sc + t0, max_of(sc + t0, p + 1 - t0), p + 1 - t0);
  std::fill(o, o + hd, 0.0f);
  for (int64_t t = t0; t <= p; ++t) axpy_kv(sc[t] * inv_sum, vc + t * kvd, o, hd);
}
}  // namespace

void CpuAttention::rows(ThreadPool& pool, const AttentionShape& s, const float* q, const KvView& kv, int64_t pos,
                        int64_t n, float* out) {
  const int64_t hd = s.head_dim, ld = round_up(pos + n, 64);
  scores_.grow(pool.size() * ld);
  const int64_t items = n * s.n_heads;
  // Tiny attention (short contexts, small heads) stays on the caller: a wake-up costs more.
  const bool serial = items * (pos + n) * hd < (1 << 15);
  with_rows(kv, [&](auto k, auto v) {
    auto body = [&](int64_t it, int w) {
      const int64_t i = it / s.n_heads, h = it % s.n_heads;
      query_head(s, q + i * s.q_dim(), k, v, pos + i, h, scores_.data() + static_cast<int64_t>(w) * ld,
                 out + i * s.q_dim() + h * hd);
    };
    if (serial)
      for (int64_t it = 0; it < items; ++it) body(it, 0);
    else
      pool.run_chunks(items, body);
  });
}

void CpuAttention::rows_batch(ThreadPool& pool, const AttentionShape& s, const float* q, std::span<const KvView> kv,
                              std::span<const int64_t> pos, float* out) {
  const auto n = static_cast<int64_t>(pos.size());
  int64_t keys = 0, longest = 0;
  for (int64_t p : pos) keys += p + 1, longest = std::max(longest, p + 1);
  const int64_t ld = round_up(longest, 64);
  scores_.grow(pool.size() * ld);
  auto body = [&](int64_t it, int w) {
    const int64_t i = it / s.n_heads, h = it % s.n_heads;
    with_rows(kv[static_cast<size_t>(i)], [&](auto k, auto v) {
      query_head(s, q + i * s.q_dim(), k, v, pos[static_cast<size_t>(i)], h,
                 scores_.data() + static_cast<int64_t>(w) * ld, out + i * s.q_dim() + h * s.head_dim);
    });
  };
  const int64_t items = n * s.n_heads;
  if (keys * s.n_heads * s.head_dim < (1 << 15)) {  // as rows(): tiny work stays on the caller
    for (int64_t it = 0; it < items; ++it) body(it, 0);
    return;
  }
  // A few (row, head) items per claim, about two claims per worker: one item is a few microseconds at decode's
  // positions, less than claiming it costs when eight workers contend for the counter (8 rows x 14 heads: 112 claims).
  const int64_t per = std::max<int64_t>(1, items / (2 * pool.size()));
  pool.run_chunks((items + per - 1) / per, [&](int64_t c, int w) {
    for (int64_t it = c * per; it < std::min(items, (c + 1) * per); ++it) body(it, w);
  });
}

void CpuAttention::blocked(ThreadPool& pool, const AttentionShape& s, const float* q, const KvView& kv, int64_t pos,
                           int64_t n, float* out) {
  ANELAB_CHECK(blocked_fits(8, s.head_dim), "infer", "blocked attention needs head_dim 64, 128, 192 or 256, got ",
               s.head_dim);
  const int64_t kvd = s.kv_dim(), np = pos + n, ld = round_up(np, 64), t_first = first_key(s, pos);
  kt_.grow(kvd * ld);
  scores_.grow(pool.size() * R * ld);
  // kt [kv_dim][ld] fp32: the keys from the first one any query sees.
  float* kt = kt_.data();
  with_rows(kv, [&](auto k, auto v) {
    pool.parallel_for(kvd, 16, [&](int64_t c0, int64_t c1) { transpose_keys(k, kvd, t_first, np, c0, c1, kt, ld); });
    const Tile<std::remove_cv_t<std::remove_pointer_t<decltype(v)>>> tile{s, q, kt, v, out, ld, pos, n};
    const int64_t tiles = (n + R - 1) / R;
    pool.run_chunks(tiles * s.n_heads, [&](int64_t it, int w) {
      const int64_t i0 = (tiles - 1 - it / s.n_heads) * R;  // the last (longest) tiles first
      tile.run(i0, it % s.n_heads, scores_.data() + static_cast<int64_t>(w) * R * ld);
    });
  });
}

}  // namespace anelab::infer
