// The safetensors container (Hugging Face checkpoints): parsing, the shard index, and a writer. Reading a
// model directory (config.json + tensors -> the canonical Model) is models/io/hf_model.h.
//
// safetensors file: u64 N (little-endian), N bytes of JSON {"NAME": {"dtype": "F32"|"F16"|"BF16"|...,
//   "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data buffer; offsets are
//   relative to the byte after the header. Sharded checkpoints have model.safetensors.index.json with
//   {"weight_map": {"NAME": "model-0000k-of-0000n.safetensors"}}.
//
// dtypes F32/F16/BF16 are kept as stored (tensors are views of the mapping).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/file.h"
#include "models/formats/model.h"

namespace anelab::models {

struct StTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
  std::shared_ptr<const void> owner;
};
using StTensorMap = std::map<std::string, StTensor>;

// Parses one safetensors image (validated: header length, JSON, dtypes, shapes, offsets in bounds).
StTensorMap parse_safetensors(const uint8_t* data, size_t size, std::shared_ptr<const void> owner,
                              const std::string& where);
// The weight_map of a model.safetensors.index.json (tensor name -> shard file name; validated: an object,
// string entries, plain file names in the same directory).
std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& where);
bool looks_like_safetensors(const uint8_t* data, size_t size);

// Builds a safetensors image (for tests and tools): tensors written in the given order.
struct StWrite {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16" (any string is written as-is)
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
std::vector<uint8_t> build_safetensors(const std::vector<StWrite>& tensors);

}  // namespace anelab::models
