// Surface: the host-visible IO buffer of a kernel, the emulator's stand-in for an IOSurface.
// Holds one tensor of a kernel's function signature (normally [1, C, 1, S]) in row-major order,
// i.e. channel-major for [1,C,1,S]: element (c, s) at index c*S + s. Element type fp16 or fp32.
// The allocation may be larger than the tensor (device rule: >= 49152 bytes, page multiples); the
// backend checks allocation sizes against the device profile at evaluate time.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/mil/io_layout.h"
#include "framework/mil/types.h"

namespace anelab::rt {

class Surface {
 public:
  Surface() = default;
  // alloc_bytes = 0 allocates exactly the tensor's bytes.
  explicit Surface(mil::TensorType type, size_t alloc_bytes = 0);

  const mil::TensorType& type() const { return type_; }
  mil::DType dtype() const { return type_.dtype; }
  int64_t numel() const { return type_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * mil::dtype_bytes(type_.dtype); }
  size_t alloc_bytes() const { return alloc_bytes_; }

  void* data() { return buf_.get(); }
  const void* data() const { return buf_.get(); }
  half_bits* f16() { return static_cast<half_bits*>(data()); }
  const half_bits* f16() const { return static_cast<const half_bits*>(data()); }
  float* f32() { return static_cast<float*>(data()); }
  const float* f32() const { return static_cast<const float*>(data()); }

  // Whole-tensor staging with conversion (fp32 host data <-> fp16/fp32 surface).
  void write(const float* src);  // src: numel() floats
  void read(float* dst) const;   // dst: numel() floats
  void fill_zero() { std::memset(data(), 0, alloc_bytes_); }

 private:
  mil::TensorType type_;
  size_t alloc_bytes_ = 0;
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> buf_;
};

// Device staging: the dense tensor of `s` to / from a device buffer laid out as `l` (rows starting
// every l.row_stride bytes; the bytes between rows are left alone on pack and ignored on unpack).
// `size` is the device buffer's size; throws if it is smaller than l.extent or `l` does not describe
// the surface's tensor.
struct SurfaceLayout;
void pack_rows(const Surface& s, const SurfaceLayout& l, void* dst, size_t size);
void unpack_rows(const void* src, size_t size, const SurfaceLayout& l, Surface& s);

// Slot staging through an IOLayout (surface must have the layout's [1, C, 1, S] type).
// src/dst is the slot as a row-major [slot.channels, slot.spatial] fp32 matrix.
void stage_in(Surface& s, const mil::IOLayout& layout, const std::string& slot, const float* src);
void stage_out(const Surface& s, const mil::IOLayout& layout, const std::string& slot, float* dst);

}  // namespace anelab::rt
