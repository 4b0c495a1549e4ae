// The header of a training checkpoint ("anelab-checkpoint"; train/checkpoint.h documents the whole file):
// its fields as a value, the bytes a writer puts before the data section, and the one parser that every
// reader (the trainer's --resume, checkpoints as models) goes through.
//
// parse_checkpoint validates the whole file before anything is allocated from it: the fixed prefix
// (magic, version 1..3, reserved 0, header_len), the header checksum (version 3), every JSON field (type,
// range, finite numbers), the model config (validate_config_fields), n_params against the element count of the
// config's tensors (the caller's tensors_of, checked_numel), data_size and the file size, the tensor table
// (version 2+) against those tensors, and the data checksum.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/formats/model.h"

namespace anelab::models {

constexpr char kCheckpointMagic[9] = "ANELABCK";
constexpr uint32_t kCheckpointVersion = 3;  // version written; 1 and 2 are still read
constexpr uint64_t kCheckpointMaxHeader = 16ull << 20;

// Every header field except the derived ones (n_params, tensors, data_size, checksums).
struct CheckpointHeader {
  ModelConfig model;
  int64_t step = 0, adam_t = 0;  // optimizer steps done; AdamW updates applied (skipped steps excluded)
  bool ls_dynamic = false;
  double ls_scale = 1, ls_interval = 1000;
  int64_t ls_good_steps = 0;
  std::string batching = "random";  // "random" | "sequential"
  uint64_t data_state = 0;          // generator state or position
  std::optional<double> best_val_loss;
  int64_t restarts = 0, tokens = 0, compiles = 0;
  double wall_s = 0, compile_s = 0, train_s = 0;
  nlohmann::json config = nlohmann::json::object();  // the resolved TrainConfig (train/config.h to_json)
};

// The tensors a model config implies, in the order of the fp32 arrays (models::canonical_tensors of
// models/arch/tensors.h: the architecture's description decides them, which this layer does not know).
// Throws naming `where` for a config it cannot describe.
using TensorsOf = std::vector<TensorSpec> (*)(const ModelConfig&, const std::string& where);

// A checkpoint held in memory, validated: the header, its tensors, and where its three fp32 arrays of n_params start.
struct CheckpointView {
  CheckpointHeader header;
  uint32_t version = 0;
  std::vector<TensorSpec> tensors;  // tensors_of(header.model): the header's table where the file has one
  int64_t n_params = 0;
  const uint8_t* weights = nullptr;  // [n_params] fp32, then adam_m, adam_v; at a multiple of 64 into the data
};

// Parses and validates a whole checkpoint (data, size) as described above; `where` names it in errors,
// which are one line: "[checkpoint] WHERE: ...". tensors_of gives the tensors of the header's model: n_params is
// their element count, and a version-2+ file's tensor table must list exactly them. verify_data false skips only
// the data checksum.
CheckpointView parse_checkpoint(const uint8_t* data, size_t size, const std::string& where, TensorsOf tensors_of,
                                bool verify_data = true);
// The bytes before the data section of a version-3 file: prefix, JSON header (its "tensors" table: `tensors`,
// n_params their element count), zero padding to 64. data_checksum: fnv1a64 of the data section (weights, adam_m,
// adam_v of n_params elements each).
std::vector<uint8_t> encode_checkpoint_header(const CheckpointHeader& h, const std::vector<TensorSpec>& tensors,
                                              uint64_t data_checksum);

// The header's "model" object is model_config_to_json (models/formats/model_config_json.h; older files lack
// the norm, activation, bias and learned_pos keys, read as the Llama defaults). The "tensors" list:
// [{"name", "shape", "offset"}], element offsets of the fp32 arrays, canonical order.
nlohmann::json checkpoint_tensors_json(const std::vector<TensorSpec>& tensors);
// FNV-1a 64 over bytes (the header and data checksums), continuing from h.
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a64(uint64_t h, const void* data, size_t n);

}  // namespace anelab::models
