// config.json + HF tensor names -> canonical ModelConfig and tensor names (see safetensors.h); the
// architecture's own keys and names come from the architecture table (models/arch/arch.h).
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "models/arch/arch.h"
#include "models/formats/safetensors.h"

namespace anelab::models {

Model hf_to_model(const std::string& config_json, const StTensorMap& ts, const std::string& w) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    fail("model", w, ": config.json is not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail("model", w, ": config.json is not a JSON object");
  const Arch& arch = arch_for_hf(j, w);
  Model m;
  m.config = arch.hf_config(j, w);
  checked_parameter_count(m.config, w);
  // A config may claim an untied head that the checkpoint lacks (or the reverse): trust the tensors.
  if (!ts.count("lm_head.weight")) m.config.tied_embeddings = true;
  arch.hf_tensors(m, ts, w);
  m.source_format = "safetensors";
  m.source_path = w;
  m.check_complete(w);
  return m;
}

}  // namespace anelab::models
