// IOLayout: how several tensors are packed into one ANE surface [1, C, 1, S] (named slots).
//
// One layout value per kernel, produced by the kernel generator and used in two places:
//   - the MIL side slices each slot out of the packed input (FunctionBuilder::slice_slot) or concats
//     the outputs in slot order;
//   - the host side stages data into / out of surfaces through the same slots (rt::stage_in/out).
// Offsets therefore live in exactly one place.
//
// Slots are rectangles [ch_offset, ch_offset+channels) x [sp_offset, sp_offset+spatial) of the
// channel-major surface (element (c, s) at index c*S + s). Channel packing gives the static kernels'
// "taps"; spatial packing gives the dynamic pipeline's "activations | weights" rows, padded on the
// right to the device's row multiple (pad_spatial).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/mil/types.h"

namespace anelab::mil {

struct IOSlot {
  std::string name;
  int64_t ch_offset = 0, channels = 0;  // channel range
  int64_t sp_offset = 0, spatial = 0;   // spatial range
};

class IOLayout {
 public:
  IOLayout() = default;
  explicit IOLayout(std::string name, DType dtype = DType::kFp16) : name_(std::move(name)), dtype_(dtype) {}

  // Appends a slot below the previous ones (channel packing). spatial = full width S of the surface.
  IOLayout& add_channels(const std::string& slot, int64_t channels, int64_t spatial) {
    check_new(slot);
    slots_.push_back({slot, channels_, channels, 0, spatial});
    channels_ += channels;
    if (spatial > spatial_) spatial_ = spatial;
    return *this;
  }
  // Appends a slot to the right of the previous ones (spatial packing), spanning `channels` rows.
  IOLayout& add_spatial(const std::string& slot, int64_t channels, int64_t spatial) {
    check_new(slot);
    int64_t off = 0;
    for (const auto& s : slots_) off = std::max(off, s.sp_offset + s.spatial);
    slots_.push_back({slot, 0, channels, off, spatial});
    if (channels > channels_) channels_ = channels;
    spatial_ = off + spatial;
    return *this;
  }

  // Widens the surface to a multiple of `multiple` columns (the device's row-stride rule); the
  // columns past the last slot are padding, left zero by the host and never sliced by the MIL.
  IOLayout& pad_spatial(int64_t multiple) {
    ANELAB_CHECK(multiple > 0, "io-layout", "pad_spatial(", multiple, ") in layout '", name_, "'");
    spatial_ = (spatial_ + multiple - 1) / multiple * multiple;
    return *this;
  }
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  int64_t channels() const { return channels_; }  // C of the packed surface
  int64_t spatial() const { return spatial_; }    // S of the packed surface
  TensorType type() const { return tensor_type(dtype_, {1, channels_, 1, spatial_}); }
  const std::vector<IOSlot>& slots() const { return slots_; }
  const IOSlot& slot(const std::string& slot_name) const {
    for (const auto& s : slots_)
      if (s.name == slot_name) return s;
    fail("io-layout", "layout '", name_, "' has no slot '", slot_name, "'");
  }

 private:
  void check_new(const std::string& slot) const {
    for (const auto& s : slots_)
      ANELAB_CHECK(s.name != slot, "io-layout", "layout '", name_, "' already has a slot '", slot, "'");
    ANELAB_CHECK(!slot.empty(), "io-layout", "empty slot name in layout '", name_, "'");
  }
  std::string name_;
  DType dtype_ = DType::kFp16;
  int64_t channels_ = 0, spatial_ = 0;
  std::vector<IOSlot> slots_;
};

}  // namespace anelab::mil
