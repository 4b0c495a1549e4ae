// Hugging Face model directories read into the canonical Model: the safetensors container
// (models/formats/safetensors.h) plus config.json, whose architecture (model_type, else architectures[0]) the
// architecture table (models/arch/arch.h) maps: each models/arch/<name>.cpp maps its config keys and tensor
// names. The tokenizer files next to them (tokenizer.json, or encoder.json + vocab.bpe) and the chat template
// of tokenizer_config.json come along when present. Llama-family q/k weights are kept unpermuted and the config
// records rope_style rotate_half; tensors are views of the mapping, except transposed ones.
#pragma once
#include <cstdint>
#include <string>

#include "framework/core/file.h"
#include "models/formats/model.h"
#include "models/formats/safetensors.h"

namespace anelab::models {

// Reads a .safetensors file, a model.safetensors.index.json, or a directory holding either; the
// config.json next to them selects the architecture.
Model read_hf_safetensors(const std::string& path, FileAccess access = FileAccess::kMap);
// Maps HF tensors + parsed config.json (as text) to a Model; `where` names the source in errors.
Model hf_to_model(const std::string& config_json, const StTensorMap& tensors, const std::string& where);

int fuzz_read_safetensors(const uint8_t* data, size_t size);

}  // namespace anelab::models
