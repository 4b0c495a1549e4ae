// NumPy .npy files (format version 1.0/2.0/3.0), little-endian fp16 ('<f2'), fp32 ('<f4') and
// fp64 ('<f8') arrays in C order — the tensor exchange format of `anelab mil run`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace anelab {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // decoded to fp32, C order
  std::string dtype;        // the file's descr, e.g. "<f2"
  int64_t numel() const;
};

// Throws anelab::Error("[npy] PATH: ...") naming the field on any malformed / unsupported file.
NpyArray read_npy(const std::string& path);
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name);
// Writes fp32 ('<f4') data atomically.
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace anelab
