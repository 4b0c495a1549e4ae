// The table of architectures: the one list naming every models/arch/<name>.cpp.
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "models/arch/arch.h"
#include "models/arch/arch_list.h"

namespace anelab::models {

const std::vector<const Arch*>& architectures() {
  static const std::vector<const Arch*> all = {&llama_arch(), &qwen2_arch(),  &gpt2_arch(),
                                               &qwen3_arch(), &gemma3_arch(), &qwen35_arch()};
  return all;
}

const Arch* find_arch(std::string_view name) {
  for (const Arch* a : architectures())
    if (a->name == name) return a;
  return nullptr;
}

std::string arch_names() {
  std::string s;
  for (const Arch* a : architectures()) s += (s.empty() ? "" : ", ") + a->name;
  return s;
}

const Arch& arch_of(std::string_view name, const std::string& where) {
  if (const Arch* a = find_arch(name)) return *a;
  fail("model", where, ": architecture '", name, "' is not supported (use ", arch_names(), ")");
}

void validate_config(const ModelConfig& c, const std::string& where) {
  const Arch& arch = arch_of(c.arch, where);
  validate_config_fields(c, where);
  if (arch.validate) arch.validate(c, where);
}

ModelDesc describe_model(const ModelConfig& c) {
  const Arch& a = arch_of(c.arch, "describe");
  ANELAB_CHECK(a.describe != nullptr, "model", "architecture ", c.arch, " has no layer description (Arch::describe)");
  return a.describe(c);
}

const Arch& arch_for_hf(const nlohmann::json& j, const std::string& where) {
  if (j.contains("model_type") && j["model_type"].is_string()) {
    const std::string t = j["model_type"].get<std::string>();
    for (const Arch* a : architectures())
      for (const auto& m : a->hf_model_types)
        if (m == t) return *a;
    fail("model", where, ": model_type ", t, " is not supported (", arch_names(), ")");
  }
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string cls = j["architectures"][0].get<std::string>();
    for (const Arch* a : architectures())
      for (const auto& p : a->hf_class_prefixes)
        if (cls.starts_with(p)) return *a;
    fail("model", where, ": architectures[0] ", cls, " is not supported (", arch_names(), ")");
  }
  fail("model", where, ": config.json names no model_type/architectures; cannot tell the architecture");
}

}  // namespace anelab::models
