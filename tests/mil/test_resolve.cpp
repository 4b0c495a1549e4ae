// The registry's resolvers: typed parameters with defaults filled in and axes normalised, the same for
// every backend that lowers from them.
#include <gtest/gtest.h>

#include "framework/mil/builder.h"
#include "framework/mil/ops.h"

namespace anelab::mil {
namespace {

TensorType f16(Shape s) { return tensor_type(DType::kFp16, std::move(s)); }

// The registry's resolution of the last op the builder added.
Resolved resolve_last(const FunctionBuilder& b) {
  const Function& f = b.function();
  ValueTable t(&f);
  for (const auto& [n, ty] : f.inputs) t.add_input(n, ty);
  for (size_t i = 0; i + 1 < f.ops.size(); ++i) t.add_op_output(i);
  return resolve_op(f.ops.back(), t);
}

TEST(MilResolve, ConvDefaultsWhenArgumentsAreAbsent) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 8, 5, 7}));
  auto w = b.const_tensor(f16({4, 8, 3, 3}), std::vector<double>(4 * 8 * 9, 0.5));
  b.op("conv", {{"x", x}, {"weight", w}});  // strides, dilations, groups, pad, pad_type from the registry
  Resolved r = resolve_last(b);
  const auto& g = std::get<ConvGeometry>(r.params);
  EXPECT_EQ(g.stride[0], 1);
  EXPECT_EQ(g.stride[1], 1);
  EXPECT_EQ(g.dilation[1], 1);
  EXPECT_EQ(g.groups, 1);
  EXPECT_EQ(g.pad[0] + g.pad[1] + g.pad[2] + g.pad[3], 0);  // "valid"
  EXPECT_EQ(r.type.shape, (Shape{1, 4, 3, 5}));
}

TEST(MilResolve, ConvSamePaddingIsResolved) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 8, 5, 8}));
  auto w = b.const_tensor(f16({4, 8, 3, 4}), std::vector<double>(4 * 8 * 12, 0.5));
  b.conv(x, w,
         {.strides = {1, 2}, .dilations = {1, 1}, .pad = {0, 0, 0, 0}, .pad_type = "same", .groups = 1, .bias = {}});
  const auto g = std::get<ConvGeometry>(resolve_last(b).params);
  // H: out 5, total (5-1)+3-5 = 2 -> 1/1. W: out ceil(8/2) = 4, total 3*2+4-8 = 2 -> 1/1.
  EXPECT_EQ((std::vector<int64_t>{g.pad[0], g.pad[1], g.pad[2], g.pad[3]}), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(g.out_h, 5);
  EXPECT_EQ(g.out_w, 4);
}

TEST(MilResolve, ReduceAxesAreNormalisedAndSorted) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 6, 2, 4}));
  b.reduce_sum(x, {-1, 1}, false);
  Resolved r = resolve_last(b);
  const auto& p = std::get<ReduceParams>(r.params);
  EXPECT_EQ(p.axes, (std::vector<int>{1, 3}));
  EXPECT_FALSE(p.keep_dims);
  EXPECT_EQ(r.type.shape, (Shape{1, 2}));
}

TEST(MilResolve, MatmulTransposesDefaultToFalse) {
  FunctionBuilder b;
  auto x = b.input("x", f16({2, 3, 5}));
  auto y = b.input("y", f16({1, 5, 7}));
  b.op("matmul", {{"x", x}, {"y", y}});
  const auto p = std::get<MatmulParams>(resolve_last(b).params);
  EXPECT_FALSE(p.transpose_x || p.transpose_y);
  EXPECT_EQ(p.m, 3);
  EXPECT_EQ(p.k, 5);
  EXPECT_EQ(p.n, 7);
  EXPECT_EQ(p.batch, (Shape{2}));
}

TEST(MilResolve, SliceAndTransposeAndBroadcast) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 8, 1, 6}));
  auto y = b.input("y", f16({2, 1, 1, 1}));
  b.slice_by_index(x, {0, -3, 0, 5}, {1, 8, 1, 0},
                   {.stride = {1, 2, 1, -2}, .begin_mask = {}, .end_mask = {}, .squeeze_mask = {}});
  const auto s = std::get<SliceGeometry>(resolve_last(b).params);
  EXPECT_EQ(s.begin, (std::vector<int64_t>{0, 5, 0, 5}));
  EXPECT_EQ(s.stride, (std::vector<int64_t>{1, 2, 1, -2}));
  EXPECT_EQ(s.length, (std::vector<int64_t>{1, 2, 1, 3}));
  b.transpose(x, {0, -1, 2, 1});
  EXPECT_EQ(std::get<PermParams>(resolve_last(b).params).perm, (std::vector<int>{0, 3, 2, 1}));
  b.add(x, y);
  EXPECT_EQ(std::get<BroadcastParams>(resolve_last(b).params).out, (Shape{2, 8, 1, 6}));
}

TEST(MilResolve, LayerNormEpsilonDefault) {
  FunctionBuilder b;
  auto x = b.input("x", f16({1, 4, 1, 8}));
  b.op("layer_norm", {{"x", x}});
  const auto p = std::get<LayerNormParams>(resolve_last(b).params);
  EXPECT_EQ(p.axes, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(p.epsilon, static_cast<double>(1e-5));
}

}  // namespace
}  // namespace anelab::mil
