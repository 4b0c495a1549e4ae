#include "framework/mil/types.h"

#include <array>

namespace anelab::mil {

namespace {
struct DTypeInfo {
  DType t;
  std::string_view name;
  size_t bytes;
};
constexpr std::array<DTypeInfo, 12> kDTypes{{
    {DType::kFp16, "fp16", 2},
    {DType::kFp32, "fp32", 4},
    {DType::kInt32, "int32", 4},
    {DType::kInt16, "int16", 2},
    {DType::kInt8, "int8", 1},
    {DType::kUint8, "uint8", 1},
    {DType::kUint16, "uint16", 2},
    {DType::kUint4, "uint4", 1},
    {DType::kBool, "bool", 1},
    {DType::kString, "string", 0},
    {DType::kUint64, "uint64", 8},
    {DType::kUint6, "uint6", 1},
}};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.name;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& d : kDTypes)
    if (d.name == s) return d.t;
  return std::nullopt;
}

size_t dtype_bytes(DType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.bytes;
  return 0;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string TensorType::str() const {
  if (is_scalar()) return std::string(dtype_name(dtype));
  return "tensor<" + std::string(dtype_name(dtype)) + ", " + shape_str(shape) + ">";
}

}  // namespace anelab::mil
