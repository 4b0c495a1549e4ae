// The canonical tensors of a model: the weights its layer description names (Arch::describe, read off by
// desc_weights, framework/core/model_desc.h), with the shapes the config gives them, in the one order the anelab
// file, the checkpoint and training's parameter layout use. What an architecture implies (Qwen3's q/k norms, Gemma
// 3's sandwich norms, Qwen3.5's DeltaNet weights) comes with its description; the names: models/formats/model.h.
//
// The readers of models/formats check a file against itself (its tensor table, sizes and checksums); whether a
// model holds exactly these tensors is checked here (check_complete), by the loaders above them (load_any_model,
// the GGUF and Hugging Face readers of models/io, train's checkpoint reader) and by save_model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/formats/model.h"

namespace anelab::models {

// Throws naming `where` when c's architecture is unknown.
std::vector<TensorSpec> canonical_tensors(const ModelConfig& c, const std::string& where = "model config");
// validate_config_fields(c), then the element count of canonical_tensors(c) with overflow-checked arithmetic
// (checked_numel: throws naming `where` above kMaxParams).
int64_t checked_parameter_count(const ModelConfig& c, const std::string& where);
int64_t parameter_count(const ModelConfig& c);  // checked_parameter_count(c, "model config")
// Throws naming `where` and the first missing, unexpected or mis-shaped tensor unless m holds exactly
// canonical_tensors(m.config).
void check_complete(const Model& m, const std::string& where);

}  // namespace anelab::models
