#include "framework/quant/types.h"

#include <cctype>

namespace anelab::quant {

std::optional<BlockType> find_type(std::string_view name) {
  for (const TypeTraits& r : kTypes) {
    const std::string_view n = r.name;
    bool same = n.size() == name.size();
    for (size_t i = 0; same && i < n.size(); ++i) same = n[i] == std::tolower(static_cast<unsigned char>(name[i]));
    if (same) return r.type;
  }
  return std::nullopt;
}

std::optional<BlockType> find_ggml_type(uint32_t ggml_type) {
  for (const TypeTraits& r : kTypes)
    if (r.ggml_type == ggml_type) return r.type;
  return std::nullopt;
}

}  // namespace anelab::quant
