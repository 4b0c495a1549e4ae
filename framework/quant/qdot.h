// Dot products of block-quantized weight rows with int8-quantized activations, the inner loop of the
// quantized GEMV (and of the CPU prefill over block matrices). The activation vector is quantized once per
// GEMV, in the form llama.cpp's CPU backend uses for each weight type, so both programs round the same way:
//
//   Q8_0 form (for Q8_0, Q4_0, Q5_0, Q5_1 weights): blocks of 32, d = amax / 127 stored as fp16 and used as the
//     fp16 value, q = round_half_even(x * 127 / amax), plus the sums of q over each 16 and 32 values (for the
//     prefill GEMM)                                                   (ggml's x86 quantize_row_q8_0)
//     and s = fp16((amax / 127) sum q) per 32 (Q8_1's s, for Q5_1's offsets: ggml's x86 quantize_row_q8_1)
//   Q8_K form (for Q4_K, Q5_K, Q6_K weights): blocks of 256, fp32 d = max / -127 where max is the first value of
//     largest magnitude (with its sign), q = min(127, round_half_even(x * -127 / max)), plus bsums, the sum of
//     q over each 16 (and 32) values                                           (ggml's quantize_row_q8_K_ref)
//
// then every weight block is combined with its activation block by exact int32 sums (simd I8/I32 vectors:
// AVX-512 VNNI, AVX2, NEON SDOT or SMULL, scalar), one fp32 multiply-add per block:
//
//   Q8_0  d_w d_a sum(q_w q_a)                                   per block of 32
//   Q4_0  d_w d_a sum((n - 8) q_a)                               n = nibble
//   Q5_0  d_w d_a sum(((n | h << 4) - 16) q_a)
//   Q5_1  d_w d_a sum((n | h << 4) q_a) + m_w s_a
//   Q4_K  d_a d sum_j sc_j sum(n q_a) - d_a dmin sum_j m_j (bsum_2j + bsum_2j+1)   per super-block of 256
//   Q5_K  as Q4_K with n | h << 4
//   Q6_K  d_a d (sum_s sc_s sum(q q_a) - 32 sum_s sc_s bsum_s)   q in 0..63, sub-blocks s of 16
//
// The result differs from the dot product with the dequantized weights only by the activation rounding:
// |error| <= sum_i |w_i| d_a(i) / 2 (d_a(i): the scale of the activation block holding i; plus fp32 rounding).
// Each row's arithmetic does not depend on how many rows are taken together, so dot_rows and dot_row agree
// bit for bit.
//
// Both forms are vectorised (simd abs, max, mul, cvt_i32, pack_i8, sum16_i8). amax ignores NaN values (as
// std::max(amax, |x|) does). A product x * scale that is NaN or beyond int32 (an infinite x, or every x of a
// block whose 127 / amax overflows: amax below about 2^-121) becomes -128, as ggml's x86 cvtps2dq and saturating
// packs make it; the Q8_K form clamps to 127 first, so there NaN and +inf give 127, -inf -128.
//
// Q8_0 row tiles, the decode layout of Q8_0 matrices held in the program's own memory (infer::Engine rewrites
// them in place; never written to a file). 16 rows of Q8_0 blocks (16 x nb x 34 bytes, nb = cols / 32) become nb
// tile blocks of 16 x 34 = 544 bytes, tile block b:
//   bytes 0-31     the 16 rows' fp16 scales d of block b (row l's at 2l)
//   bytes 32-543   8 groups j of 64 bytes: row l's values 4j..4j+3 of block b at 32 + 64j + 4l, each q ^ kQ8TileFlip
// One 64-byte group holds 4 values of all 16 rows: simd::W8 vectors of kWidth rows x 4 bytes, multiplied with 4
// broadcast activations (vpdpbusd / SDOT), so a GEMV reads 16 rows as one sequential stream with a fraction of
// the row-at-a-time kernel's instructions per byte. kQ8TileFlip is 0x80 where the int8 dot takes any unsigned byte
// (AVX-512 VNNI, scalar): q + 128 as u8, each block's sum starting at -128 sum(q_a); else 0 (signed bytes). The
// tiled region of a matrix occupies exactly the bytes of the rows it holds, so rows past it stay rows of blocks.
//
// Q4_K row tiles, the same idea for Q4_K: 16 rows of nb = cols / 256 super-blocks become nb tile blocks of
// 16 x 144 = 2304 bytes, tile block b (sub-block s < 8 holds values 32s..32s+31 of super-block b):
//   bytes 0-31      the 16 rows' fp16 d (row l's at 2l);  bytes 32-63  their fp16 dmin
//   bytes 64-191    row l's sub-block s at 64 + 16s + l: sc | (m & 3) << 6 (the 6-bit scale and min)
//   bytes 192-255   row l's m >> 2 of sub-blocks 2k and 2k + 1 at 192 + 16k + l: low and high nibble
//   bytes 256-2303  sub-block s, pair p < 4: 64 bytes at 256 + 256s + 64p, byte 4l + i: row l's value 8p + i of the
//                   sub-block in the low nibble, value 8p + 4 + i in the high nibble
// So a pair is two W8 groups once split into nibbles (simd::lo4_w8 / hi4_w8), and a sub-block's 16 scales and
// mins are kWidth-lane int32 vectors after one widening load each: 16 rows of Q4_K take about a quarter of the
// row kernel's instructions per byte (AVX-512: 356 per tile block against 16 x 97).
//
// Interface: quantize_acts(x, n, a) fills every form the length allows (the Q8_K form when n % 256 == 0);
// quantize_acts(x, n, forms, a) only the forms asked for (acts_form(type) names the one a type reads);
// dot_row / dot_rows read the form of their type. Q8Acts buffers only grow: no allocation per token.
#pragma once
#include <cstdint>
#include <vector>

#include "framework/quant/blocks.h"
#include "framework/simd/simd.h"

namespace anelab::quant {

// Row tiles (layouts above): kTileRows rows of Q8_0 or Q4_K blocks in the bytes those rows take.
constexpr int64_t kTileRows = 16;
constexpr int64_t kQ8TileRows = kTileRows, kQ8TileBlockBytes = kTileRows * 34, kQ4KTileBlockBytes = kTileRows * 144;
constexpr uint8_t kQ8TileFlip = simd::kDotU8Max >= 255 ? 0x80 : 0;

struct Q8Acts {
  int64_t n = 0;                 // values (a multiple of 32)
  unsigned forms = 0;            // ActsForm bits filled for this x
  std::vector<int8_t> q;         // [n] Q8_0 form
  std::vector<float> d;          // [n / 32] its fp16 scales, as floats
  std::vector<float> s;          // [n / 32] fp16(amax / 127 * sum of q) per 32 values, as floats (Q5_1's offsets)
  std::vector<int32_t> sums16;   // [n / 16] sums of q per 16 values
  std::vector<int32_t> sums32;   // [n / 32] sums of q per 32 values
  std::vector<int8_t> qk;        // [n] Q8_K form
  std::vector<float> dk;         // [n / 256] its fp32 scales
  std::vector<int16_t> bsums;    // [n / 16] sums of qk per 16 values
  std::vector<int16_t> bsums32;  // [n / 32] sums of qk per 32 values
};

// Quantizes x [n] (n a multiple of 32) into a: every form n allows, or the forms asked for.
void quantize_acts(const float* x, int64_t n, Q8Acts& a);
void quantize_acts(const float* x, int64_t n, unsigned forms, Q8Acts& a);
// The largest |x_i - x̂_i| of the form type t reads, x̂_i the value its int8 stands for: d_k / 2 for Q8_K; for
// Q8_0 the scale is fp16(s), s = amax / 127, and q rounds x / s, so s (1/2 + 127 2^-11) (fp16 rounding of s,
// normal range) with s <= d (1 + 2^-10).
double acts_rounding_bound(const Q8Acts& a, BlockType t, int64_t i);
// sum_i w_i x_i for one weight row of a.n values stored as type t.
float dot_row(BlockType t, const uint8_t* row, const Q8Acts& a);
// y[r] = dot_row(t, rows + r * row_bytes, a) for r < n_rows (the next row's blocks prefetched as it goes).
void dot_rows(BlockType t, const uint8_t* rows, int64_t row_bytes, int64_t n_rows, const Q8Acts& a, float* y);

// Rewrites the first 16 n_tiles rows of a Q8_0 matrix (rows of cols / 32 blocks from `rows`) in place as tiles.
void tile_q8_0(uint8_t* rows, int64_t n_tiles, int64_t cols);
// Row l (< 16) of one tile (the tile's first byte at `tile`) back as its cols / 32 Q8_0 blocks.
void q8_0_tile_row(const uint8_t* tile, int64_t cols, int l, BlockQ8_0* out);
// y[16 t + l] = the dot product of row l of tile t with a (a Q8_0-form, a.n = cols) for t < n_tiles; the same
// arithmetic as dot_row (exact int32 per block, one fp32 multiply-add per block) in another summation order.
void dot_q8_0_tiles(const uint8_t* tiles, int64_t n_tiles, const Q8Acts& a, float* y);

// Q4_K row tiles (layout above), as the three functions above; a is the Q8_K form.
void tile_q4_k(uint8_t* rows, int64_t n_tiles, int64_t cols);
void q4_k_tile_row(const uint8_t* tile, int64_t cols, int l, BlockQ4_K* out);
void dot_q4_k_tiles(const uint8_t* tiles, int64_t n_tiles, const Q8Acts& a, float* y);

// The types with row tiles, and the functions above by type: tile_rows rewrites the first 16 n_tiles rows (each
// cols values) in place, tile_row writes row l of one tile as the type's blocks, dot_tiles as dot_*_tiles.
bool has_row_tiles(BlockType t);
void tile_rows(BlockType t, uint8_t* rows, int64_t n_tiles, int64_t cols);
void tile_row(BlockType t, const uint8_t* tile, int64_t cols, int l, uint8_t* out);
void dot_tiles(BlockType t, const uint8_t* tiles, int64_t n_tiles, const Q8Acts& a, float* y);

// The row-tile dot products of n_tok activation vectors at once (the batched decode GEMV): a[k] for k < n_tok, each
// in the form of t with a[k].n = cols; y[k ldy + 16 i + l] = dot_tiles(t, tiles, n_tiles, a[k]) for row l of tile i,
// bit for bit. Each tile block is read once for up to kBatchTokens tokens: its weight groups are loaded (Q4_K: split
// into nibbles, scales widened) once and multiplied with every token's activations, where dot_tiles of each token
// loads them again; more tokens run kBatchTokens at a time.
constexpr int kBatchTokens = 8;
void dot_tiles_tokens(BlockType t, const uint8_t* tiles, int64_t n_tiles, const Q8Acts* a, int64_t n_tok, float* y,
                      int64_t ldy);

}  // namespace anelab::quant
