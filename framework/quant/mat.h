// The CPU's weight matrix: fp32, fp16 or rows of quantized blocks (blocks.h), in place in a model file's
// mapping. The CPU inference engine (infer/cpu_math.h) computes on it; the MIL kernels
// (framework/kernels/layer.h, LayerWeights) take it as the source of the weights they bake, dequantized on the
// host (kern::mat_values).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/quant/types.h"

namespace anelab::quant {

// A weight matrix's element type: fp32, fp16, or one of the table's block types (types.h).
enum class WType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kQ8_0 = 2,
  kQ4_0 = 3,
  kQ4_K = 4,
  kQ6_K = 5,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ5_K = 8
};
// The block types are the rows of the type table (types.h); these convert through it.
std::optional<BlockType> block_type_of(WType t);  // nullopt for fp32 / fp16
bool is_quantized(WType t);                       // a block type
BlockType block_type(WType t);                    // block types; throws "[quant] ..." for fp32 / fp16
WType wtype_of(BlockType t);
const char* wtype_name(WType t);  // "fp32", "fp16" or the table's name ("q8_0", ...)

// A weight matrix [rows, cols] row-major (y = W x): fp32 or fp16 bits, or rows of blocks of a block type
// (each row cols / block values blocks); the data is not owned. A Q8_0 or Q4_K matrix may hold its first
// tiled_rows rows (a multiple of 16) as row tiles (tile_rows, the decode layout), in the bytes those rows take.
struct Mat {
  WType type = WType::kF32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  int64_t tiled_rows = 0;
  const float* f32() const { return static_cast<const float*>(data); }
  const half_bits* f16() const { return static_cast<const half_bits*>(data); }
  const uint8_t* row_blocks(int64_t r) const;    // block types: the blocks of row r (r >= tiled_rows)
  const uint8_t* tile(int64_t t) const;          // tile t (rows 16t..16t+15 < tiled_rows)
  void row_values(int64_t r, float* out) const;  // row r as fp32 (fp16 widened, blocks and tiles dequantized)
  int64_t nbytes() const;                        // bytes of the whole matrix
  bool empty() const { return data == nullptr; }
  // An fp32 view of v as [rows, cols]; throws "[quant] ..." when the sizes differ.
  static Mat f32(std::span<const float> v, int64_t rows, int64_t cols);
};

}  // namespace anelab::quant
