// Every device-profile rule has a test that trips it (issue 2): minimum spatial extent (fp16 / fp32),
// minimum surface bytes, maximum dimension, conv input channels, cast and dialect on M1-M3, the
// ignored SDPA mask, multi-input surface sizes and slot order, and the compile budget (emulator tests).
#include <gtest/gtest.h>

#include "framework/mil/ir.h"
#include "framework/runtime/device_profile.h"
#include "framework/runtime/surface.h"

namespace anelab::rt {
namespace {

using mil::DType;
using mil::tensor_type;

mil::Operation make_op(std::string op, std::string out, mil::TensorType t,
                       std::vector<std::pair<std::string, mil::Arg>> args = {},
                       std::vector<std::pair<std::string, mil::ConstValue>> attrs = {}) {
  mil::Operation o;
  o.op = std::move(op);
  o.output = out;
  o.name = out;
  o.type = std::move(t);
  o.args = std::move(args);
  o.attrs = std::move(attrs);
  return o;
}

// identity program: x [1, C, 1, S] -> y
mil::Program identity_program(DType dt, int64_t c, int64_t s, mil::Dialect d = mil::Dialect::kIos18) {
  mil::Program p;
  p.dialect = d;
  mil::Function f;
  f.inputs = {{"x", tensor_type(dt, {1, c, 1, s})}};
  f.ops.push_back(make_op("identity", "y", tensor_type(dt, {1, c, 1, s}), {{"x", mil::Arg::value("x")}}));
  f.outputs = {"y"};
  p.functions.push_back(f);
  return p;
}

std::string msg(const Status& s) { return s.message(); }

TEST(DeviceProfile, KnownProfilesAndDefault) {
  EXPECT_EQ(device_profile("m4").dialect, mil::Dialect::kIos18);
  EXPECT_EQ(device_profile("m1").dialect, mil::Dialect::kIos16);
  EXPECT_EQ(device_profile_names().size(), 5u);
  EXPECT_THROW(device_profile("m9"), Error);
  EXPECT_EQ(std::string(kDefaultDevice), "m4");
}

TEST(DeviceProfile, AcceptsLegalProgram) {
  EXPECT_TRUE(check_program(identity_program(DType::kFp16, 64, 32), device_profile("m4")).is_ok());
  EXPECT_TRUE(check_program(identity_program(DType::kFp32, 64, 16), device_profile("m4")).is_ok());
}

TEST(DeviceProfile, MinimumSpatialFp16) {
  Status s = check_program(identity_program(DType::kFp16, 64, 31), device_profile("m4"));
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("spatial extent 31 < 32"), std::string::npos) << msg(s);
}

TEST(DeviceProfile, MinimumSpatialFp32) {
  Status s = check_program(identity_program(DType::kFp32, 64, 15), device_profile("m4"));
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("15 < 16"), std::string::npos) << msg(s);
}

TEST(DeviceProfile, MaximumDimension) {
  Status s = check_program(identity_program(DType::kFp16, 65537, 32), device_profile("m4"));
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("65537"), std::string::npos) << msg(s);
  EXPECT_TRUE(check_program(identity_program(DType::kFp16, 65536, 32), device_profile("m4")).is_ok());
}

TEST(DeviceProfile, ConvInputChannels) {
  mil::Program p;
  mil::Function f;
  f.inputs = {{"x", tensor_type(DType::kFp16, {1, 32000, 1, 32})}};
  f.ops.push_back(make_op("const", "W", tensor_type(DType::kFp16, {64, 32000, 1, 1}), {},
                          {{"val", mil::ConstValue::blobfile(tensor_type(DType::kFp16, {64, 32000, 1, 1}),
                                                             "@model_path/weights/w.bin", 64)}}));
  f.ops.push_back(make_op("conv", "y", tensor_type(DType::kFp16, {1, 64, 1, 32}),
                          {{"weight", mil::Arg::value("W")}, {"x", mil::Arg::value("x")}}));
  f.outputs = {"y"};
  p.functions.push_back(f);
  Status s = check_program(p, device_profile("m4"));
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("32000 channels"), std::string::npos) << msg(s);
}

TEST(DeviceProfile, CastRejectedOnM1M2) {
  mil::Program p = identity_program(DType::kFp16, 64, 32, mil::Dialect::kIos16);
  p.functions[0].ops[0].op = "cast";
  EXPECT_EQ(check_program(p, device_profile("m1")).code(), Code::kInvalidArgument);
  EXPECT_NE(msg(check_program(p, device_profile("m2"))).find("cast is not supported"), std::string::npos);
  EXPECT_TRUE(check_program(p, device_profile("m3")).is_ok());
}

TEST(DeviceProfile, Fp32IoRejectedWithoutCast) {
  Status s = check_program(identity_program(DType::kFp32, 64, 32, mil::Dialect::kIos16), device_profile("m1"));
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(msg(s).find("fp16 I/O"), std::string::npos) << msg(s);
}

TEST(DeviceProfile, Ios18DialectRejectedOnOlderChips) {
  Status s = check_program(identity_program(DType::kFp16, 64, 32, mil::Dialect::kIos18), device_profile("m2"));
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(msg(s).find("ios16"), std::string::npos) << msg(s);
  EXPECT_TRUE(check_program(identity_program(DType::kFp16, 64, 32, mil::Dialect::kIos16), device_profile("m2")).is_ok());
}

TEST(DeviceProfile, SdpaMaskRejected) {
  mil::Program p;
  mil::Function f;
  auto t = tensor_type(DType::kFp16, {1, 4, 32, 32});
  f.inputs = {{"q", t}, {"k", t}, {"v", t}, {"m", tensor_type(DType::kFp16, {1, 1, 32, 32})}};
  f.ops.push_back(make_op("scaled_dot_product_attention", "y", t,
                          {{"query", mil::Arg::value("q")}, {"key", mil::Arg::value("k")}, {"value", mil::Arg::value("v")},
                           {"attn_mask", mil::Arg::value("m")}}));
  f.outputs = {"y"};
  p.functions.push_back(f);
  Status s = check_program(p, device_profile("m4"));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(msg(s).find("attn_mask"), std::string::npos) << msg(s);
  p.functions[0].ops[0].args.pop_back();
  EXPECT_TRUE(check_program(p, device_profile("m4")).is_ok());
}

TEST(DeviceProfile, SlotOrderOnM1) {
  mil::Program p;
  p.dialect = mil::Dialect::kIos16;
  mil::Function f;
  f.inputs = {{"a", tensor_type(DType::kFp16, {1, 64, 1, 64})}, {"b", tensor_type(DType::kFp16, {1, 32, 1, 64})}};
  f.ops.push_back(make_op("identity", "y", tensor_type(DType::kFp16, {1, 64, 1, 64}), {{"x", mil::Arg::value("a")}}));
  f.outputs = {"y"};
  p.functions.push_back(f);
  Status s = check_program(p, device_profile("m1"));
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("ascending"), std::string::npos) << msg(s);
  std::swap(p.functions[0].inputs[0], p.functions[0].inputs[1]);
  EXPECT_TRUE(check_program(p, device_profile("m1")).is_ok());
}

TEST(DeviceProfile, SurfaceRules) {
  const auto& m4 = device_profile("m4");
  mil::Program p = identity_program(DType::kFp16, 64, 32);
  const auto& fn = p.functions[0];
  auto t = fn.inputs[0].second;
  EXPECT_EQ(surface_alloc_bytes(t, m4), 49152u);
  Surface small_in(t), small_out(t);  // exact 4096-byte allocations
  Surface* ins[] = {&small_in};
  Surface* outs[] = {&small_out};
  Status s = check_surfaces(fn, ins, outs, m4);
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("49152"), std::string::npos) << msg(s);
  Surface in(t, surface_alloc_bytes(t, m4)), out(t, surface_alloc_bytes(t, m4));
  Surface* ins2[] = {&in};
  Surface* outs2[] = {&out};
  EXPECT_TRUE(check_surfaces(fn, ins2, outs2, m4).is_ok());
  Surface wrong(tensor_type(DType::kFp32, {1, 64, 1, 32}), 65536);
  Surface* ins3[] = {&wrong};
  EXPECT_NE(msg(check_surfaces(fn, ins3, outs2, m4)).find("declares"), std::string::npos);
  EXPECT_FALSE(check_surfaces(fn, {}, outs2, m4).is_ok());
}

TEST(DeviceProfile, MultiInputSurfacesMustMatchLargest) {
  const auto& m4 = device_profile("m4");
  mil::Function f;
  auto big = tensor_type(DType::kFp16, {1, 512, 1, 128});  // 131072 bytes
  auto small = tensor_type(DType::kFp16, {1, 64, 1, 32});
  f.inputs = {{"a", small}, {"b", big}};
  f.ops.push_back(make_op("identity", "y", big, {{"x", mil::Arg::value("b")}}));
  f.outputs = {"y"};
  Surface a(small, surface_alloc_bytes(small, m4)), b(big, surface_alloc_bytes(big, m4)), y(big, surface_alloc_bytes(big, m4));
  Surface* ins[] = {&a, &b};
  Surface* outs[] = {&y};
  Status s = check_surfaces(f, ins, outs, m4);
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("largest I/O tensor"), std::string::npos) << msg(s);
  Surface a2(small, b.alloc_bytes());
  Surface* ins2[] = {&a2, &b};
  EXPECT_TRUE(check_surfaces(f, ins2, outs, m4).is_ok());
}

}  // namespace
}  // namespace anelab::rt
