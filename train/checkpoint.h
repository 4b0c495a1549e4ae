// Training checkpoints (`last.ckpt`, `best.ckpt` in the run dir), format "anelab-checkpoint" version 2
// (version 1, without the `tensors` list, is still read). Every command that takes a model reads the
// weights of a checkpoint or run directory through models/formats/checkpoint_file.h.
// All integers little-endian.
//
//   offset 0   char[8]  magic "ANELABCK"
//   offset 8   u32      format version (2; readers accept 1 and 2)
//   offset 12  u32      reserved (0)
//   offset 16  u64      header_len: length of the JSON header (at most 16 MiB)
//   offset 24  JSON header, UTF-8
//   zero padding up to data_offset = round_up(24 + header_len, 64)
//   data: three fp32 arrays of n_params elements each, in the canonical tensor order of train/params.h:
//         weights (fp32 master), adam_m, adam_v. The file ends exactly after them.
//
// JSON header:
//   {"format": "anelab-checkpoint", "version": 1,
//    "model": {ModelConfig fields as in the anelab model file}, "n_params": P,
//    "tensors": [{"name", "shape", "offset"}...]   (version 2: element offsets into each array; checked against
//                                                  the canonical order on load),
//    "step": optimizer steps done, "adam_t": AdamW updates applied (skipped steps excluded),
//    "loss_scale": {"dynamic", "scale", "interval", "good_steps"},
//    "data": {"batching": "random"|"sequential", "state": "16 hex digits" (generator state or position)},
//    "best_val_loss": number|null, "restarts": exec-restarts so far, "tokens": tokens trained on,
//    "totals": {"wall_s", "compile_s", "train_s", "compiles"}  (cumulative over processes),
//    "config": the resolved TrainConfig (train/config.h to_json),
//    "data_size": 12 * P, "checksum": "16 hex digits" (FNV-1a 64 of the data section)}
//
// Writes go to PATH.tmp.<pid>, are fsync'ed and renamed over PATH (so PATH is always a complete, good
// checkpoint). Reading validates magic, version, every header field, sizes and the checksum.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/formats/model.h"

namespace anelab::train {

struct CheckpointState {
  models::ModelConfig model;
  int64_t step = 0, adam_t = 0;
  bool ls_dynamic = false;
  double ls_scale = 1, ls_interval = 1000;
  int64_t ls_good_steps = 0;
  std::string batching = "random";
  uint64_t data_state = 0;
  std::optional<double> best_val_loss;
  int64_t restarts = 0, tokens = 0, compiles = 0;
  double wall_s = 0, compile_s = 0, train_s = 0;
  nlohmann::json config;
  std::vector<float> weights, m, v;  // [P] each
};

void write_checkpoint(const std::string& path, const CheckpointState& s);
CheckpointState read_checkpoint(const std::string& path);

}  // namespace anelab::train
