// One entry point for every supported model file: anelab (.anelab), llama2.c (.bin, legacy or export v1),
// Hugging Face safetensors (file, model.safetensors.index.json, or a directory with config.json), GGUF,
// and training checkpoints (a .ckpt file, or a run directory = its best.ckpt, else last.ckpt).
#pragma once
#include <string>

#include "framework/core/file.h"
#include "models/formats/model.h"

namespace anelab::models {

// "anelab", "checkpoint", "llama2c", "safetensors" or "gguf"; throws naming the path and the formats tried.
std::string detect_model_format(const std::string& path);
// Loads into the canonical Model: tensors are views of the file's bytes in memory where possible (mapped, or
// read per `access`), converted in memory where needed.
// `access`: how files holding weights are brought in (framework/core/file.h; training checkpoints are always
// mapped: they are converted to fp32 matrices at load).
Model load_any_model(const std::string& path, FileAccess access = FileAccess::kMap);

}  // namespace anelab::models
