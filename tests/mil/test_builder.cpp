// Builder: naming, const dedup, inferred shapes, multi-function suffixes, IO-layout slots.
#include <gtest/gtest.h>

#include "framework/mil/builder.h"
#include "framework/mil/check.h"
#include "framework/mil/printer.h"

namespace anelab::mil {
namespace {

TensorType f16(Shape s) { return tensor_type(DType::kFp16, std::move(s)); }

TEST(MilBuilder, ConvSoftmaxShapesAndNames) {
  ProgramBuilder pb;
  auto& b = pb.function("main");
  auto x = b.input("x", f16({1, 512, 1, 256}));
  auto w = b.const_blob(f16({768, 512, 1, 1}), "@model_path/weights/wq.bin", 64);
  auto q = b.named("qf").conv(x, w);
  EXPECT_EQ(q.name, "qf");
  EXPECT_EQ(q.shape(), (Shape{1, 768, 1, 256}));
  auto s = b.softmax(q, 1);
  EXPECT_EQ(s.name, "softmax_0");
  b.output(s);
  Program p = pb.build();
  const Function& f = p.main();
  EXPECT_EQ(f.outputs, std::vector<std::string>{"softmax_0"});
  EXPECT_NE(f.producer("wq"), nullptr);
  EXPECT_NE(f.producer("c_valid"), nullptr);
  EXPECT_NE(f.producer("c_1_1"), nullptr);
  EXPECT_NE(f.producer("c_0_0_0_0"), nullptr);
  EXPECT_NE(f.producer("c_int1"), nullptr);
}

TEST(MilBuilder, ConstsAreDeduplicated) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 64, 1, 16}));
  auto w = b.const_blob(f16({64, 64, 1, 1}), "@model_path/weights/w.bin", 64);
  auto y = b.conv(b.conv(x, w), w);
  b.output(y);
  int consts = 0;
  for (const auto& op : b.function().ops) consts += op.op == "const";
  EXPECT_EQ(consts, 5);  // w, [1,1] (dilations and strides share it), groups, pad, pad_type
}

TEST(MilBuilder, ScalarOverloadsUseOperandDtypeAndRoundFp16) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 4, 1, 8}));
  auto y = b.mul(x, 0.1);
  const Operation* c = b.function().producer(b.function().ops.back().args[1].second.names[0]);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->type, scalar_type(DType::kFp16));
  EXPECT_EQ(c->attr("val")->f[0], 0.0999755859375);  // nearest fp16 to 0.1
  EXPECT_EQ(y.type, x.type);
  auto z = b.sub(1.0, b.sigmoid(x));
  EXPECT_EQ(z.shape(), x.shape());
}

TEST(MilBuilder, MatmulBroadcastAndTranspose) {
  FunctionBuilder b;
  auto q = b.input("q", f16({1, 12, 256, 64}));
  auto k = b.input("k", f16({1, 1, 256, 64}));
  auto s = b.matmul(q, k, false, true);
  EXPECT_EQ(s.shape(), (Shape{1, 12, 256, 256}));
}

TEST(MilBuilder, ReshapeTransposeSliceConcatReduce) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 768, 1, 256}));
  EXPECT_EQ(b.reshape(x, {1, 12, 64, -1}).shape(), (Shape{1, 12, 64, 256}));
  EXPECT_EQ(b.transpose(b.reshape(x, {1, 12, 64, 256}), {0, 1, 3, 2}).shape(), (Shape{1, 12, 256, 64}));
  EXPECT_EQ(b.slice_by_size(x, {0, 64, 0, 0}, {1, 64, 1, -1}).shape(), (Shape{1, 64, 1, 256}));
  EXPECT_EQ(b.slice_by_index(x, {0, 0, 0, 1}, {1, 768, 1, 256}, {.stride = {1, 1, 1, 2}}).shape(),
            (Shape{1, 768, 1, 128}));
  EXPECT_EQ(b.slice_by_index(x, {0, 5, 0, 0}, {1, 6, 1, 256}, {.squeeze_mask = {false, true, false, false}}).shape(),
            (Shape{1, 1, 256}));
  EXPECT_EQ(b.concat({x, x}, 1).shape(), (Shape{1, 1536, 1, 256}));
  EXPECT_EQ(b.reduce_sum(x, {1}).shape(), (Shape{1, 1, 1, 256}));
  EXPECT_EQ(b.reduce_max(x, {-1}, false).shape(), (Shape{1, 768, 1}));
}

TEST(MilBuilder, ConvGeneralGeometry) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 8, 32, 32}));
  auto w = b.const_tensor(f16({16, 4, 3, 3}), std::vector<double>(16 * 4 * 9, 0.5));
  ConvOptions o;
  o.groups = 2;
  o.strides = {2, 2};
  o.pad_type = "same";
  EXPECT_EQ(b.conv(x, w, o).shape(), (Shape{1, 16, 16, 16}));
  // (a fresh options value: g++ 12.2 -O3 miscompiles `o.pad = {1, 1, 0, 0}; o.dilations = {2, 1};` here,
  //  -fno-tree-slp-vectorize avoids it)
  ConvOptions c{
      .strides = {2, 2}, .dilations = {2, 1}, .pad = {1, 1, 0, 0}, .pad_type = "custom", .groups = 2, .bias = {}};
  EXPECT_EQ(b.conv(x, w, c).shape(), (Shape{1, 16, 15, 15}));
}

TEST(MilBuilder, QuantAndSdpaAndCast) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 64, 1, 32}));
  auto q = b.quantize(x, DType::kInt8, 0.125);
  EXPECT_EQ(q.type, tensor_type(DType::kInt8, {1, 64, 1, 32}));
  EXPECT_EQ(b.dequantize(q, 0.125).type, x.type);
  ConstValue qd{tensor_type(DType::kInt8, {64, 64, 1, 1}), {}, std::vector<int64_t>(64 * 64, 3), {}, {}};
  auto w = b.constexpr_affine_dequantize(qd, ConstValue::fp16(0.125), ConstValue::int8(0), 0);
  EXPECT_EQ(w.type, f16({64, 64, 1, 1}));
  EXPECT_EQ(b.cast(x, DType::kFp32).type, tensor_type(DType::kFp32, {1, 64, 1, 32}));
  auto h = b.input("h", f16({1, 4, 32, 16}));
  EXPECT_EQ(b.scaled_dot_product_attention(h, h, h).shape(), (Shape{1, 4, 32, 16}));
}

TEST(MilBuilder, SlotsRoundTripThroughLayout) {
  IOLayout in("fwd_in");
  in.add_channels("x", 64, 32).add_channels("y", 16, 32);
  FunctionBuilder b;
  auto packed = b.input("packed", in.type());
  auto x = b.slice_slot(packed, in, "x");
  auto y = b.slice_slot(packed, in, "y");
  EXPECT_EQ(x.name, "x");  // the slot name is the default hint
  EXPECT_EQ(y.shape(), (Shape{1, 16, 1, 32}));
  auto out = b.concat_slots(in, {b.sigmoid(x), y});
  EXPECT_EQ(out.shape(), in.type().shape);
  IOLayout sp("dyn");
  sp.add_spatial("act", 64, 32).add_spatial("w", 64, 16);
  auto p2 = b.input("p2", sp.type());
  EXPECT_EQ(b.slice_slot(p2, sp, "w").shape(), (Shape{1, 64, 1, 16}));
  EXPECT_THROW(b.concat_slots(in, {x}), Error);
}

TEST(MilBuilder, MultiFunctionSuffixes) {
  ProgramBuilder pb;
  for (int k = 0; k < 2; ++k) {
    auto& b = pb.function("layer" + std::to_string(k));
    auto x = b.input("x" + std::to_string(k), f16({1, 8, 1, 4}));
    b.output(b.add(x, 1.0));
  }
  Program p = pb.build(Dialect::kIos16);
  EXPECT_EQ(p.functions[0].outputs[0], "add_0_0");
  EXPECT_EQ(p.functions[1].outputs[0], "add_0_1");
  EXPECT_NE(p.functions[1].producer("c_fp16_1_1"), nullptr);  // const c_fp16_1 of function 1
  EXPECT_THROW(pb.function("layer0"), Error);
}

// Issue 17 item 7: the ANE numbers input symbols program-wide, so procedures that both name their
// input "x" get x_0, x_1 (ane-infer: InputSymbols [x0, x1]) and the ops follow.
TEST(MilBuilder, MultiFunctionInputNamesAreDistinct) {
  ProgramBuilder pb;
  for (int k = 0; k < 2; ++k) {
    auto& b = pb.function("f" + std::to_string(k));
    auto x = b.input("x", f16({1, 8, 1, 32}));
    b.output(b.mul(x, 2.0));
  }
  Program p = pb.build(Dialect::kIos18);
  EXPECT_EQ(p.functions[0].inputs[0].first, "x_0");
  EXPECT_EQ(p.functions[1].inputs[0].first, "x_1");
  EXPECT_EQ(p.functions[1].ops.back().args[0].second.names[0], "x_1");
  // a single function keeps its names
  ProgramBuilder one;
  auto& b = one.function("main");
  b.output(b.mul(b.input("x", f16({1, 8, 1, 32})), 2.0));
  EXPECT_EQ(one.build().functions[0].inputs[0].first, "x");
}

}  // namespace
}  // namespace anelab::mil
