// Every device-profile rule has a test that trips it: minimum spatial extent (fp16 / fp32),
// minimum surface bytes, maximum dimension, conv input channels, cast and dialect on M1-M3, the
// ignored SDPA mask, multi-input surface sizes and slot order, and the compile budget (emulator tests).
#include <gtest/gtest.h>

#include "framework/mil/builder.h"
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
  EXPECT_EQ(std::string(kDefaultDevice), "auto");  // the chip's profile on the ane backend, m4 elsewhere
  EXPECT_EQ(std::string(kFallbackDevice), "m4");
}

TEST(DeviceProfile, AcceptsLegalProgram) {
  EXPECT_TRUE(check_program(identity_program(DType::kFp16, 64, 64), device_profile("m4")).is_ok());
  EXPECT_TRUE(check_program(identity_program(DType::kFp32, 64, 32), device_profile("m4")).is_ok());
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

// Issue 17 item 8: the reported cap 65536 is exclusive until the probe shows otherwise; gqa_expand and
// the RoPE reshape reach exactly 65536 at S=1024.
TEST(DeviceProfile, MaximumDimensionIsExclusive) {
  for (const std::string& dev : device_profile_names()) {
    Status s =
        check_program(identity_program(DType::kFp16, 65536, 64, device_profile(dev).dialect), device_profile(dev));
    EXPECT_EQ(s.code(), Code::kLimitExceeded) << dev;
    EXPECT_NE(msg(s).find("65536"), std::string::npos) << msg(s);
    EXPECT_TRUE(
        check_program(identity_program(DType::kFp16, 65535, 64, device_profile(dev).dialect), device_profile(dev))
            .is_ok())
        << dev;
  }
  EXPECT_EQ(max_dim_all_profiles(), 65535);
}

// Issue 17 item 3, issue 40 item 2: rows of I/O tensors start every row_align_bytes (128) on the device:
// a width that is not a multiple of 64 fp16 (32 fp32) columns is rejected, the layout pads rows, and
// allocations count channels rounded up to 64 (test_lm_head_ane.m).
TEST(DeviceProfile, RowStrideRule) {
  for (const auto& name : device_profile_names()) EXPECT_EQ(device_profile(name).row_align_bytes, 128u) << name;
  const auto& m4 = device_profile("m4");
  for (int64_t s : {32, 33, 48, 96, 100}) {
    Status st = check_program(identity_program(DType::kFp16, 64, s), m4);
    EXPECT_EQ(st.code(), Code::kLimitExceeded) << s;
    EXPECT_NE(msg(st).find("row-stride rule"), std::string::npos) << msg(st);
  }
  for (int64_t s : {64, 128, 256}) EXPECT_TRUE(check_program(identity_program(DType::kFp16, 64, s), m4).is_ok()) << s;
  EXPECT_TRUE(check_program(identity_program(DType::kFp32, 64, 32), m4).is_ok());
  EXPECT_FALSE(check_program(identity_program(DType::kFp32, 64, 16), m4).is_ok());

  const SurfaceLayout l33 = surface_layout(tensor_type(DType::kFp16, {1, 64, 1, 33}), m4);
  EXPECT_EQ(l33.rows, 64);
  EXPECT_EQ(l33.row_bytes, 66u);
  EXPECT_EQ(l33.row_stride, 128u);
  EXPECT_EQ(l33.extent, 63u * 128 + 66);
  EXPECT_FALSE(l33.dense());
  EXPECT_FALSE(surface_layout(tensor_type(DType::kFp16, {1, 64, 1, 32}), m4).dense());
  EXPECT_TRUE(surface_layout(tensor_type(DType::kFp16, {1, 64, 1, 64}), m4).dense());
  // 49152 = 384 channels x 64 columns x 2 bytes: exactly the minimum
  EXPECT_EQ(surface_alloc_bytes(tensor_type(DType::kFp16, {1, 384, 1, 64}), m4), 49152u);
  // 129 channels count as 192: 192 x 1024 x 2 = 393216 (dense C x S x 2 would give 278528)
  EXPECT_EQ(surface_alloc_bytes(tensor_type(DType::kFp16, {1, 129, 1, 1024}), m4), 393216u);
  EXPECT_EQ(dense_width_multiple(DType::kFp16), 64);
  EXPECT_EQ(dense_width_multiple(DType::kFp32), 32);
}

// An evaluate-time surface must span the rows at the device's stride.
TEST(DeviceProfile, SurfaceMustSpanStridedRows) {
  DeviceProfile p = device_profile("m4");
  mil::Program prog = identity_program(DType::kFp16, 768, 32);
  const auto& fn = prog.functions[0];
  Surface in(fn.inputs[0].second, 49152), out(fn.inputs[0].second, 49152);
  Surface* ins[] = {&in};
  Surface* outs[] = {&out};
  p.row_align_bytes = 64;  // 768 rows of 64 bytes: 49152 bytes
  EXPECT_TRUE(check_surfaces(fn, ins, outs, p).is_ok());
  p.row_align_bytes = 128;  // a profile whose rows are 128 bytes apart needs 767*128+64 bytes
  Status s = check_surfaces(fn, ins, outs, p);
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("row stride"), std::string::npos) << msg(s);
}

// Issue 17 item 5: aneSubType -> profile; "auto" means m4 where no chip is asked.
TEST(DeviceProfile, ChipFamilyMapsToProfile) {
  EXPECT_EQ(profile_for_ane_sub_type("H13G"), "m1");
  EXPECT_EQ(profile_for_ane_sub_type("H14"), "m2");
  EXPECT_EQ(profile_for_ane_sub_type("H15G"), "m3");
  EXPECT_EQ(profile_for_ane_sub_type("H16G"), "m4");
  EXPECT_EQ(profile_for_ane_sub_type("H17S"), "m5");
  EXPECT_EQ(profile_for_ane_sub_type("H11"), "");
  // Issue 40 item 1: real chips report lowercase families (maderix/ANE PR #50: h16 on M4 and base M5,
  // h17 on M5 Max); any case, any suffix.
  const std::pair<const char*, const char*> lower[] = {{"h13", "m1"}, {"h14", "m2"},  {"h15", "m3"},  {"h16", "m4"},
                                                       {"h17", "m5"}, {"h16g", "m4"}, {"H16G", "m4"}, {"h13G", "m1"}};
  for (const auto& [sub, profile] : lower) EXPECT_EQ(profile_for_ane_sub_type(sub), profile) << sub;
  EXPECT_EQ(profile_for_ane_sub_type("h1"), "");
  EXPECT_EQ(profile_for_ane_sub_type("xh16"), "");
  EXPECT_EQ(profile_for_ane_sub_type(""), "");
  EXPECT_EQ(device_profile("auto").name, "m4");
  EXPECT_EQ(std::string(kDefaultDevice), "auto");
}

// Issue 17 item 7: the ANE numbers input symbols program-wide; duplicate names across procedures are
// rejected before the compiler sees them.
TEST(DeviceProfile, DuplicateInputNamesAcrossProceduresAreRejected) {
  mil::Program p = identity_program(DType::kFp16, 64, 64);
  mil::Function f2 = p.functions[0];
  f2.name = "second";
  p.functions.push_back(f2);
  Status s = check_program(p, device_profile("m4"));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(msg(s).find("input 'x'"), std::string::npos) << msg(s);
  p.functions[1].inputs[0].first = "x_1";
  p.functions[1].ops[0].args[0].second = mil::Arg::value("x_1");
  EXPECT_TRUE(check_program(p, device_profile("m4")).is_ok()) << msg(check_program(p, device_profile("m4")));
}

TEST(DeviceProfile, ConvInputChannels) {
  mil::Program p;
  mil::Function f;
  f.inputs = {{"x", tensor_type(DType::kFp16, {1, 32000, 1, 64})}};
  f.ops.push_back(make_op("const", "W", tensor_type(DType::kFp16, {64, 32000, 1, 1}), {},
                          {{"val", mil::ConstValue::blobfile(tensor_type(DType::kFp16, {64, 32000, 1, 1}),
                                                             "@model_path/weights/w.bin", 64)}}));
  f.ops.push_back(make_op("conv", "y", tensor_type(DType::kFp16, {1, 64, 1, 64}),
                          {{"weight", mil::Arg::value("W")}, {"x", mil::Arg::value("x")}}));
  f.outputs = {"y"};
  p.functions.push_back(f);
  Status s = check_program(p, device_profile("m4"));
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_NE(msg(s).find("32000 channels"), std::string::npos) << msg(s);
}

TEST(DeviceProfile, CastRejectedOnM1M2) {
  mil::Program p = identity_program(DType::kFp16, 64, 64, mil::Dialect::kIos16);
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
  Status s = check_program(identity_program(DType::kFp16, 64, 64, mil::Dialect::kIos18), device_profile("m2"));
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(msg(s).find("ios16"), std::string::npos) << msg(s);
  EXPECT_TRUE(
      check_program(identity_program(DType::kFp16, 64, 64, mil::Dialect::kIos16), device_profile("m2")).is_ok());
}

// x + W with W a 4-bit compressed weight of `form` ("blockwise", "lut", "affine4"), in dialect d.
mil::Program four_bit_program(const std::string& form, mil::Dialect d) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  const mil::Shape shape{1, 64, 1, 64};
  auto x = b.input("x", mil::tensor_type(DType::kFp16, shape));
  const auto data = mil::ConstValue::blobfile(mil::tensor_type(DType::kUint4, shape), "@model_path/weights/w.bin", 64);
  mil::Value w;
  if (form == "blockwise")
    w = b.constexpr_blockwise_shift_scale(
        data, mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {1, 64, 1, 2}), std::vector<double>(128, 0.5)));
  else if (form == "lut")
    w = b.constexpr_lut_to_dense(data, mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {1, 64, 1, 1, 16, 1}),
                                                               std::vector<double>(1024, 1)));
  else
    w = b.constexpr_affine_dequantize(data, mil::ConstValue::fp16(0.5),
                                      {mil::scalar_type(DType::kUint4), {}, {8}, {}, {}}, 1);
  b.output(b.add(x, w));
  return pb.build(d);
}

TEST(DeviceProfile, FourBitWeightFormsNeedAnIos18Program) {
  for (const char* form : {"blockwise", "lut", "affine4"}) {
    Status s = check_program(four_bit_program(form, mil::Dialect::kIos16), device_profile("m3"));
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << form;
    EXPECT_NE(msg(s).find("iOS18 compressed-weight form"), std::string::npos) << msg(s);
    // Unknown on the ios18 chips until `anelab probe` measures them: accepted there.
    EXPECT_TRUE(check_program(four_bit_program(form, mil::Dialect::kIos18), device_profile("m4")).is_ok()) << form;
  }
}

TEST(DeviceProfile, SdpaMaskRejected) {
  mil::Program p;
  mil::Function f;
  auto t = tensor_type(DType::kFp16, {1, 4, 64, 64});
  f.inputs = {{"q", t}, {"k", t}, {"v", t}, {"m", tensor_type(DType::kFp16, {1, 1, 64, 64})}};
  f.ops.push_back(make_op("scaled_dot_product_attention", "y", t,
                          {{"query", mil::Arg::value("q")},
                           {"key", mil::Arg::value("k")},
                           {"value", mil::Arg::value("v")},
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
  mil::Program p = identity_program(DType::kFp16, 64, 64);
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
  Surface a(small, surface_alloc_bytes(small, m4)), b(big, surface_alloc_bytes(big, m4)),
      y(big, surface_alloc_bytes(big, m4));
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
