#include "framework/core/arch_types.h"

namespace anelab {

const char* rope_style_name(RopeStyle r) {
  switch (r) {
    case RopeStyle::kNone:
      return "none";
    case RopeStyle::kAdjacentPairs:
      return "adjacent_pairs";
    case RopeStyle::kRotateHalf:
      return "rotate_half";
  }
  return "?";
}
const char* rope_scaling_name(RopeScalingType t) { return t == RopeScalingType::kLlama3 ? "llama3" : "none"; }
const char* norm_type_name(NormType n) {
  switch (n) {
    case NormType::kRms:
      return "rms";
    case NormType::kLayer:
      return "layer";
  }
  return "?";
}
const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return "silu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kGeluTanhGated:
      return "gelu_tanh_gated";
  }
  return "?";
}

std::optional<RopeStyle> parse_rope_style(std::string_view s) {
  for (RopeStyle r : {RopeStyle::kNone, RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf})
    if (s == rope_style_name(r)) return r;
  return std::nullopt;
}
std::optional<RopeScalingType> parse_rope_scaling(std::string_view s) {
  for (RopeScalingType t : {RopeScalingType::kNone, RopeScalingType::kLlama3})
    if (s == rope_scaling_name(t)) return t;
  return std::nullopt;
}
std::optional<NormType> parse_norm_type(std::string_view s) {
  for (NormType n : {NormType::kRms, NormType::kLayer})
    if (s == norm_type_name(n)) return n;
  return std::nullopt;
}
std::optional<Activation> parse_activation(std::string_view s) {
  for (Activation a : {Activation::kSilu, Activation::kGeluTanh, Activation::kGeluTanhGated})
    if (s == activation_name(a)) return a;
  return std::nullopt;
}

}  // namespace anelab
