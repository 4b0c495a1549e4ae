#include "framework/quant/qdot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "framework/core/error.h"
#include "framework/simd/simd.h"

namespace anelab::quant {
namespace {

namespace S = simd;
// Weight rows per pass over the activations. The kernels take R rows at once (the activation loads shared), but
// end to end one row at a time decodes fastest (stories110m q8_0 / q4_k_m GGUFs, 2 threads: R = 1 ~230 tok/s,
// R = 2 ~130 / 220, R = 4 ~130 / 185): a model streams from memory, where one sequential stream per thread beats
// R interleaved ones, and a row of the cache-resident kernel benchmark gains little from R (docs/quantization.md).
constexpr int kRows = 1;

// ---- activation quantizers ----

constexpr int kVecs32 = 32 / S::kWidth;  // F32 (and GI32) vectors per 32 values

// The largest |x_i| of 32 values; NaN values are skipped (max(a, b) takes b when a is NaN).
inline float amax32(const float* x) {
  S::F32 m = S::zero();
  for (int v = 0; v < kVecs32; ++v) m = S::max(S::abs(S::load(x + S::kWidth * v)), m);
  return S::reduce_max(m);
}

// The 32 int8 of round_half_even(x_i * s) (min(that, 127) with kClamp127: NaN -> 127), saturated to int8.
template <bool kClamp127>
inline S::I8 quantize32(const float* x, S::F32 s) {
  S::GI32 q[kVecs32];
  for (int v = 0; v < kVecs32; ++v) {
    const S::F32 p = S::mul(S::load(x + S::kWidth * v), s);
    q[v] = S::cvt_i32(kClamp127 ? S::min(p, S::set1(127.0f)) : p);
  }
  return S::pack_i8(q);
}

void quantize_q8_0_form(const float* x, int64_t n, Q8Acts& a) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const auto ub = static_cast<size_t>(b);
    const float amax = amax32(x + 32 * b);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const S::I8 q = quantize32<false>(x + 32 * b, S::set1(id));
    S::store_i8(a.q.data() + 32 * b, q);
    S::sum16_i8(q, a.sums16.data() + 2 * b);
    a.sums32[ub] = a.sums16[2 * ub] + a.sums16[2 * ub + 1];
    a.d[ub] = S::h2f(S::f2h(amax / 127.0f));
    a.s[ub] = S::h2f(S::f2h(amax / 127.0f * static_cast<float>(a.sums32[ub])));
  }
}

// The first value of largest magnitude among 256, with its sign (0 when all are 0 or NaN): the amax of each 32
// values, then a scan of the first group of 32 whose amax is the largest.
inline float q8_k_max(const float* x) {
  float m[8], amax = 0.0f;
  for (int j = 0; j < 8; ++j) m[j] = amax32(x + 32 * j), amax = std::max(amax, m[j]);
  if (amax == 0.0f) return 0.0f;
  const int j = static_cast<int>(std::find(m, m + 8, amax) - m);
  return *std::find_if(x + 32 * j, x + 32 * j + 32, [amax](float v) { return std::fabs(v) == amax; });
}

void quantize_q8_k_form(const float* x, int64_t n, Q8Acts& a) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + 256 * b;
    const float max = q8_k_max(xb);
    const float iscale = max != 0.0f ? -127.0f / max : 0.0f;
    for (int j = 0; j < 8; ++j) {
      const S::I8 q = quantize32<true>(xb + 32 * j, S::set1(iscale));
      S::store_i8(a.qk.data() + 256 * b + 32 * j, q);
      int32_t s[2];
      S::sum16_i8(q, s);
      const auto k = static_cast<size_t>(8 * b + j);
      a.bsums[2 * k] = static_cast<int16_t>(s[0]), a.bsums[2 * k + 1] = static_cast<int16_t>(s[1]);
      a.bsums32[k] = static_cast<int16_t>(s[0] + s[1]);
    }
    a.dk[static_cast<size_t>(b)] = max != 0.0f ? 1.0f / iscale : 0.0f;
  }
}

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// ---- kernels: R rows of row_bytes each from w, against a; y[r] = the dot product of row r ----

template <typename B>
const B& block(const uint8_t* w, int64_t row_bytes, int r, int64_t b) {
  return reinterpret_cast<const B*>(w + r * row_bytes)[b];
}

// Weight rows stream from memory (a mapped file). Each block read prefetches the bytes kPrefetchAhead further
// on in the matrix (its rows are contiguous: past a row's end, the next rows' blocks), as the fp16 GEMV does
// (infer/cpu_math.cpp); every cache line of the stream gets one hint, since no block is longer than the
// lines it covers. On the device machine's Xeon the hardware prefetcher alone left the Q8_0 GEMV at half the
// fp16 GEMV's bytes per second; 4 KiB ahead with two accumulator chains (rows_32) decoded stories110m /
// qwen2.5-0.5b q8_0 10-15 % faster than 2 KiB with one chain there (1 and 8 KiB: slower or no better). A hint
// only: past the end of the mapping it reads nothing.
constexpr int64_t kPrefetchAhead = 4096;
template <typename B>
void prefetch_ahead(const B& blk) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&blk) + kPrefetchAhead;
  for (size_t line = 0; line < sizeof(B); line += 64) S::prefetch(p + line);
}

inline uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Signed 32-value weight blocks (Q8_0, Q4_0, Q5_0): one exact int8 dot product and one fp32 FMA per block,
// even and odd blocks into two accumulators (two FMA latency chains), summed at the end.
template <typename B, int R, typename Values>
void rows_32(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y, Values values) {
  S::QAcc acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = S::qacc_zero();
  const auto step = [&](int64_t b, int chain) {
    const S::I8 x = S::load_i8(a.q.data() + 32 * b);
    const float da = a.d[static_cast<size_t>(b)];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const B& blk = block<B>(w, row_bytes, r, b);
      prefetch_ahead(blk);
      acc[r][chain] = S::qacc_fmadd(acc[r][chain], S::dot_ss(S::zero_i32(), values(blk), x), S::h2f(blk.d) * da);
    }
  };
  const int64_t nb = a.n / 32;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) step(b, 0), step(b + 1, 1);
  if (b < nb) step(b, 0);
  for (int r = 0; r < R; ++r) y[r] = S::qacc_sum(acc[r][0]) + S::qacc_sum(acc[r][1]);
}

template <int R>
void rows_q8_0(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  rows_32<BlockQ8_0, R>(w, row_bytes, a, y, [](const BlockQ8_0& b) { return S::load_i8(b.qs); });
}
template <int R>
void rows_q4_0(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  rows_32<BlockQ4_0, R>(w, row_bytes, a, y, [](const BlockQ4_0& b) { return S::sub8(S::nib16(b.qs), 8); });
}
template <int R>
void rows_q5_0(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  rows_32<BlockQ5_0, R>(w, row_bytes, a, y, [](const BlockQ5_0& b) {  // (n | h << 4) - 16 = h ? n : n | 0xF0
    return S::or8(S::nib16(b.qs), S::andnot8(S::bit_bytes(le32(b.qh)), 0xF0));
  });
}

// Q5_1 (unsigned 5-bit values, an offset m per block): d_w d_a sum(q q_a) + m s_a, two accumulator chains for the
// products and one for the offsets.
template <int R>
void rows_q5_1(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  S::QAcc acc[R][2];
  float off[R] = {};
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = S::qacc_zero();
  const auto step = [&](int64_t b, int chain) {
    const S::I8 x = S::load_i8(a.q.data() + 32 * b);
    const auto ub = static_cast<size_t>(b);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const BlockQ5_1& blk = block<BlockQ5_1>(w, row_bytes, r, b);
      prefetch_ahead(blk);
      const S::I8 v = S::or8(S::nib16(blk.qs), S::and8(S::bit_bytes(le32(blk.qh)), 0x10));
      acc[r][chain] = S::qacc_fmadd(acc[r][chain], S::dot_ss(S::zero_i32(), v, x), S::h2f(blk.d) * a.d[ub]);
      off[r] += S::h2f(blk.m) * a.s[ub];
    }
  };
  const int64_t nb = a.n / 32;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) step(b, 0), step(b + 1, 1);
  if (b < nb) step(b, 0);
  for (int r = 0; r < R; ++r) y[r] = S::qacc_sum(acc[r][0]) + S::qacc_sum(acc[r][1]) + off[r];
}

// Q4_K's packed scales[12] -> bytes 0-7 the 6-bit scales, bytes 8-15 the 6-bit mins (layout in blocks.h).
inline void q4k_unpack(const uint8_t* s, uint8_t out[16]) {
  uint32_t u[4];
  std::memcpy(u, s, 12);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
  const uint32_t mins_lo = u[1] & k6;
  u[1] = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
  u[2] = mins_lo;
  u[0] &= k6;
  std::memcpy(out, u, 16);
}

// Q4_K and Q5_K (B): 8 sub-blocks of 32 with 6-bit scales and mins, the values' low 4 bits in nibbles; Q5_K's 5th
// bits come from qh (bit 2c / 2c + 1 of byte i for chunk c), the register shifted down one bit per sub-block.
template <typename B, int R>
void rows_k_affine(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  constexpr bool kFifth = std::is_same_v<B, BlockQ5_K>;
  S::QAcc acc[R];
  for (int r = 0; r < R; ++r) acc[r] = S::qacc_zero();
  for (int64_t sb = 0; sb < a.n / 256; ++sb) {
    const int8_t* aq = a.qk.data() + 256 * sb;
    const int16_t* bs = a.bsums32.data() + 8 * sb;
    const float da = a.dk[static_cast<size_t>(sb)];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const B& b = block<B>(w, row_bytes, r, sb);
      prefetch_ahead(b);
      alignas(16) uint8_t sm[16];
      q4k_unpack(b.scales, sm);
      const S::Scales sc = S::load_scales(sm);
      S::I8 h{};
      if constexpr (kFifth) h = S::load_i8(b.qh);
      S::I32 s = S::zero_i32();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {  // 64 values: low nibbles sub-block 2c, high nibbles 2c + 1
        const S::I8 v = S::load_i8(b.qs + 32 * c);
        S::I8 lo = S::and8(v, 15), hi = S::shr8<4>(v);
        if constexpr (kFifth) {
          lo = S::or8(lo, S::and8(S::shl8<4>(h), 0x10));
          h = S::shr8<1>(h);
          hi = S::or8(hi, S::and8(S::shl8<4>(h), 0x10));
          h = S::shr8<1>(h);
        }
        s = S::dot_us_scaled(s, lo, S::load_i8(aq + 64 * c), S::scale_pair(sc, 2 * c, 2 * c));
        s = S::dot_us_scaled(s, hi, S::load_i8(aq + 64 * c + 32), S::scale_pair(sc, 2 * c + 1, 2 * c + 1));
      }
      acc[r] = S::qacc_fmadd(acc[r], s, da * S::h2f(b.d));
      acc[r] = S::qacc_fmadd(acc[r], S::madd_u8_i16x8(sm + 8, bs), -da * S::h2f(b.dmin));
    }
  }
  for (int r = 0; r < R; ++r) y[r] = S::qacc_sum(acc[r]);
}
template <int R>
void rows_q4_k(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  rows_k_affine<BlockQ4_K, R>(w, row_bytes, a, y);
}
template <int R>
void rows_q5_k(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  rows_k_affine<BlockQ5_K, R>(w, row_bytes, a, y);
}

template <int R>
void rows_q6_k(const uint8_t* w, int64_t row_bytes, const Q8Acts& a, float* y) {
  S::QAcc acc[R];
  for (int r = 0; r < R; ++r) acc[r] = S::qacc_zero();
  for (int64_t sb = 0; sb < a.n / 256; ++sb) {
    const int8_t* aq = a.qk.data() + 256 * sb;
    const int16_t* bs = a.bsums.data() + 16 * sb;
    const float da = a.dk[static_cast<size_t>(sb)];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const BlockQ6_K& b = block<BlockQ6_K>(w, row_bytes, r, sb);
      prefetch_ahead(b);
      S::I32 s = S::zero_i32();
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const S::Scales sc = S::load_scales(
            b.scales + 8 * h);  // 128 values: q = low 4 bits from ql, top 2 bits from qh (layout in blocks.h)
        const int8_t* ah = aq + 128 * h;
        const S::I8 l0 = S::load_i8(b.ql + 64 * h), l1 = S::load_i8(b.ql + 64 * h + 32), hb = S::load_i8(b.qh + 32 * h);
        const S::I8 q0 = S::or8(S::and8(l0, 15), S::and8(S::shl8<4>(hb), 0x30));
        const S::I8 q1 = S::or8(S::and8(l1, 15), S::and8(S::shl8<2>(hb), 0x30));
        const S::I8 q2 = S::or8(S::shr8<4>(l0), S::and8(hb, 0x30));
        const S::I8 q3 = S::or8(S::shr8<4>(l1), S::and8(S::shr8<2>(hb), 0x30));
        s = S::dot_us_scaled(s, q0, S::load_i8(ah), S::scale_pair(sc, 0, 1));
        s = S::dot_us_scaled(s, q1, S::load_i8(ah + 32), S::scale_pair(sc, 2, 3));
        s = S::dot_us_scaled(s, q2, S::load_i8(ah + 64), S::scale_pair(sc, 4, 5));
        s = S::dot_us_scaled(s, q3, S::load_i8(ah + 96), S::scale_pair(sc, 6, 7));
      }
      s = S::sub_i32(s, S::shl_i32<5>(S::madd_s8_i16x16(b.scales, bs)));  // - 32 sum_s sc_s bsum_s
      acc[r] = S::qacc_fmadd(acc[r], s, da * S::h2f(b.d));
    }
  }
  for (int r = 0; r < R; ++r) y[r] = S::qacc_sum(acc[r]);
}

using RowsFn = void (*)(const uint8_t*, int64_t, const Q8Acts&, float*);
struct Kernels {
  RowsFn one, many;  // 1 row, kRows rows
};
Kernels kernels(BlockType t) {
  switch (t) {
    case BlockType::kQ8_0:
      return {&rows_q8_0<1>, &rows_q8_0<kRows>};
    case BlockType::kQ4_0:
      return {&rows_q4_0<1>, &rows_q4_0<kRows>};
    case BlockType::kQ5_0:
      return {&rows_q5_0<1>, &rows_q5_0<kRows>};
    case BlockType::kQ5_1:
      return {&rows_q5_1<1>, &rows_q5_1<kRows>};
    case BlockType::kQ5_K:
      return {&rows_q5_k<1>, &rows_q5_k<kRows>};
    case BlockType::kQ4_K:
      return {&rows_q4_k<1>, &rows_q4_k<kRows>};
    case BlockType::kQ6_K:
      return {&rows_q6_k<1>, &rows_q6_k<kRows>};
  }
  return {nullptr, nullptr};
}

void check_form(BlockType t, const Q8Acts& a) {
  ANELAB_CHECK((a.forms & acts_form(t)) != 0, "quant", block_info(t).name, " rows need the ",
               acts_form(t) == kActsQ8_K ? "Q8_K" : "Q8_0", " activations of ", a.n, " values, not quantized");
}

// Row tiles: each tile block prefetches the bytes kPrefetchAhead further on into L2 (the tiles of a matrix are one
// contiguous stream), one hint per cache line it covers. Into L1 (T0) instead, the tiled GEMV streamed 25 GB/s on
// one Zen 4 core against 31 with T1 or none; on the device machine's Xeon (2 threads) T1 4-16 KiB ahead ran at
// 21-30 GB/s, about its read loop's 24-30, and no hints at 18-25 (docs/quantization.md).
template <int64_t kBytes>
inline void prefetch_tile_block(const uint8_t* p) {
  for (int64_t line = 0; line < kBytes; line += 64) S::prefetch_l2(p + kPrefetchAhead + line);
}

// Rewrites n_tiles groups of kTileRows rows of blocks B (cols / values each) in place as tile blocks of kTileRows x
// sizeof(B) bytes: put(o, l, blk) writes row l's block blk into its tile block o, which starts zeroed.
template <typename B, typename Put>
void tile_blocks(uint8_t* rows, int64_t n_tiles, int64_t cols, int64_t values, Put put) {
  const int64_t nb = cols / values, row_bytes = nb * int64_t{sizeof(B)};
  std::vector<uint8_t> rows16(static_cast<size_t>(kTileRows * row_bytes));
  for (int64_t t = 0; t < n_tiles; ++t) {
    uint8_t* const base = rows + t * kTileRows * row_bytes;
    std::memcpy(rows16.data(), base, rows16.size());
    std::memset(base, 0, rows16.size());
    for (int l = 0; l < kTileRows; ++l) {
      const auto* src = reinterpret_cast<const B*>(rows16.data() + l * row_bytes);
      for (int64_t b = 0; b < nb; ++b) put(base + b * kTileRows * int64_t{sizeof(B)}, l, src[b]);
    }
  }
}

}  // namespace

void tile_q8_0(uint8_t* rows, int64_t n_tiles, int64_t cols) {
  ANELAB_CHECK(cols % 32 == 0, "quant", "Q8_0 tiles: ", cols, " columns are not whole blocks of 32");
  tile_blocks<BlockQ8_0>(rows, n_tiles, cols, 32, [](uint8_t* o, int l, const BlockQ8_0& blk) {
    std::memcpy(o + 2 * l, &blk.d, 2);
    for (int v = 0; v < 32; ++v)
      o[32 + 64 * (v / 4) + 4 * l + v % 4] = static_cast<uint8_t>(static_cast<uint8_t>(blk.qs[v]) ^ kQ8TileFlip);
  });
}

void q8_0_tile_row(const uint8_t* tile, int64_t cols, int l, BlockQ8_0* out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* const o = tile + b * kQ8TileBlockBytes;
    std::memcpy(&out[b].d, o + 2 * l, 2);
    for (int v = 0; v < 32; ++v) out[b].qs[v] = static_cast<int8_t>(o[32 + 64 * (v / 4) + 4 * l + v % 4] ^ kQ8TileFlip);
  }
}

// Per tile block: kQ8TileRows / kWidth int32 vectors of 16-row sums over the 8 groups (starting at -128 sum(q_a)
// where the bytes are q + 128), then one fp32 multiply-add per row with d_w d_a, as dot_row's per-block term.
void dot_q8_0_tiles(const uint8_t* tiles, int64_t n_tiles, const Q8Acts& a, float* y) {
  check_form(BlockType::kQ8_0, a);
  constexpr int kV = static_cast<int>(kQ8TileRows) / S::kWidth;
  constexpr int32_t kOffset = kQ8TileFlip ? -128 : 0;
  const int64_t nb = a.n / 32;
  for (int64_t t = 0; t < n_tiles; ++t) {
    const uint8_t* p = tiles + t * nb * kQ8TileBlockBytes;
    S::F32 acc[kV];
    for (int v = 0; v < kV; ++v) acc[v] = S::zero();
    for (int64_t b = 0; b < nb; ++b, p += kQ8TileBlockBytes) {
      prefetch_tile_block<kQ8TileBlockBytes>(p);
      const auto ub = static_cast<size_t>(b);
      S::GI32 s[kV];
      for (int v = 0; v < kV; ++v) s[v] = S::set1_i32(kOffset * a.sums32[ub]);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        int32_t a4;
        std::memcpy(&a4, a.q.data() + 32 * b + 4 * j, 4);
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) {
          const S::W8 w = S::load_w8(p + 32 + 64 * j + 4 * S::kWidth * v);
          s[v] = kQ8TileFlip ? S::dot4_u8(s[v], w, a4) : S::dot4_s8(s[v], w, a4);
        }
      }
      const S::F32 da = S::set1(a.d[ub]);
      for (int v = 0; v < kV; ++v)
        acc[v] = S::fmadd(S::to_f32(s[v]), S::mul(S::load_h(reinterpret_cast<const uint16_t*>(p) + S::kWidth * v), da),
                          acc[v]);
    }
    for (int v = 0; v < kV; ++v) S::store(y + kQ8TileRows * t + S::kWidth * v, acc[v]);
  }
}

// A Q4_K block's qs[32c + j] holds value j of sub-block 2c in its low nibble and of sub-block 2c + 1 in its high one.
void tile_q4_k(uint8_t* rows, int64_t n_tiles, int64_t cols) {
  ANELAB_CHECK(cols % 256 == 0, "quant", "Q4_K tiles: ", cols, " columns are not whole blocks of 256");
  tile_blocks<BlockQ4_K>(rows, n_tiles, cols, 256, [](uint8_t* o, int l, const BlockQ4_K& blk) {
    std::memcpy(o + 2 * l, &blk.d, 2);
    std::memcpy(o + 32 + 2 * l, &blk.dmin, 2);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      q4k_scale_min(s, blk.scales, sc, m);
      o[64 + 16 * s + l] = static_cast<uint8_t>(sc | (m & 3) << 6);
      o[192 + 16 * (s / 2) + l] = static_cast<uint8_t>(o[192 + 16 * (s / 2) + l] | (m >> 2) << (4 * (s % 2)));
      for (int p = 0; p < 4; ++p) {  // values 8p..8p+3 and 8p+4..8p+7 of sub-block s: nibbles of qs[32 (s / 2) + 8p ..]
        const uint8_t* q = blk.qs + 32 * (s / 2) + 8 * p;
        const uint32_t lo = le32(q) >> (4 * (s % 2)), hi = le32(q + 4) >> (4 * (s % 2));
        const uint32_t w = (lo & 0x0F0F0F0Fu) | (hi & 0x0F0F0F0Fu) << 4;
        for (int i = 0; i < 4; ++i) o[256 + 256 * s + 64 * p + 4 * l + i] = static_cast<uint8_t>(w >> (8 * i));
      }
    }
  });
}

void q4_k_tile_row(const uint8_t* tile, int64_t cols, int l, BlockQ4_K* out) {
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* const o = tile + b * kQ4KTileBlockBytes;
    BlockQ4_K& k = out[b];
    std::memcpy(&k.d, o + 2 * l, 2);
    std::memcpy(&k.dmin, o + 32 + 2 * l, 2);
    std::memset(k.scales, 0, sizeof k.scales);
    std::memset(k.qs, 0, sizeof k.qs);
    for (int s = 0; s < 8; ++s) {
      const int lo = o[64 + 16 * s + l], hi = (o[192 + 16 * (s / 2) + l] >> (4 * (s % 2))) & 15;
      q4k_set_scale_min(s, lo & 63, lo >> 6 | hi << 2, k.scales);
      for (int p = 0; p < 4; ++p) {
        const uint32_t w = le32(o + 256 + 256 * s + 64 * p + 4 * l);
        const uint32_t lo = (w & 0x0F0F0F0Fu) << (4 * (s % 2)), hi = ((w >> 4) & 0x0F0F0F0Fu) << (4 * (s % 2));
        uint8_t* const q = k.qs + 32 * (s / 2) + 8 * p;
        for (int i = 0; i < 4; ++i) {
          q[i] = static_cast<uint8_t>(q[i] | lo >> (8 * i));
          q[4 + i] = static_cast<uint8_t>(q[4 + i] | hi >> (8 * i));
        }
      }
    }
  }
}

// Per tile block and sub-block: kTileRows / kWidth int32 vectors of 16-row sums over the sub-block's 8 groups (the
// nibbles split out of each pair), times the rows' 6-bit scales; the mins times the activations' sums per 32; then
// the row kernel's two fp32 multiply-adds per row with d_a d and d_a dmin.
void dot_q4_k_tiles(const uint8_t* tiles, int64_t n_tiles, const Q8Acts& a, float* y) {
  check_form(BlockType::kQ4_K, a);
  constexpr int kV = static_cast<int>(kTileRows) / S::kWidth;
  const int64_t nb = a.n / 256;
  for (int64_t t = 0; t < n_tiles; ++t) {
    const uint8_t* p = tiles + t * nb * kQ4KTileBlockBytes;
    S::F32 acc[kV];
    for (int v = 0; v < kV; ++v) acc[v] = S::zero();
    for (int64_t b = 0; b < nb; ++b, p += kQ4KTileBlockBytes) {
      prefetch_tile_block<kQ4KTileBlockBytes>(p);
      const int8_t* const aq = a.qk.data() + 256 * b;
      const int16_t* const bs = a.bsums32.data() + 8 * b;
      S::GI32 sum[kV], mins[kV];
      for (int v = 0; v < kV; ++v) sum[v] = mins[v] = S::set1_i32(0);
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        S::GI32 is[kV];
        for (int v = 0; v < kV; ++v) is[v] = S::set1_i32(0);
#pragma GCC unroll 4
        for (int pp = 0; pp < 4; ++pp) {
          int32_t a0, a1;
          std::memcpy(&a0, aq + 32 * s + 8 * pp, 4);
          std::memcpy(&a1, aq + 32 * s + 8 * pp + 4, 4);
#pragma GCC unroll 4
          for (int v = 0; v < kV; ++v) {
            const S::W8 w = S::load_w8(p + 256 + 256 * s + 64 * pp + 4 * S::kWidth * v);
            is[v] = S::dot4_u8(S::dot4_u8(is[v], S::lo4_w8(w), a0), S::hi4_w8(w), a1);
          }
        }
        const S::GI32 bsum = S::set1_i32(bs[s]);
        for (int v = 0; v < kV; ++v) {
          const S::GI32 lo = S::load_u8_gi32(p + 64 + 16 * s + S::kWidth * v);
          const S::GI32 hi8 = S::load_u8_gi32(p + 192 + 16 * (s / 2) + S::kWidth * v);
          const S::GI32 hi = s % 2 ? S::shr_gi32<4>(hi8) : S::and_gi32(hi8, 15);
          sum[v] = S::add_gi32(sum[v], S::mullo_gi32(is[v], S::and_gi32(lo, 63)));
          mins[v] = S::add_gi32(mins[v], S::mullo_gi32(S::or_gi32(S::shr_gi32<6>(lo), S::shl_gi32<2>(hi)), bsum));
        }
      }
      const S::F32 da = S::set1(a.dk[static_cast<size_t>(b)]);
      for (int v = 0; v < kV; ++v) {
        const auto* h = reinterpret_cast<const uint16_t*>(p) + S::kWidth * v;
        acc[v] = S::fmadd(S::to_f32(sum[v]), S::mul(S::load_h(h), da), acc[v]);
        acc[v] = S::fnmadd(S::to_f32(mins[v]), S::mul(S::load_h(h + kTileRows), da), acc[v]);
      }
    }
    for (int v = 0; v < kV; ++v) S::store(y + kTileRows * t + S::kWidth * v, acc[v]);
  }
}

bool has_row_tiles(BlockType t) { return takes(t, kExecCpuRowTiles); }

namespace {
// The tile kernels of t: Q8_0's or Q4_K's (one case per type, no default: a new type states whether it has tiles).
enum class TileKind { kQ8_0, kQ4_K };
TileKind tile_kind(BlockType t) {
  switch (t) {
    case BlockType::kQ8_0:
      return TileKind::kQ8_0;
    case BlockType::kQ4_K:
      return TileKind::kQ4_K;
    case BlockType::kQ4_0:
    case BlockType::kQ5_0:
    case BlockType::kQ5_1:
    case BlockType::kQ5_K:
    case BlockType::kQ6_K:
      break;
  }
  fail("quant", block_info(t).name, " has no row tiles (the type table, quant/types.h, gives ", block_info(t).name,
       " no kExecCpuRowTiles)");
}
}  // namespace

void tile_rows(BlockType t, uint8_t* rows, int64_t n_tiles, int64_t cols) {
  if (tile_kind(t) == TileKind::kQ8_0)
    tile_q8_0(rows, n_tiles, cols);
  else
    tile_q4_k(rows, n_tiles, cols);
}

void tile_row(BlockType t, const uint8_t* tile, int64_t cols, int l, uint8_t* out) {
  if (tile_kind(t) == TileKind::kQ8_0)
    q8_0_tile_row(tile, cols, l, reinterpret_cast<BlockQ8_0*>(out));
  else
    q4_k_tile_row(tile, cols, l, reinterpret_cast<BlockQ4_K*>(out));
}

void dot_tiles(BlockType t, const uint8_t* tiles, int64_t n_tiles, const Q8Acts& a, float* y) {
  if (tile_kind(t) == TileKind::kQ8_0)
    dot_q8_0_tiles(tiles, n_tiles, a, y);
  else
    dot_q4_k_tiles(tiles, n_tiles, a, y);
}

namespace {

// dot_q8_0_tiles for NT token vectors at once: each W8 group of a tile block is loaded once and multiplied with every
// token's 4 activations; per token and row the arithmetic is dot_q8_0_tiles' (exact int32 per block, then the same
// fp32 multiply and multiply-add per block, blocks in order), so each output has its bits.
template <int NT>
void q8_0_tiles_tokens(const uint8_t* tiles, int64_t n_tiles, const Q8Acts* a, float* y, int64_t ldy) {
  constexpr int kV = static_cast<int>(kQ8TileRows) / S::kWidth;
  constexpr int32_t kOffset = kQ8TileFlip ? -128 : 0;
  const int64_t nb = a[0].n / 32;
  for (int64_t t = 0; t < n_tiles; ++t) {
    const uint8_t* p = tiles + t * nb * kQ8TileBlockBytes;
    S::F32 acc[NT][kV];
    for (int k = 0; k < NT; ++k)
      for (int v = 0; v < kV; ++v) acc[k][v] = S::zero();
    for (int64_t b = 0; b < nb; ++b, p += kQ8TileBlockBytes) {
      prefetch_tile_block<kQ8TileBlockBytes>(p);
      const auto ub = static_cast<size_t>(b);
      S::GI32 s[NT][kV];
      for (int k = 0; k < NT; ++k)
        for (int v = 0; v < kV; ++v) s[k][v] = S::set1_i32(kOffset * a[k].sums32[ub]);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        int32_t a4[NT];
        for (int k = 0; k < NT; ++k) std::memcpy(&a4[k], a[k].q.data() + 32 * b + 4 * j, 4);
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) {
          const S::W8 w = S::load_w8(p + 32 + 64 * j + 4 * S::kWidth * v);
#pragma GCC unroll 8
          for (int k = 0; k < NT; ++k)
            s[k][v] = kQ8TileFlip ? S::dot4_u8(s[k][v], w, a4[k]) : S::dot4_s8(s[k][v], w, a4[k]);
        }
      }
      const auto* dw = reinterpret_cast<const uint16_t*>(p);
      for (int v = 0; v < kV; ++v)
#pragma GCC unroll 8
        for (int k = 0; k < NT; ++k)
          acc[k][v] =
              S::fmadd(S::to_f32(s[k][v]), S::mul(S::load_h(dw + S::kWidth * v), S::set1(a[k].d[ub])), acc[k][v]);
    }
    for (int k = 0; k < NT; ++k)
      for (int v = 0; v < kV; ++v) S::store(y + k * ldy + kQ8TileRows * t + S::kWidth * v, acc[k][v]);
  }
}

// dot_q4_k_tiles for NT token vectors at once: each pair of W8 groups is loaded and split into nibbles once, the
// rows' scales and mins widened once per sub-block, for every token; per token and row dot_q4_k_tiles' arithmetic.
template <int NT>
void q4_k_tiles_tokens(const uint8_t* tiles, int64_t n_tiles, const Q8Acts* a, float* y, int64_t ldy) {
  constexpr int kV = static_cast<int>(kTileRows) / S::kWidth;
  const int64_t nb = a[0].n / 256;
  for (int64_t t = 0; t < n_tiles; ++t) {
    const uint8_t* p = tiles + t * nb * kQ4KTileBlockBytes;
    S::F32 acc[NT][kV];
    for (int k = 0; k < NT; ++k)
      for (int v = 0; v < kV; ++v) acc[k][v] = S::zero();
    for (int64_t b = 0; b < nb; ++b, p += kQ4KTileBlockBytes) {
      prefetch_tile_block<kQ4KTileBlockBytes>(p);
      S::GI32 sum[NT][kV], mins[NT][kV];
      for (int k = 0; k < NT; ++k)
        for (int v = 0; v < kV; ++v) sum[k][v] = mins[k][v] = S::set1_i32(0);
      for (int s = 0; s < 8; ++s) {
        S::GI32 is[NT][kV];
        for (int k = 0; k < NT; ++k)
          for (int v = 0; v < kV; ++v) is[k][v] = S::set1_i32(0);
#pragma GCC unroll 4
        for (int pp = 0; pp < 4; ++pp) {
          int32_t a0[NT], a1[NT];
          for (int k = 0; k < NT; ++k) {
            const int8_t* const aq = a[k].qk.data() + 256 * b + 32 * s + 8 * pp;
            std::memcpy(&a0[k], aq, 4);
            std::memcpy(&a1[k], aq + 4, 4);
          }
#pragma GCC unroll 4
          for (int v = 0; v < kV; ++v) {
            const S::W8 w = S::load_w8(p + 256 + 256 * s + 64 * pp + 4 * S::kWidth * v);
            const S::W8 lo = S::lo4_w8(w), hi = S::hi4_w8(w);
#pragma GCC unroll 8
            for (int k = 0; k < NT; ++k) is[k][v] = S::dot4_u8(S::dot4_u8(is[k][v], lo, a0[k]), hi, a1[k]);
          }
        }
        for (int v = 0; v < kV; ++v) {
          const S::GI32 lo = S::load_u8_gi32(p + 64 + 16 * s + S::kWidth * v);
          const S::GI32 hi8 = S::load_u8_gi32(p + 192 + 16 * (s / 2) + S::kWidth * v);
          const S::GI32 hi = s % 2 ? S::shr_gi32<4>(hi8) : S::and_gi32(hi8, 15);
          const S::GI32 sc = S::and_gi32(lo, 63), m = S::or_gi32(S::shr_gi32<6>(lo), S::shl_gi32<2>(hi));
#pragma GCC unroll 8
          for (int k = 0; k < NT; ++k) {
            sum[k][v] = S::add_gi32(sum[k][v], S::mullo_gi32(is[k][v], sc));
            mins[k][v] =
                S::add_gi32(mins[k][v], S::mullo_gi32(m, S::set1_i32(a[k].bsums32[static_cast<size_t>(8 * b + s)])));
          }
        }
      }
      for (int v = 0; v < kV; ++v) {
        const auto* h = reinterpret_cast<const uint16_t*>(p) + S::kWidth * v;
#pragma GCC unroll 8
        for (int k = 0; k < NT; ++k) {
          const S::F32 da = S::set1(a[k].dk[static_cast<size_t>(b)]);
          acc[k][v] = S::fmadd(S::to_f32(sum[k][v]), S::mul(S::load_h(h), da), acc[k][v]);
          acc[k][v] = S::fnmadd(S::to_f32(mins[k][v]), S::mul(S::load_h(h + kTileRows), da), acc[k][v]);
        }
      }
    }
    for (int k = 0; k < NT; ++k)
      for (int v = 0; v < kV; ++v) S::store(y + k * ldy + kTileRows * t + S::kWidth * v, acc[k][v]);
  }
}

using TilesTokensFn = void (*)(const uint8_t*, int64_t, const Q8Acts*, float*, int64_t);  // one per token count
template <int... I>
constexpr std::array<TilesTokensFn, sizeof...(I)> q8_0_token_table(std::integer_sequence<int, I...>) {
  return {&q8_0_tiles_tokens<I + 1>...};
}
template <int... I>
constexpr std::array<TilesTokensFn, sizeof...(I)> q4_k_token_table(std::integer_sequence<int, I...>) {
  return {&q4_k_tiles_tokens<I + 1>...};
}

}  // namespace

void dot_tiles_tokens(BlockType t, const uint8_t* tiles, int64_t n_tiles, const Q8Acts* a, int64_t n_tok, float* y,
                      int64_t ldy) {
  for (int64_t k = 0; k < n_tok; ++k) {
    check_form(t, a[k]);
    ANELAB_CHECK(a[k].n == a[0].n, "quant", "tile dot products of ", n_tok, " tokens: token ", k, " has ", a[k].n,
                 " values, token 0 ", a[0].n);
  }
  static constexpr auto kQ8 = q8_0_token_table(std::make_integer_sequence<int, kBatchTokens>{});
  static constexpr auto kQ4K = q4_k_token_table(std::make_integer_sequence<int, kBatchTokens>{});
  const auto& table = tile_kind(t) == TileKind::kQ8_0 ? kQ8 : kQ4K;
  for (int64_t k = 0; k < n_tok; k += kBatchTokens) {
    const int64_t m = std::min<int64_t>(kBatchTokens, n_tok - k);
    table[static_cast<size_t>(m - 1)](tiles, n_tiles, a + k, y + k * ldy, ldy);
  }
}

void quantize_acts(const float* x, int64_t n, unsigned forms, Q8Acts& a) {
  ANELAB_CHECK(n % 32 == 0, "quant", "activations of ", n, " values are not whole blocks of 32");
  ANELAB_CHECK((forms & kActsQ8_K) == 0 || n % 256 == 0, "quant", "Q8_K activations of ", n,
               " values are not whole blocks of 256");
  a.n = n;
  a.forms = forms;
  if (forms & kActsQ8_0) {
    grow(a.q, n), grow(a.d, n / 32), grow(a.s, n / 32), grow(a.sums16, n / 16), grow(a.sums32, n / 32);
    quantize_q8_0_form(x, n, a);
  }
  if (forms & kActsQ8_K) {
    grow(a.qk, n), grow(a.dk, n / 256), grow(a.bsums, n / 16), grow(a.bsums32, n / 32);
    quantize_q8_k_form(x, n, a);
  }
}

void quantize_acts(const float* x, int64_t n, Q8Acts& a) {
  quantize_acts(x, n, n % 256 == 0 ? kActsAll : kActsQ8_0, a);
}

double acts_rounding_bound(const Q8Acts& a, BlockType t, int64_t i) {
  if (acts_form(t) == kActsQ8_K) return std::fabs(double(a.dk[static_cast<size_t>(i / 256)])) / 2;
  return double(a.d[static_cast<size_t>(i / 32)]) * (1.0 + 0x1p-10) * (0.5 + 127.0 * 0x1p-11);
}

float dot_row(BlockType t, const uint8_t* row, const Q8Acts& a) {
  check_form(t, a);
  float y = 0.0f;
  kernels(t).one(row, 0, a, &y);
  return y;
}

void dot_rows(BlockType t, const uint8_t* rows, int64_t row_bytes, int64_t n_rows, const Q8Acts& a, float* y) {
  check_form(t, a);
  const Kernels k = kernels(t);
  int64_t r = 0;
  for (; r + kRows <= n_rows; r += kRows) k.many(rows + r * row_bytes, row_bytes, a, y + r);
  for (; r < n_rows; ++r) k.one(rows + r * row_bytes, row_bytes, a, y + r);
}

}  // namespace anelab::quant
