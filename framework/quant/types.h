// The quantization-type table: one row per block type (the ggml layouts of framework/quant/blocks.h), the one
// place that states a type's name, GGUF id, block geometry, the activations its CPU dot takes and which
// executors take it. The other type enums convert through it (quant::WType in framework/quant/mat.h,
// models::DType in models/formats/model.h, each with one switch without `default:`), the formats look names and
// GGUF ids up in it, and the kernels (quantize / dequantize in blocks.cpp, dot_row / dot_rows in qdot.cpp, gemm's
// recipes in qgemm.cpp) dispatch on BlockType with switches without `default:`, which GCC's -Wswitch (-Werror)
// holds to every enumerator.
//
// Adding a type: the enumerator (next value), its block struct (blocks.h), a row here (at the enumerator's index),
// its cases in those switches, and its DType / WType enumerators. A missing row or column fails the static_asserts
// below; a missing case fails -Wswitch; tests/core/test_quant.cpp's table tests (QuantTable.*) run every row.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace anelab::quant {

// Values are the row indices of kTypes (not file ids: GGUF files store ggml_type, anelab files models::DType).
enum class BlockType : uint8_t { kQ8_0 = 0, kQ4_0 = 1, kQ4_K = 2, kQ6_K = 3, kQ5_0 = 4, kQ5_1 = 5, kQ5_K = 6 };

// The form of the quantized activations a type's CPU dot product takes (qdot.h): Q8_0 (32-value blocks with an
// fp16 scale) or Q8_K (256-value blocks with an fp32 scale), as llama.cpp's vec_dot_type.
enum ActsForm : unsigned { kActsQ8_0 = 1u, kActsQ8_K = 2u, kActsAll = 3u };

// Which executors take a type (bits of TypeTraits::executors).
enum Executor : unsigned {
  kExecCpuBlocks = 1u,  // the CPU engine computes on the blocks in place: qdot.h's dot_rows (decode), qgemm.h (prefill)
  kExecCpuRowTiles = 2u,  // ... and on its 16-row tiles (qdot.h's tile_rows / dot_tiles, the decode GEMV's layout)
  kExecMilFp16 = 4u,      // the MIL kernels take it dequantized to fp16 / fp32 on the host (kern::mat_values)
};

struct TypeTraits {
  BlockType type;        // == the row's index in kTypes
  const char* name;      // "q8_0": CLI --dtype values, anelab files' dtype names, errors
  uint32_t ggml_type;    // GGUF tensor type id (ggml.h's enum ggml_type; fixed by the format)
  int64_t block_values;  // values per block
  int64_t block_bytes;   // bytes per block (sizeof its block struct)
  int bits;              // bits of a value's integer level (the round-trip error is a fraction of 2^-bits)
  ActsForm acts;         // activations' form of its CPU dot product
  unsigned executors;    // Executor bits
};

inline constexpr auto kTypes = std::to_array<TypeTraits>({
    {BlockType::kQ8_0, "q8_0", 8, 32, 34, 8, kActsQ8_0, kExecCpuBlocks | kExecCpuRowTiles | kExecMilFp16},
    {BlockType::kQ4_0, "q4_0", 2, 32, 18, 4, kActsQ8_0, kExecCpuBlocks | kExecMilFp16},
    {BlockType::kQ4_K, "q4_k", 12, 256, 144, 4, kActsQ8_K, kExecCpuBlocks | kExecCpuRowTiles | kExecMilFp16},
    {BlockType::kQ6_K, "q6_k", 14, 256, 210, 6, kActsQ8_K, kExecCpuBlocks | kExecMilFp16},
    {BlockType::kQ5_0, "q5_0", 6, 32, 22, 5, kActsQ8_0, kExecCpuBlocks | kExecMilFp16},
    {BlockType::kQ5_1, "q5_1", 7, 32, 24, 5, kActsQ8_0, kExecCpuBlocks | kExecMilFp16},
    {BlockType::kQ5_K, "q5_k", 13, 256, 176, 5, kActsQ8_K, kExecCpuBlocks | kExecMilFp16},
});

// True for the enumerators of BlockType. One case each, no `default:`: a new enumerator fails -Wswitch here first.
constexpr bool is_block_type(BlockType t) {
  switch (t) {
    case BlockType::kQ8_0:
    case BlockType::kQ4_0:
    case BlockType::kQ4_K:
    case BlockType::kQ6_K:
    case BlockType::kQ5_0:
    case BlockType::kQ5_1:
    case BlockType::kQ5_K:
      return true;
  }
  return false;
}

namespace detail {
constexpr bool same_name(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
// Every enumerator has its row at its index and every row is filled: a name, a GGUF id that is not a float type
// (F32 0, F16 1, BF16 30) and no other row's, a block geometry, level bits, an activations form.
constexpr bool table_complete() {
  for (size_t i = 0; i < kTypes.size(); ++i) {
    const TypeTraits& r = kTypes[i];
    if (static_cast<size_t>(r.type) != i || !is_block_type(r.type)) return false;
    if (r.name == nullptr || r.name[0] == 0 || r.ggml_type <= 1 || r.ggml_type == 30) return false;
    if (r.block_values <= 0 || r.block_values % 32 || r.block_bytes <= 0 || r.bits <= 0 || r.bits > 8) return false;
    if (r.acts != kActsQ8_0 && r.acts != kActsQ8_K) return false;
    if (r.acts == kActsQ8_K && r.block_values % 256) return false;
    for (size_t j = 0; j < i; ++j)
      if (kTypes[j].ggml_type == r.ggml_type || same_name(kTypes[j].name, r.name)) return false;
  }
  return true;
}
}  // namespace detail
static_assert(detail::table_complete(), "quant::kTypes: a row is missing, out of order or not filled in");
static_assert(kTypes.size() <= 255 && !is_block_type(static_cast<BlockType>(kTypes.size())),
              "quant::kTypes: BlockType has an enumerator past the table's last row");

constexpr const TypeTraits& traits(BlockType t) { return kTypes[static_cast<size_t>(t)]; }
constexpr bool takes(BlockType t, Executor e) { return (traits(t).executors & e) != 0; }
constexpr ActsForm acts_form(BlockType t) { return traits(t).acts; }

// The type of a name ("q8_0"; upper case accepted) or GGUF id; nullopt when no row has it.
std::optional<BlockType> find_type(std::string_view name);
std::optional<BlockType> find_ggml_type(uint32_t ggml_type);

}  // namespace anelab::quant
