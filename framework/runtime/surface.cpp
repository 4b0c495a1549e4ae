#include "framework/runtime/surface.h"

#include <cstdlib>

#include "framework/core/error.h"
#include "framework/runtime/device_profile.h"

namespace anelab::rt {

void Surface::Free::operator()(void* p) const { std::free(p); }

Surface::Surface(mil::TensorType type, size_t alloc_bytes) : type_(std::move(type)) {
  ANELAB_CHECK(type_.dtype == mil::DType::kFp16 || type_.dtype == mil::DType::kFp32, "surface",
               "surfaces hold fp16 or fp32 tensors, got ", type_.str());
  size_t need = bytes();
  if (alloc_bytes == 0) alloc_bytes = need;
  ANELAB_CHECK(alloc_bytes >= need, "surface", "allocation of ", alloc_bytes, " bytes is smaller than ", type_.str(),
               " (", need, " bytes)");
  alloc_bytes_ = alloc_bytes;
  size_t rounded = (alloc_bytes_ + 63) / 64 * 64;
  buf_.reset(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
  ANELAB_CHECK(buf_ != nullptr, "surface", "out of memory allocating ", rounded, " bytes");
  std::memset(buf_.get(), 0, rounded == 0 ? 64 : rounded);
}

void Surface::write(const float* src) {
  size_t n = static_cast<size_t>(numel());
  if (dtype() == mil::DType::kFp16)
    float_to_half(src, f16(), n);
  else
    std::memcpy(f32(), src, n * 4);
}

void Surface::read(float* dst) const {
  size_t n = static_cast<size_t>(numel());
  if (dtype() == mil::DType::kFp16)
    half_to_float(f16(), dst, n);
  else
    std::memcpy(dst, f32(), n * 4);
}

namespace {
void check_rows(const Surface& s, const SurfaceLayout& l, size_t size) {
  ANELAB_CHECK(static_cast<int64_t>(l.rows) * l.width == s.numel() && l.elem_bytes == mil::dtype_bytes(s.dtype()) &&
                   l.row_stride >= l.row_bytes,
               "surface", "device layout (", l.rows, " rows of ", l.width, " x ", l.elem_bytes, " bytes, stride ",
               l.row_stride, ") does not describe ", s.type().str());
  ANELAB_CHECK(size >= l.extent, "surface", "device buffer of ", size, " bytes is smaller than the ", l.extent,
               " bytes that ", s.type().str(), " spans at a ", l.row_stride, "-byte row stride");
}
}  // namespace

void pack_rows(const Surface& s, const SurfaceLayout& l, void* dst, size_t size) {
  check_rows(s, l, size);
  if (l.dense()) return (void)std::memcpy(dst, s.data(), s.bytes());
  const auto* src = static_cast<const uint8_t*>(s.data());
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < l.rows; ++r)
    std::memcpy(out + static_cast<size_t>(r) * l.row_stride, src + static_cast<size_t>(r) * l.row_bytes, l.row_bytes);
}

void unpack_rows(const void* src, size_t size, const SurfaceLayout& l, Surface& s) {
  check_rows(s, l, size);
  if (l.dense()) return (void)std::memcpy(s.data(), src, s.bytes());
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(s.data());
  for (int64_t r = 0; r < l.rows; ++r)
    std::memcpy(out + static_cast<size_t>(r) * l.row_bytes, in + static_cast<size_t>(r) * l.row_stride, l.row_bytes);
}

namespace {
void check_layout(const Surface& s, const mil::IOLayout& layout) {
  const auto& sh = s.type().shape;
  ANELAB_CHECK(sh.size() == 4 && sh[0] == 1 && sh[1] == layout.channels() && sh[2] == 1 && sh[3] == layout.spatial(),
               "surface", "surface ", s.type().str(), " does not match layout '", layout.name(), "' [1, ",
               layout.channels(), ", 1, ", layout.spatial(), "]");
}
}  // namespace

void stage_in(Surface& s, const mil::IOLayout& layout, const std::string& slot, const float* src) {
  check_layout(s, layout);
  const mil::IOSlot& sl = layout.slot(slot);
  const int64_t S = layout.spatial();
  for (int64_t c = 0; c < sl.channels; ++c) {
    size_t base = static_cast<size_t>((sl.ch_offset + c) * S + sl.sp_offset);
    const float* row = src + c * sl.spatial;
    if (s.dtype() == mil::DType::kFp16)
      float_to_half(row, s.f16() + base, static_cast<size_t>(sl.spatial));
    else
      std::memcpy(s.f32() + base, row, static_cast<size_t>(sl.spatial) * 4);
  }
}

void stage_out(const Surface& s, const mil::IOLayout& layout, const std::string& slot, float* dst) {
  check_layout(s, layout);
  const mil::IOSlot& sl = layout.slot(slot);
  const int64_t S = layout.spatial();
  for (int64_t c = 0; c < sl.channels; ++c) {
    size_t base = static_cast<size_t>((sl.ch_offset + c) * S + sl.sp_offset);
    float* row = dst + c * sl.spatial;
    if (s.dtype() == mil::DType::kFp16)
      half_to_float(s.f16() + base, row, static_cast<size_t>(sl.spatial));
    else
      std::memcpy(row, s.f32() + base, static_cast<size_t>(sl.spatial) * 4);
  }
}

}  // namespace anelab::rt
