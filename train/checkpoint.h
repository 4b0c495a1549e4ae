// Training checkpoints (`last.ckpt`, `best.ckpt` in the run dir), format "anelab-checkpoint" version 3
// (versions 1 and 2 are still read, with the same field and size checks). Every command that takes a model
// reads the weights of a checkpoint or run directory through models/formats/checkpoint_file.h; every reader
// parses and validates the file with models::parse_checkpoint (models/formats/checkpoint_header.h).
// All integers little-endian.
//
//   offset 0   char[8]  magic "ANELABCK"
//   offset 8   u32      format version (3; readers accept 1..3)
//   offset 12  u32      reserved (0)
//   offset 16  u64      header_len: length of the JSON header (1 .. 16 MiB)
//   offset 24  u64      header_checksum: FNV-1a 64 of the header_len JSON bytes     (version 3 only)
//   offset 32  JSON header, UTF-8                                   (versions 1 and 2: at offset 24)
//   zero padding up to data_offset = round_up(json_offset + header_len, 64)
//   data: three fp32 arrays of n_params elements each, in the canonical tensor order of train/params.h:
//         weights (fp32 master), adam_m, adam_v. The file ends exactly after them.
//
// JSON header (every field required, with exactly this JSON type; ranges checked on load):
//   {"format": "anelab-checkpoint", "version": the u32 version again,
//    "model": the model config, every field (models/formats/model_config_json.h; files written before the
//             norm, activation, qkv_bias, attn_out_bias, mlp_bias and learned_pos keys were stored lack
//             them and read as the Llama defaults),
//    "n_params": P (= the parameter count the model config implies),
//    "tensors": [{"name", "shape", "offset"}...]   (version 2+: element offsets into each array; must equal
//                                                  the canonical order of the model config),
//    "step": optimizer steps done, "adam_t": AdamW updates applied (skipped steps excluded; <= step),
//    "loss_scale": {"dynamic": bool, "scale": finite > 0, "interval": whole number >= 1, "good_steps": int >= 0},
//    "data": {"batching": "random"|"sequential", "state": "16 hex digits" (generator state or position)},
//    "best_val_loss": finite number >= 0 | null, "restarts", "tokens": integers >= 0,
//    "totals": {"wall_s", "compile_s", "train_s": finite seconds >= 0, "compiles": int}  (cumulative over processes),
//    "config": the resolved TrainConfig object (train/config.h to_json),
//    "data_size": 12 * P, "checksum": "16 hex digits" (FNV-1a 64 of the data section)}
// Integers are JSON integers (no fractions, no booleans, no strings); counts are at most 2^53.
//
// A checkpoint is a file people download and share, so it is read as untrusted: the header checksum (v3)
// and then every field, the model config, n_params, the tensor table and the file size are checked before
// anything is allocated from it; a bad file is refused with one line "[checkpoint] PATH: ...".
// Writes go to PATH.tmp.<pid>, are fsync'ed and renamed over PATH (so PATH is always a complete, good
// checkpoint); a temp file left by a writer that died (its pid no longer alive) is removed by
// remove_stale_temp_files when the run starts again.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/formats/checkpoint_header.h"

namespace anelab::train {

struct CheckpointState : models::CheckpointHeader {
  std::vector<float> weights, m, v;  // [P] each; m and v empty: zeros are written (no [P] buffer of zeros held)
};

// A checkpoint's weights made on the fly, never held whole (a --lora run's merged model): fills out[0, n) with the
// weights [off, off + n) (any range, called twice per range: the checksum pass, then the write).
using WeightSource = std::function<void(int64_t off, int64_t n, float* out)>;
// Written atomically (temp file + fsync + rename). With `weights` given, s.weights is empty and the weights come from
// it in chunks; m and v empty: zeros are written (chunks too).
void write_checkpoint(const std::string& path, const CheckpointState& s, const WeightSource& weights = {});
// Reads and validates (models::parse_checkpoint) a checkpoint, then copies its three arrays.
CheckpointState read_checkpoint(const std::string& path);
// Removes DIR/NAME.tmp.<pid> files, NAME one of the trainer's own files (train/run_dir.h kRunFiles), whose
// writer process is no longer alive (platform::process_alive); returns how many were removed. Files of live
// processes and every other name (files that are not the trainer's) are kept.
int remove_stale_temp_files(const std::string& dir);

}  // namespace anelab::train
