// One entry point for every supported model file: anelab (.anelab), llama2.c (.bin, legacy or export v1),
// Hugging Face safetensors (file, model.safetensors.index.json, or a directory with config.json), GGUF,
// and training checkpoints (a .ckpt file, or a run directory = its best.ckpt, else last.ckpt).
#pragma once
#include <string>

#include "models/formats/model.h"

namespace anelab::models {

// "anelab", "checkpoint", "llama2c", "safetensors" or "gguf"; throws naming the path and the formats tried.
std::string detect_model_format(const std::string& path);
// Loads (memory-maps where possible, converting in memory where needed) into the canonical Model.
Model load_any_model(const std::string& path);

}  // namespace anelab::models
