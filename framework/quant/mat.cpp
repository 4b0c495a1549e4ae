// The CPU's weight matrix (see mat.h).
#include "framework/quant/mat.h"

#include <cstring>

#include "framework/core/error.h"
#include "framework/quant/blocks.h"
#include "framework/quant/qdot.h"

namespace anelab::quant {

Mat Mat::f32(std::span<const float> v, int64_t rows, int64_t cols) {
  ANELAB_CHECK(static_cast<int64_t>(v.size()) == rows * cols, "quant", "matrix of ", v.size(), " values is not [", rows,
               ", ", cols, "]");
  Mat m;
  m.type = WType::kF32;
  m.rows = rows, m.cols = cols, m.data = v.data();
  return m;
}

std::optional<BlockType> block_type_of(WType t) {
  switch (t) {
    case WType::kF32:
    case WType::kF16:
      return std::nullopt;
    case WType::kQ8_0:
      return BlockType::kQ8_0;
    case WType::kQ4_0:
      return BlockType::kQ4_0;
    case WType::kQ5_0:
      return BlockType::kQ5_0;
    case WType::kQ5_1:
      return BlockType::kQ5_1;
    case WType::kQ4_K:
      return BlockType::kQ4_K;
    case WType::kQ5_K:
      return BlockType::kQ5_K;
    case WType::kQ6_K:
      return BlockType::kQ6_K;
  }
  fail("quant", "weight type ", int(t), " is not a WType");
}

WType wtype_of(BlockType t) {
  switch (t) {
    case BlockType::kQ8_0:
      return WType::kQ8_0;
    case BlockType::kQ4_0:
      return WType::kQ4_0;
    case BlockType::kQ5_0:
      return WType::kQ5_0;
    case BlockType::kQ5_1:
      return WType::kQ5_1;
    case BlockType::kQ4_K:
      return WType::kQ4_K;
    case BlockType::kQ5_K:
      return WType::kQ5_K;
    case BlockType::kQ6_K:
      return WType::kQ6_K;
  }
  fail("quant", "block type ", int(t), " is not a BlockType");
}

bool is_quantized(WType t) { return block_type_of(t).has_value(); }

BlockType block_type(WType t) {
  const std::optional<BlockType> b = block_type_of(t);
  ANELAB_CHECK(b.has_value(), "quant", "weight type ", wtype_name(t), " is not a block type");
  return *b;
}

const char* wtype_name(WType t) {
  if (t == WType::kF32) return "fp32";
  if (t == WType::kF16) return "fp16";
  return traits(block_type(t)).name;
}

const uint8_t* Mat::row_blocks(int64_t r) const {
  ANELAB_CHECK(r >= tiled_rows, "quant", "row ", r, " of a matrix is inside its row tiles (rows < ", tiled_rows,
               "): read it with row_values or tile()");
  const BlockInfo b = block_info(block_type(type));
  return static_cast<const uint8_t*>(data) + r * (cols / b.values * b.bytes);
}

const uint8_t* Mat::tile(int64_t t) const {
  ANELAB_CHECK(t >= 0 && kTileRows * (t + 1) <= tiled_rows, "quant", "tile ", t, " past the ", tiled_rows,
               " tiled rows");
  const BlockInfo b = block_info(block_type(type));
  return static_cast<const uint8_t*>(data) + t * kTileRows * (cols / b.values * b.bytes);
}

void Mat::row_values(int64_t r, float* out) const {
  if (r < tiled_rows) {
    const BlockType bt = block_type(type);
    thread_local std::vector<uint8_t> blocks;
    blocks.resize(static_cast<size_t>(cols / block_info(bt).values * block_info(bt).bytes));
    tile_row(bt, tile(r / kTileRows), cols, static_cast<int>(r % kTileRows), blocks.data());
    dequantize(bt, blocks.data(), out, cols);
  } else if (is_quantized(type)) {
    dequantize(block_type(type), row_blocks(r), out, cols);
  } else if (type == WType::kF16) {
    half_to_float(f16() + r * cols, out, static_cast<size_t>(cols));
  } else {
    std::memcpy(out, f32() + r * cols, static_cast<size_t>(cols) * sizeof(float));
  }
}

int64_t Mat::nbytes() const {
  if (!is_quantized(type)) return rows * cols * (type == WType::kF16 ? 2 : 4);
  const BlockInfo b = block_info(block_type(type));
  return rows * (cols / b.values * b.bytes);
}

}  // namespace anelab::quant
