// MIL element types and tensor types. Every value in a MIL program carries a TensorType; a rank-0
// TensorType is a scalar (printed `fp16` in the ios18 dialect and `tensor<fp16, []>` in ios16).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anelab::mil {

enum class DType : uint8_t {
  kFp16,
  kFp32,
  kInt32,
  kInt16,
  kInt8,
  kUint8,
  kUint16,
  kUint4,
  kBool,
  kString,
  kUint64,
  kUint6
};

std::string_view dtype_name(DType t);                  // "fp16", "int32", ...
std::optional<DType> parse_dtype(std::string_view s);  // inverse of dtype_name
size_t dtype_bytes(DType t);                           // storage bytes per element (uint4, uint6: 1, string: 0)
inline bool is_float(DType t) { return t == DType::kFp16 || t == DType::kFp32; }
inline bool is_integer(DType t) {
  return t == DType::kInt32 || t == DType::kInt16 || t == DType::kInt8 || t == DType::kUint8 || t == DType::kUint16 ||
         t == DType::kUint4 || t == DType::kUint64 || t == DType::kUint6;
}

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[1, 768, 1, 256]"

struct TensorType {
  DType dtype = DType::kFp16;
  Shape shape;  // empty = scalar

  bool is_scalar() const { return shape.empty(); }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  std::string str() const;  // "tensor<fp16, [1, 768, 1, 256]>" or "fp16" for a scalar
  bool operator==(const TensorType& o) const = default;
};

inline TensorType scalar_type(DType t) { return {t, {}}; }
inline TensorType tensor_type(DType t, Shape s) { return {t, std::move(s)}; }

}  // namespace anelab::mil
