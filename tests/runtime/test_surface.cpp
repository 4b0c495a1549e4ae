// Surfaces and IO layouts: channel-major layout, fp16 rounding on staging, slot packing along
// channels (taps) and along spatial (dynamic weights) staged through the same layout value.
#include <gtest/gtest.h>

#include <cstring>

#include "framework/core/fp16.h"
#include "framework/mil/io_layout.h"
#include "framework/runtime/device_profile.h"
#include "framework/runtime/surface.h"

namespace anelab::rt {
namespace {

using mil::DType;

// Issue 17 item 3: host staging into the device's row layout (rows every row_stride bytes).
TEST(Surface, PackAndUnpackRowsAtTheDeviceStride) {
  DeviceProfile p = device_profile("m4");
  const auto t = mil::tensor_type(DType::kFp16, {1, 3, 1, 33});  // 66-byte rows, 128-byte stride
  const SurfaceLayout l = surface_layout(t, p);
  ASSERT_EQ(l.row_stride, 128u);
  Surface s(t);
  for (int i = 0; i < 99; ++i) s.f16()[i] = float_to_half(float(i + 1));
  std::vector<uint8_t> dev(l.alloc_bytes, 0xAB);
  pack_rows(s, l, dev.data(), dev.size());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 33; ++c) {
      half_bits h;
      std::memcpy(&h, dev.data() + r * 128 + c * 2, 2);
      EXPECT_EQ(half_to_float(h), float(r * 33 + c + 1)) << r << "," << c;
    }
  EXPECT_EQ(dev[66], 0xAB);  // the gap between rows is left alone
  Surface back(t);
  unpack_rows(dev.data(), dev.size(), l, back);
  EXPECT_EQ(std::memcmp(back.data(), s.data(), s.bytes()), 0);
  EXPECT_THROW(pack_rows(s, l, dev.data(), l.extent - 1), Error);
  const SurfaceLayout dense = surface_layout(mil::tensor_type(DType::kFp16, {1, 3, 1, 64}), p);
  Surface d(mil::tensor_type(DType::kFp16, {1, 3, 1, 64}));
  d.f16()[191] = float_to_half(7.0f);
  pack_rows(d, dense, dev.data(), dev.size());
  EXPECT_EQ(std::memcmp(dev.data(), d.data(), d.bytes()), 0);
}

TEST(Surface, ChannelMajorStagingWithFp16Rounding) {
  Surface s(mil::tensor_type(DType::kFp16, {1, 3, 1, 4}), 49152);
  std::vector<float> src(12);
  for (int c = 0; c < 3; ++c)
    for (int t = 0; t < 4; ++t) src[c * 4 + t] = 1.0f + 0.0001f * (c * 4 + t) + 100.0f * c;
  s.write(src.data());
  for (int c = 0; c < 3; ++c)
    for (int t = 0; t < 4; ++t) EXPECT_EQ(half_to_float(s.f16()[c * 4 + t]), round_fp16(src[c * 4 + t]));
  std::vector<float> back(12);
  s.read(back.data());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(back[i], round_fp16(src[i]));
  EXPECT_EQ(s.alloc_bytes(), 49152u);
  EXPECT_THROW(Surface(mil::tensor_type(DType::kInt32, {1, 1, 1, 32})), Error);
  EXPECT_THROW(Surface(mil::tensor_type(DType::kFp16, {1, 64, 1, 64}), 100), Error);
}

TEST(IOLayout, ChannelSlotsStageInAndOut) {
  mil::IOLayout L("taps");
  L.add_channels("q", 2, 32).add_channels("k", 3, 32);
  EXPECT_EQ(L.channels(), 5);
  EXPECT_EQ(L.slot("k").ch_offset, 2);
  EXPECT_THROW(L.add_channels("q", 1, 32), Error);
  EXPECT_THROW(L.slot("nope"), Error);
  Surface s(L.type(), 49152);
  std::vector<float> k(3 * 32);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i);
  stage_in(s, L, "k", k.data());
  // element (c, t) of slot k lives at (2 + c) * 32 + t
  EXPECT_EQ(half_to_float(s.f16()[(2 + 1) * 32 + 5]), 37.0f);
  EXPECT_EQ(half_to_float(s.f16()[0]), 0.0f);  // q untouched
  std::vector<float> out(3 * 32);
  stage_out(s, L, "k", out.data());
  EXPECT_EQ(out, k);
}

TEST(IOLayout, SpatialSlotsForDynamicWeights) {
  // [1, IC, 1, SEQ + OC]: activations | weights (digest §5.4)
  mil::IOLayout L("dyn");
  L.add_spatial("act", 4, 32).add_spatial("w", 4, 8);
  EXPECT_EQ(L.spatial(), 40);
  EXPECT_EQ(L.channels(), 4);
  EXPECT_EQ(L.slot("w").sp_offset, 32);
  Surface s(L.type(), 49152);
  std::vector<float> w(4 * 8);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i);
  stage_in(s, L, "w", w.data());
  EXPECT_EQ(half_to_float(s.f16()[2 * 40 + 32 + 3]), w[2 * 8 + 3]);
  Surface wrong(mil::tensor_type(DType::kFp16, {1, 4, 1, 39}), 49152);
  EXPECT_THROW(stage_in(wrong, L, "w", w.data()), Error);
}

}  // namespace
}  // namespace anelab::rt
