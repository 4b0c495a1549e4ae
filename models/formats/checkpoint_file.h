// Training checkpoints as models: `anelab infer/serve/convert/export/info --model CKPT|RUN_DIR` read the fp32
// master weights of a training checkpoint (train/checkpoint.h documents the file format; the trainer
// writes it) as a canonical Model, without the optimizer state.
//
//   CKPT     a file starting with the magic "ANELABCK" (last.ckpt, best.ckpt)
//   RUN_DIR  a directory holding best.ckpt (preferred: the lowest validation loss) or last.ckpt
//
// The weights section is memory-mapped: tensors are fp32 views in the checkpoint's canonical order
// (the header's `tensors` list, version 2; version 1 files have none and use the config's canonical order).
// The tokenizer comes from `tokenizer.anetok` next to the checkpoint (the trainer saves the one it used,
// see save_run_tokenizer, with the training documents' separator as EOS); without it the model has none
// (pass --tokenizer).
#pragma once
#include <cstdint>
#include <string>

#include "models/formats/checkpoint_header.h"
#include "models/formats/model.h"

namespace anelab::models {

constexpr char kRunTokenizerFile[] = "tokenizer.anetok";

bool looks_like_checkpoint(const uint8_t* data, size_t size);
// True for a directory that holds best.ckpt, last.ckpt or events.jsonl (a run, maybe without checkpoints yet).
bool is_run_dir(const std::string& path);
// The checkpoint a path names: the file itself, or RUN_DIR/best.ckpt, else RUN_DIR/last.ckpt
// (throws naming the directory when it has neither).
std::string checkpoint_path(const std::string& path);
// Reads the model weights of a checkpoint file or run directory (validated by parse_checkpoint; tensors_of:
// models::canonical_tensors, models/arch/tensors.h).
Model read_checkpoint_model(const std::string& path, TensorsOf tensors_of);

// Tokenizer files saved with a run (or anywhere): the ANETOK01 blob of anelab_file.h's embedded tokenizer.
void save_run_tokenizer(const tok::VocabData& v, const std::string& path);
tok::VocabData read_run_tokenizer(const std::string& path);
bool looks_like_anetok(const uint8_t* data, size_t size);

}  // namespace anelab::models
