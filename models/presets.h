// Model presets: named ModelConfigs of real architectures (for `anelab convert --random`, the trainer
// and benchmarks), and a seeded random-weight model writer.
//
// Each architecture file (models/arch/<name>.cpp) defines and documents its presets;
// preset_names() lists them all.
//
// Random init: normal(0, 0.02) for matrices and embeddings, ones for norm weights, zeros for biases.
// Values come from a counter-based generator (splitmix64 of seed, tensor index and element index, then
// Box-Muller), so the result is independent of threads and chunking.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/formats/anelab_file.h"
#include "models/formats/model.h"

namespace anelab::models {

// The preset registry. preset() throws "[model] unknown preset X (known: a, b, ...)".
const ModelConfig& preset(const std::string& name);
std::vector<std::string> preset_names();
// The preset with the fields of `shape` (a JSON object of model config keys, models/formats/model_config_json.h:
// `--shape` of convert --random and train --preset) replaced, checked as any model file's config; "" is the preset.
// Errors are one line "[COMPONENT] --shape ...".
ModelConfig preset_with_shape(const std::string& name, const std::string& shape, const char* component);

// Fills out[0..count) with the random init of element `begin..` of tensor `spec` (index in canonical order):
// normal(0, 0.02) for matrices and embeddings, 0 for biases, and for a norm weight the value that makes the norm
// multiply by 1: 1 - norm_offset (norm_offset: the NormDesc offset it is added to, 0 for a plain norm; Gemma's and
// Qwen3.5's (1 + w) norms start at 0, as Hugging Face initialises them).
void random_init(const TensorSpec& spec, float norm_offset, uint64_t seed, size_t tensor_index, int64_t begin,
                 int64_t count, float* out);
// Per tensor of canonical_tensors(c), the offset of the norm it is the weight of (0 for the others).
std::vector<float> norm_offsets(const ModelConfig& c);

// Streams a random-weight model of config c into an anelab file; returns the file size.
int64_t write_random_model(const ModelConfig& c, const std::string& path, uint64_t seed,
                           std::optional<DType> dtype = {}, const ProgressFn& progress = {});
// The same weights as an in-memory Model (small configs; tests).
Model random_model(const ModelConfig& c, uint64_t seed);

}  // namespace anelab::models
