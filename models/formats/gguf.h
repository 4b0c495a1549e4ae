// GGUF (llama.cpp) files, version 2 and 3: the container's reader and writer.
//
// Layout (little-endian): char[4] "GGUF"; u32 version; u64 tensor_count; u64 kv_count;
//   kv_count x (str key, u32 value_type, value); tensor_count x (str name, u32 n_dims, u64 ne[n_dims],
//   u32 ggml_type, u64 offset); padding to general.alignment (default 32); tensor data, each tensor at
//   data_start + offset (offset % alignment == 0). str = u64 length + bytes.
//   value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 str, 9 array (u32 elem type,
//   u64 count, elems), 10 u64, 11 i64, 12 f64.
//   ne[0] is the fastest-varying (row) dimension, so canonical shape = reversed ne.
//   Tensor types read and written: F32 (0), F16 (1), Q4_0 (2), Q5_0 (6), Q5_1 (7), Q8_0 (8), Q4_K (12), Q5_K (13),
//   Q6_K (14), BF16 (30);
//   block types (framework/quant/blocks.h) stay in their type, viewed in the mapping. A tensor whose row is
//   not whole blocks, or whose data runs past the end of the file, is rejected naming the tensor.
//
// The mapping to and from the canonical Model (tensor names, architectures, RoPE order) is models/io/gguf_model.h.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/file.h"
#include "models/formats/model.h"

namespace anelab::models {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
// ggml tensor type ids of the float types; the block types' ids are the type table's (quant::traits(t).ggml_type).
constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlBF16 = 30;
std::optional<DType> dtype_of_ggml(uint32_t ggml_type);  // nullopt for types anelab does not read
uint32_t ggml_type_of(DType t);

struct GgufValue {
  GgufType type = GgufType::kU32;
  GgufType elem_type = GgufType::kU32;  // arrays only
  double num = 0;                       // every numeric / bool scalar
  uint64_t u = 0;                       // exact unsigned value of unsigned scalars
  std::string str;
  std::vector<double> nums;       // numeric / bool arrays
  std::vector<std::string> strs;  // string arrays
  bool is_int() const;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<int64_t> ne;  // GGUF order (ne[0] = row length)
  uint64_t offset = 0;      // relative to data start
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
};

struct GgufFile {
  uint32_t version = 3;
  std::map<std::string, GgufValue> kv;
  std::vector<GgufTensorInfo> tensors;
  uint64_t alignment = 32;
  std::shared_ptr<const void> owner;
  // Typed metadata access; the error names the key and the expected type.
  const GgufValue* find(const std::string& key) const;
  int64_t get_int(const std::string& key, const std::string& where) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_num(const std::string& key, double def) const;
  std::string get_str(const std::string& key, const std::string& where) const;
};

GgufFile parse_gguf(const uint8_t* data, size_t size, std::shared_ptr<const void> owner, const std::string& where);
GgufFile read_gguf_file(const std::string& path, FileAccess access = FileAccess::kMap);
bool looks_like_gguf(const uint8_t* data, size_t size);

// Minimal GGUF writer (v3) for tests and export.
class GgufWriter {
 public:
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_str(const std::string& key, const std::string& v);
  void add_str_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // ne in GGUF order (row length first); bytes already in ggml_type layout.
  void add_tensor(const std::string& name, uint32_t ggml_type, std::vector<int64_t> ne, std::vector<uint8_t> bytes);
  // Same without a copy: `data` must stay valid until build()/write() returns.
  void add_tensor_view(const std::string& name, uint32_t ggml_type, std::vector<int64_t> ne, const uint8_t* data,
                       int64_t nbytes);
  std::vector<uint8_t> build(uint32_t alignment = 32) const;
  // Streams the file to `path` (temporary + rename); returns the bytes written.
  int64_t write(const std::string& path, uint32_t alignment = 32) const;

 private:
  std::vector<uint8_t> header(uint32_t alignment, std::vector<uint64_t>& offs, uint64_t& data_bytes) const;
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  struct T {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;
    const uint8_t* data;
    int64_t nbytes;
  };
  std::vector<T> tensors_;
};

}  // namespace anelab::models
