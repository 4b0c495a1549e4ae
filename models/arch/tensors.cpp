#include "models/arch/tensors.h"

#include "framework/core/error.h"
#include "models/arch/arch.h"

namespace anelab::models {

std::vector<TensorSpec> canonical_tensors(const ModelConfig& c, const std::string& where) {
  arch_of(c.arch, where);
  return desc_weights(describe_model(c));
}

int64_t checked_parameter_count(const ModelConfig& c, const std::string& where) {
  validate_config_fields(c, where);
  return checked_numel(canonical_tensors(c, where), where);
}

int64_t parameter_count(const ModelConfig& c) { return checked_parameter_count(c, "model config"); }

void check_complete(const Model& m, const std::string& where) {
  validate_config_fields(m.config, where);
  const auto specs = canonical_tensors(m.config, where);
  checked_numel(specs, where);  // as checked_parameter_count, on the list described once
  for (const auto& s : specs) {
    const Tensor* t = m.find(s.name);
    if (!t)
      fail("model", where, ": tensor ", s.name, " is missing (the ", m.config.arch,
           " config needs it); the file is incomplete or its config does not match its tensors");
    if (t->shape != s.shape)
      fail("model", where, ": tensor ", s.name, " has shape ", t->shape_str(), " but the config implies ",
           shape_string(s.shape));
  }
  if (specs.size() != m.tensors().size()) {
    for (const auto& t : m.tensors()) {
      bool known = false;
      for (const auto& s : specs) known = known || s.name == t.name;
      if (!known) fail("model", where, ": unexpected tensor ", t.name, " for this config");
    }
  }
}

}  // namespace anelab::models
