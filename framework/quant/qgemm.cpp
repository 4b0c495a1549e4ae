#include "framework/quant/qgemm.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/core/error.h"
#include "framework/quant/qdot.h"
#include "framework/simd/simd.h"

namespace anelab::quant {
namespace {

namespace S = simd;
constexpr int kMR = S::kQGemmMR, kNV = S::kQGemmNV, kVW = S::kWidth, kNR = kNV * kVW;
constexpr int64_t kKC = 512;           // k block: whole Q4_K / Q6_K blocks
constexpr int64_t kMinWork = 1 << 16;  // below this many multiply-adds the pool's wake-up costs more

// One (row panel, k block) of W unpacked for the micro-kernel.
struct Panel {
  std::vector<int8_t> w;     // [kc / 4][kNR][4] integers of the type (Q8_0 with vpdpbusd: q + 128 as u8)
  std::vector<float> scale;  // [kc / group][kNR] per-row scale of each group
  std::vector<float> min;    // [kc / 32][kNR] Q4_K / Q5_K: dmin m_j of each sub-block; Q5_1: -m of each block
};

// Every token's activations, quantized once per call: the Q8_0 form (int8 blocks of 32, fp16 scales as floats)
// with its sums of q per 16 and per 32 values (the groups of the recipes).
struct Acts {
  std::vector<Q8Acts> tok;  // [n_tok]
};
const int32_t* group_sums(const Q8Acts& a, int group) { return (group == 16 ? a.sums16 : a.sums32).data(); }

// How a type's integers go through the micro-kernel: isum of a group starts at offset * sum(q_a).
struct Recipe {
  int group;      // values per scale: 32, or 16 for Q6_K
  int offset;     // -128 (Q8_0 stored + 128), -8 (Q4_0), -32 (Q6_K), 0
  bool signed_w;  // weights are int8 (dot4_s8), else unsigned bytes <= kDotU8Max (dot4_u8)
  bool mins;      // Q4_K, Q5_K, Q5_1: subtract min * d_a sum(q_a) per group
};
constexpr bool kQ8Offset = S::kDotU8Max >= 255;  // Q8_0 as unsigned q + 128 where the dot takes any byte

Recipe recipe(BlockType t) {
  switch (t) {
    case BlockType::kQ8_0:
      return kQ8Offset ? Recipe{32, -128, false, false} : Recipe{32, 0, true, false};
    case BlockType::kQ4_0:
      return {32, -8, false, false};
    case BlockType::kQ5_0:
      return {32, -16, false, false};
    case BlockType::kQ5_1:
      return {32, 0, false, true};
    case BlockType::kQ4_K:
      return {32, 0, false, true};
    case BlockType::kQ5_K:
      return {32, 0, false, true};
    case BlockType::kQ6_K:
      return {16, -32, false, false};
  }
  return {32, 0, true, false};
}

// ---- unpack: one function per type; row r's blocks from the k block's start, kc values ----
// Four values at a time as a 32-bit word (byte-wise masks and shifts: the same on any byte order), each
// stored as row r's 4-byte group of its k.
inline uint32_t ld4(const void* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}
inline void st4(int8_t* w, int r, int64_t k, uint32_t u) { std::memcpy(w + (k / 4 * kNR + r) * 4, &u, 4); }
constexpr uint32_t kLo4 = 0x0F0F0F0Fu, kLo2 = 0x03030303u;

void unpack_q8_0(const uint8_t* row, int r, int64_t kc, Panel& p) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
  int8_t* const w = p.w.data();
  const uint32_t flip = kQ8Offset ? 0x80808080u : 0u;  // q + 128 as u8
  for (int64_t i = 0; i < kc / 32; ++i) {
    for (int j = 0; j < 32; j += 4) st4(w, r, 32 * i + j, ld4(b[i].qs + j) ^ flip);
    p.scale[static_cast<size_t>(i * kNR + r)] = S::h2f(b[i].d);
  }
}

// A whole panel of Q8_0 rows (kNR rows, row_bytes apart): each block's 32 values of kVW rows transposed into
// the panel's 8 W8 at once.
void unpack_q8_0_panel(const uint8_t* row0, int64_t row_bytes, int64_t kc, Panel& p) {
  const uint8_t flip = kQ8Offset ? 0x80 : 0;  // q + 128 as u8
  for (int64_t i = 0; i < kc / 32; ++i) {
    const uint8_t* qs = row0 + i * int64_t{sizeof(BlockQ8_0)} + offsetof(BlockQ8_0, qs);
    for (int v = 0; v < kNV; ++v)
      S::rows_w8x8(qs + v * kVW * row_bytes, row_bytes, flip, p.w.data() + (i * 8 * kNR + v * kVW) * 4, kNR * 4);
    for (int r = 0; r < kNR; ++r)
      p.scale[static_cast<size_t>(i * kNR + r)] = S::h2f(reinterpret_cast<const BlockQ8_0*>(row0 + r * row_bytes)[i].d);
  }
}

// Panel rows 0..n (<= kNR) from row tiles of blocks of `values` (tile blocks of block_bytes; the panel's first row
// is matrix row pr), k block from k0: f(r, l, e, tb) for each run of e panel rows from r that lie in one tile, from
// its row l, tb that tile's block at k0.
template <typename F>
void tile_runs(const uint8_t* tiles, int64_t cols, int64_t values, int64_t block_bytes, int64_t pr, int n, int64_t k0,
               F f) {
  const int64_t tile_bytes = cols / values * block_bytes;
  for (int r = 0, e; r < n; r += e) {
    const int64_t row = pr + r, l = row % kTileRows;
    e = static_cast<int>(std::min<int64_t>(n - r, kTileRows - l));
    f(r, l, e, tiles + row / kTileRows * tile_bytes + k0 / values * block_bytes);
  }
}

// Q8_0 tiles (k block k0..k0 + kc): each tile group's 4-byte words of the rows are the panel's, already flipped
// alike (static_assert).
static_assert(kQ8TileFlip == (kQ8Offset ? 0x80 : 0), "Q8_0 tiles store the bytes the micro-kernel reads");
void unpack_q8_0_tiles(const uint8_t* tiles, int64_t cols, int64_t pr, int n, int64_t k0, int64_t kc, Panel& p) {
  tile_runs(tiles, cols, 32, kQ8TileBlockBytes, pr, n, k0, [&](int r, int64_t l, int e, const uint8_t* tb) {
    for (int64_t i = 0; i < kc / 32; ++i, tb += kQ8TileBlockBytes) {
      for (int j = 0; j < 8; ++j) {
        int8_t* const dst = p.w.data() + ((8 * i + j) * kNR + r) * 4;
        if (e == kQ8TileRows)
          std::memcpy(dst, tb + 32 + 64 * j, 4 * kQ8TileRows);  // a whole group: one inlined 64-byte copy
        else
          std::memcpy(dst, tb + 32 + 64 * j + 4 * l, 4 * size_t(e));
      }
      for (int m = 0; m < e; ++m) {
        uint16_t d;
        std::memcpy(&d, tb + 2 * (l + m), 2);
        p.scale[static_cast<size_t>(i * kNR + r + m)] = S::h2f(d);
      }
    }
  });
}

// Q4_K tiles, as unpack_k_affine<BlockQ4_K> makes the panel from rows: each tile pair's 64 bytes split into its two
// groups of the rows taken (low nibbles, high nibbles); the scales and mins unpacked.
void unpack_q4_k_tiles(const uint8_t* tiles, int64_t cols, int64_t pr, int n, int64_t k0, int64_t kc, Panel& p) {
  tile_runs(tiles, cols, 256, kQ4KTileBlockBytes, pr, n, k0, [&](int r, int64_t l, int e, const uint8_t* tb) {
    for (int64_t i = 0; i < kc / 256; ++i, tb += kQ4KTileBlockBytes) {
      for (int s = 0; s < 8; ++s) {
        for (int pp = 0; pp < 4; ++pp) {
          const int64_t g = 64 * i + 8 * s + 2 * pp;  // the pair's first group (4 values) in the k block
          const uint8_t* src = tb + 256 + 256 * s + 64 * pp + 4 * l;
          int8_t* const lo = p.w.data() + (g * kNR + r) * 4;
          int8_t* const hi = lo + kNR * 4;
          int64_t b = 0;
          for (; b + 8 <= 4 * int64_t{e}; b += 8) {  // 2 rows (8 bytes) at a time
            uint64_t u;
            std::memcpy(&u, src + b, 8);
            const uint64_t ul = u & 0x0F0F0F0F0F0F0F0Full, uh = (u >> 4) & 0x0F0F0F0F0F0F0F0Full;
            std::memcpy(lo + b, &ul, 8);
            std::memcpy(hi + b, &uh, 8);
          }
          if (b < 4 * int64_t{e}) {  // the last row when e is odd
            const uint32_t u = ld4(src + b), ul = u & kLo4, uh = (u >> 4) & kLo4;
            std::memcpy(lo + b, &ul, 4);
            std::memcpy(hi + b, &uh, 4);
          }
        }
      }
      for (int m = 0; m < e; ++m) {
        uint16_t dh, mh;
        std::memcpy(&dh, tb + 2 * (l + m), 2);
        std::memcpy(&mh, tb + 32 + 2 * (l + m), 2);
        const float d = S::h2f(dh), dmin = S::h2f(mh);
        for (int s = 0; s < 8; ++s) {
          const int a = tb[64 + 16 * s + l + m], h = (tb[192 + 16 * (s / 2) + l + m] >> (4 * (s % 2))) & 15;
          const auto at = static_cast<size_t>((8 * i + s) * kNR + r + m);
          p.scale[at] = d * static_cast<float>(a & 63);
          p.min[at] = dmin * static_cast<float>(a >> 6 | h << 2);
        }
      }
    }
  });
}

void unpack_q4_0(const uint8_t* row, int r, int64_t kc, Panel& p) {
  const auto* b = reinterpret_cast<const BlockQ4_0*>(row);
  int8_t* const w = p.w.data();
  for (int64_t i = 0; i < kc / 32; ++i) {
    for (int j = 0; j < 16; j += 4) {  // value j: low nibble of qs[j]; value 16 + j: its high nibble
      const uint32_t u = ld4(b[i].qs + j);
      st4(w, r, 32 * i + j, u & kLo4);
      st4(w, r, 32 * i + 16 + j, (u >> 4) & kLo4);
    }
    p.scale[static_cast<size_t>(i * kNR + r)] = S::h2f(b[i].d);
  }
}

// Bytes 0x10 where values v..v+3 of a 32-value block have their 5th bit (bit v of the 4 bytes qh, little-endian).
inline uint32_t high4(const uint8_t* qh, int v) {
  uint8_t h[4];
  for (int m = 0; m < 4; ++m) h[m] = static_cast<uint8_t>(((qh[(v + m) / 8] >> ((v + m) % 8)) & 1) << 4);
  return ld4(h);
}

// Q5_0 and Q5_1 (B): 5-bit q (the -16 of Q5_0 is the micro-kernel's offset; Q5_1's m goes in as the min -m).
template <typename B>
void unpack_q5(const uint8_t* row, int r, int64_t kc, Panel& p) {
  const auto* b = reinterpret_cast<const B*>(row);
  int8_t* const w = p.w.data();
  for (int64_t i = 0; i < kc / 32; ++i) {
    for (int j = 0; j < 16; j += 4) {  // value j: low nibble of qs[j]; value 16 + j: its high nibble
      const uint32_t u = ld4(b[i].qs + j);
      st4(w, r, 32 * i + j, (u & kLo4) | high4(b[i].qh, j));
      st4(w, r, 32 * i + 16 + j, ((u >> 4) & kLo4) | high4(b[i].qh, 16 + j));
    }
    p.scale[static_cast<size_t>(i * kNR + r)] = S::h2f(b[i].d);
    if constexpr (std::is_same_v<B, BlockQ5_1>) p.min[static_cast<size_t>(i * kNR + r)] = -S::h2f(b[i].m);
  }
}

// Q4_K and Q5_K (B): per sub-block scale d sc and min dmin m; Q5_K's 5th bits from qh (bit 2c / 2c + 1 of byte i).
template <typename B>
void unpack_k_affine(const uint8_t* row, int r, int64_t kc, Panel& p) {
  const auto* b = reinterpret_cast<const B*>(row);
  int8_t* const w = p.w.data();
  for (int64_t i = 0; i < kc / 256; ++i) {
    const float d = S::h2f(b[i].d), dmin = S::h2f(b[i].dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      q4k_scale_min(j, b[i].scales, sc, m);
      p.scale[static_cast<size_t>((8 * i + j) * kNR + r)] = d * static_cast<float>(sc);
      p.min[static_cast<size_t>((8 * i + j) * kNR + r)] = dmin * static_cast<float>(m);
    }
    for (int c = 0; c < 4; ++c)  // 64 values: low nibbles (sub-block 2c), then high nibbles (2c + 1)
      for (int j = 0; j < 32; j += 4) {
        const uint32_t u = ld4(b[i].qs + 32 * c + j);
        uint32_t lo = u & kLo4, hi = (u >> 4) & kLo4;
        if constexpr (std::is_same_v<B, BlockQ5_K>) {
          const uint32_t h = ld4(b[i].qh + j);
          lo |= ((h >> (2 * c)) & 0x01010101u) << 4;
          hi |= ((h >> (2 * c + 1)) & 0x01010101u) << 4;
        }
        st4(w, r, 256 * i + 64 * c + j, lo);
        st4(w, r, 256 * i + 64 * c + 32 + j, hi);
      }
  }
}

void unpack_q6_k(const uint8_t* row, int r, int64_t kc, Panel& p) {
  const auto* b = reinterpret_cast<const BlockQ6_K*>(row);
  int8_t* const w = p.w.data();
  for (int64_t i = 0; i < kc / 256; ++i) {
    for (int h = 0; h < 2; ++h) {  // q in 0..63 (the -32 is the micro-kernel's offset)
      const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
      const int64_t k = 256 * i + 128 * h;
      for (int j = 0; j < 32; j += 4) {
        const uint32_t l0 = ld4(ql + j), l1 = ld4(ql + 32 + j), hb = ld4(qh + j);
        st4(w, r, k + j, (l0 & kLo4) | (hb & kLo2) << 4);
        st4(w, r, k + 32 + j, (l1 & kLo4) | ((hb >> 2) & kLo2) << 4);
        st4(w, r, k + 64 + j, ((l0 >> 4) & kLo4) | ((hb >> 4) & kLo2) << 4);
        st4(w, r, k + 96 + j, ((l1 >> 4) & kLo4) | ((hb >> 6) & kLo2) << 4);
      }
    }
    const float d = S::h2f(b[i].d);
    for (int s = 0; s < 16; ++s)
      p.scale[static_cast<size_t>((16 * i + s) * kNR + r)] = d * static_cast<float>(b[i].scales[s]);
  }
}

using UnpackFn = void (*)(const uint8_t*, int, int64_t, Panel&);
UnpackFn unpacker(BlockType t) {
  switch (t) {
    case BlockType::kQ8_0:
      return unpack_q8_0;
    case BlockType::kQ4_0:
      return unpack_q4_0;
    case BlockType::kQ5_0:
      return unpack_q5<BlockQ5_0>;
    case BlockType::kQ5_1:
      return unpack_q5<BlockQ5_1>;
    case BlockType::kQ4_K:
      return unpack_k_affine<BlockQ4_K>;
    case BlockType::kQ5_K:
      return unpack_k_affine<BlockQ5_K>;
    case BlockType::kQ6_K:
      return unpack_q6_k;
  }
  return unpack_q8_0;
}

// The unpacker of t's row tiles (qdot.h); nullptr for a type without tiles (gemm checks has_row_tiles first).
using TileUnpackFn = void (*)(const uint8_t*, int64_t, int64_t, int, int64_t, int64_t, Panel&);
TileUnpackFn tile_unpacker(BlockType t) {
  switch (t) {
    case BlockType::kQ8_0:
      return unpack_q8_0_tiles;
    case BlockType::kQ4_K:
      return unpack_q4_k_tiles;
    case BlockType::kQ4_0:
    case BlockType::kQ5_0:
    case BlockType::kQ5_1:
    case BlockType::kQ5_K:
    case BlockType::kQ6_K:
      return nullptr;
  }
  return nullptr;
}

// ---- micro-kernel: Y[t0 + i, r0 + 0..nr) (+)= the panel's rows . token i's activations, i < MR ----
struct Tile {
  const Panel* p;
  int64_t kc;
  int offset;
  const int8_t* q[kMR];     // token i's int8 activations from the k block's start
  const float* d[kMR];      // its scales per 32 from there
  const int32_t* sum[kMR];  // its sums per group from there
  float* y;                 // Y[t0, r0]
  int64_t ldy, nr;
  bool first;         // first k block: Y = acc + bias; later: Y += acc
  const float* bias;  // bias + r0 or nullptr
};

template <int MR, int G, bool Signed, bool Mins>
void micro_kernel(const Tile& t) {
  S::F32 c[MR][kNV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < kNV; ++v) c[i][v] = S::zero();
  const int8_t* w = t.p->w.data();
  for (int64_t g = 0; g < t.kc / G; ++g) {
    S::GI32 s[MR][kNV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const S::GI32 o = S::set1_i32(t.offset * t.sum[i][g]);
      for (int v = 0; v < kNV; ++v) s[i][v] = o;
    }
#pragma GCC unroll 8
    for (int j = 0; j < G / 4; ++j, w += kNR * 4) {
      S::W8 wv[kNV];
      for (int v = 0; v < kNV; ++v) wv[v] = S::load_w8(w + v * kVW * 4);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        int32_t a4;
        std::memcpy(&a4, t.q[i] + g * G + 4 * j, 4);
        for (int v = 0; v < kNV; ++v)
          s[i][v] = Signed ? S::dot4_s8(s[i][v], wv[v], a4) : S::dot4_u8(s[i][v], wv[v], a4);
      }
    }
    const float* sc = t.p->scale.data() + g * kNR;
    S::F32 scv[kNV];
    for (int v = 0; v < kNV; ++v) scv[v] = S::load(sc + v * kVW);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const S::F32 da = S::set1(t.d[i][g * G / 32]);
      for (int v = 0; v < kNV; ++v) c[i][v] = S::fmadd(S::mul(S::to_f32(s[i][v]), da), scv[v], c[i][v]);
    }
    if constexpr (Mins) {
      const float* mn = t.p->min.data() + g * kNR;
      for (int v = 0; v < kNV; ++v) scv[v] = S::load(mn + v * kVW);
      for (int i = 0; i < MR; ++i) {
        const S::F32 ds = S::set1(t.d[i][g] * static_cast<float>(t.sum[i][g]));
        for (int v = 0; v < kNV; ++v) c[i][v] = S::fnmadd(scv[v], ds, c[i][v]);
      }
    }
  }
  for (int v = 0; v < kNV; ++v) {
    const int64_t n = t.nr - v * kVW;
    const S::F32 b = t.first && t.bias ? S::load_n(t.bias + v * kVW, n) : S::zero();
    for (int i = 0; i < MR; ++i) {
      float* yi = t.y + i * t.ldy + v * kVW;
      S::store_n(yi, S::add(c[i][v], t.first ? b : S::load_n(yi, n)), n);
    }
  }
}

using KernelFn = void (*)(const Tile&);
using KernelTable = std::array<KernelFn, kMR>;
template <int G, bool Signed, bool Mins, int... I>
constexpr KernelTable kernel_table(std::integer_sequence<int, I...>) {
  return {&micro_kernel<I + 1, G, Signed, Mins>...};
}
template <int G, bool Signed, bool Mins>
constexpr KernelTable kTable = kernel_table<G, Signed, Mins>(std::make_integer_sequence<int, kMR>{});

const KernelTable& kernels(const Recipe& r) {
  if (r.group == 16) return kTable<16, false, false>;
  if (r.mins) return kTable<32, false, true>;
  return r.signed_w ? kTable<32, true, false> : kTable<32, false, false>;
}

// ---- driver ----
void quantize_tokens(ThreadPool& pool, const float* x, int64_t n_tok, int64_t cols, Acts& a) {
  if (static_cast<int64_t>(a.tok.size()) < n_tok) a.tok.resize(static_cast<size_t>(n_tok));
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) quantize_acts(x + t * cols, cols, kActsQ8_0, a.tok[static_cast<size_t>(t)]);
  };
  if (n_tok * cols < kMinWork)
    body(0, n_tok);
  else
    pool.parallel_for(n_tok, 1, body);
}

void grow(Panel& p, bool mins) {
  if (p.w.size() < static_cast<size_t>(kKC * kNR)) p.w.resize(static_cast<size_t>(kKC * kNR));
  if (p.scale.size() < static_cast<size_t>(kKC / 16 * kNR)) p.scale.resize(static_cast<size_t>(kKC / 16 * kNR));
  if (mins && p.min.size() < static_cast<size_t>(kKC / 32 * kNR)) p.min.resize(static_cast<size_t>(kKC / 32 * kNR));
}

// Rows nr..kNR of a partial panel: zero weights and scales (their lanes are computed, never stored).
void zero_rows(Panel& p, int nr, int64_t kc, int group, bool mins) {
  for (int r = nr; r < kNR; ++r) {
    for (int64_t k = 0; k < kc; k += 4) st4(p.w.data(), r, k, 0);
    for (int64_t g = 0; g < kc / group; ++g) p.scale[static_cast<size_t>(g * kNR + r)] = 0.0f;
    if (mins)
      for (int64_t g = 0; g < kc / 32; ++g) p.min[static_cast<size_t>(g * kNR + r)] = 0.0f;
  }
}

}  // namespace

void gemm(ThreadPool& pool, BlockType bt, const uint8_t* w, int64_t rows, int64_t cols, const float* bias,
          const float* x, int64_t n_tok, float* y, int64_t tiled_rows) {
  const BlockInfo bi = block_info(bt);
  ANELAB_CHECK(cols % bi.values == 0, "quant", "gemm: ", cols, " columns are not whole ", bi.name, " blocks of ",
               bi.values);
  ANELAB_CHECK(tiled_rows == 0 || (has_row_tiles(bt) && tiled_rows % kTileRows == 0 && tiled_rows <= rows), "quant",
               "gemm: ", tiled_rows, " tiled rows of a ", bi.name, " matrix of ", rows, " rows");
  const Recipe rc = recipe(bt);
  const UnpackFn unpack = unpacker(bt);
  const TileUnpackFn unpack_tiles = tiled_rows > 0 ? tile_unpacker(bt) : nullptr;
  ANELAB_CHECK(tiled_rows == 0 || unpack_tiles, "quant", "gemm: ", bi.name, " has no tile unpacker");
  const KernelTable& kern = kernels(rc);
  const int64_t row_bytes = cols / bi.values * bi.bytes;
  thread_local Acts caller_acts;  // the caller's, grown once; workers read it through this reference
  Acts& acts = caller_acts;
  quantize_tokens(pool, x, n_tok, cols, acts);

  const auto piece = [&](int64_t r, int64_t k0) { return w + r * row_bytes + k0 / bi.values * bi.bytes; };
  auto body = [&](int64_t p0, int64_t p1) {
    thread_local Panel panel;  // per thread, grown once
    grow(panel, rc.mins);
    for (int64_t k0 = 0; k0 < cols; k0 += kKC) {
      const int64_t kc = std::min(kKC, cols - k0);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t r0 = p * kNR;
        const int nr = static_cast<int>(std::min<int64_t>(kNR, rows - r0));
        const int nt = static_cast<int>(std::clamp<int64_t>(tiled_rows - r0, 0, nr));  // rows from tiles
        if (nt > 0) unpack_tiles(w, cols, r0, nt, k0, kc, panel);
        if (nt == 0 && bt == BlockType::kQ8_0 && nr == kNR)
          unpack_q8_0_panel(piece(r0, k0), row_bytes, kc, panel);
        else
          for (int r = nt; r < nr; ++r) unpack(piece(r0 + r, k0), r, kc, panel);
        if (nr < kNR) zero_rows(panel, nr, kc, rc.group, rc.mins);
        Tile tile{&panel, kc, rc.offset, {}, {}, {}, nullptr, rows, nr, k0 == 0, bias ? bias + r0 : nullptr};
        for (int64_t t0 = 0; t0 < n_tok; t0 += kMR) {
          const int64_t mr = std::min<int64_t>(kMR, n_tok - t0);
          for (int64_t i = 0; i < mr; ++i) {
            const Q8Acts& a = acts.tok[static_cast<size_t>(t0 + i)];
            tile.q[i] = a.q.data() + k0;
            tile.d[i] = a.d.data() + k0 / 32;
            tile.sum[i] = group_sums(a, rc.group) + k0 / rc.group;
          }
          tile.y = y + t0 * rows + r0;
          kern[static_cast<size_t>(mr - 1)](tile);
        }
      }
    }
  };
  const int64_t panels = (rows + kNR - 1) / kNR;
  if (rows * cols * n_tok < kMinWork)
    body(0, panels);
  else
    pool.parallel_for(panels, 1, body);
}

}  // namespace anelab::quant
