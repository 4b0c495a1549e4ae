// Builder type errors: every op rejects at least one mismatch, naming the op, its name and the shapes.
#include <gtest/gtest.h>

#include <functional>

#include "framework/mil/builder.h"

namespace anelab::mil {
namespace {

TensorType f16(Shape s) { return tensor_type(DType::kFp16, std::move(s)); }

// Runs `f` and asserts it throws an anelab::Error whose message contains every part.
void expect_error(const std::function<void()>& f, std::vector<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("[mil] ", 0), 0u) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "missing '" << p << "' in: " << m;
    return;
  }
  ADD_FAILURE() << "no error thrown (expected parts: " << parts[0] << ")";
}

struct Fixture : ::testing::Test {
  FunctionBuilder b;
  Value x = b.input("x", f16({1, 768, 1, 256}));
  Value h = b.input("h", f16({1, 12, 256, 64}));
  Value i8 = b.input("i8", tensor_type(DType::kInt8, {1, 768, 1, 256}));
};

TEST_F(Fixture, Conv) {
  auto w = b.const_blob(f16({768, 512, 1, 1}), "@model_path/weights/wq.bin", 64);
  expect_error([&] { b.named("cq").conv(x, w); },
               {"conv 'cq'", "weight [768, 512, 1, 1] expects x with 512 channels", "got x [1, 768, 1, 256]"});
  auto w8 = b.const_tensor(tensor_type(DType::kInt8, {768, 768, 1, 1}), std::vector<double>(768 * 768, 1));
  expect_error(
      [&] { b.conv(x, w8); },
      {"conv 'conv_", "argument weight = c_int8 has type tensor<int8, [768, 768, 1, 1]>", "expected dtype fp16/fp32"});
  auto w3 = b.const_tensor(f16({8, 768, 3, 3}), std::vector<double>(8 * 768 * 9, 0));
  expect_error([&] { b.conv(x, w3); }, {"conv", "kernel [8, 768, 3, 3] does not fit x [1, 768, 1, 256]"});
  ConvOptions o;
  o.pad_type = "reflect";
  expect_error([&] { b.conv(x, w3, o); }, {"conv", "pad_type = \"reflect\""});
}

TEST_F(Fixture, Matmul) {
  expect_error([&] { b.named("qk").matmul(h, h); },
               {"matmul 'qk'", "inner dimensions differ", "x [1, 12, 256, 64]", "K=64", "K=256"});
  auto k = b.input("k", f16({1, 5, 64, 256}));
  expect_error([&] { b.matmul(h, k); }, {"matmul", "broadcast batch dimensions", "[1, 5, 64, 256]"});
  expect_error([&] { b.matmul(x, i8); }, {"matmul", "argument y = i8 has type tensor<int8"});
  auto x32 = b.input("x32", tensor_type(DType::kFp32, {1, 12, 64, 256}));
  expect_error([&] { b.matmul(h, x32); }, {"matmul", "different dtypes"});
}

TEST_F(Fixture, Softmax) {
  expect_error([&] { b.softmax(x, 4); }, {"softmax 'softmax_0'", "axis = 4", "x [1, 768, 1, 256]"});
}
TEST_F(Fixture, Reshape) {
  expect_error([&] { b.reshape(x, {1, 12, 64, 255}); }, {"reshape", "[1, 12, 64, 255]", "x [1, 768, 1, 256]"});
  expect_error([&] { b.reshape(x, {1, -1, -1, 256}); }, {"reshape", "only one -1"});
}
TEST_F(Fixture, Transpose) {
  expect_error([&] { b.transpose(x, {0, 1, 1, 2}); }, {"transpose", "perm [0, 1, 1, 2]", "x [1, 768, 1, 256]"});
}
TEST_F(Fixture, SliceBySize) {
  expect_error(
      [&] {
        b.slice_by_size(x, {0, 700, 0, 0}, {1, 100, 1, 256});
      },
      {"slice_by_size", "out of bounds", "x [1, 768, 1, 256]", "dim 1"});
  expect_error([&] { b.slice_by_size(x, {0, 0, 0}, {1, 1, 1}); }, {"slice_by_size", "one entry per dim"});
}
TEST_F(Fixture, SliceByIndex) {
  expect_error(
      [&] {
        b.slice_by_index(x, {0, 10, 0, 0}, {1, 5, 1, 256});
      },
      {"slice_by_index", "selects nothing in dim 1", "x [1, 768, 1, 256]"});
}
TEST_F(Fixture, Concat) {
  auto y = b.input("y", f16({1, 768, 1, 128}));
  expect_error(
      [&] {
        b.named("taps").concat({x, y}, 1);
      },
      {"concat 'taps'", "values[1] y tensor<fp16, [1, 768, 1, 128]>", "outside axis 1"});
  expect_error([&] { b.concat({x, y}, 3, true); }, {"concat", "interleave needs equal shapes"});
}
TEST_F(Fixture, Reduce) {
  expect_error([&] { b.reduce_sum(x, {1, 1}); }, {"reduce_sum", "axes [1, 1]", "x [1, 768, 1, 256]"});
  expect_error([&] { b.reduce_max(x, {7}); }, {"reduce_max", "axes [7]"});
}
TEST_F(Fixture, Binary) {
  auto y = b.input("y", f16({1, 12, 1, 256}));
  for (const char* op : {"pow", "mul", "add", "sub", "real_div"}) {
    expect_error(
        [&] {
          b.op(op, {{"x", x}, {"y", y}});
        },
        {op, "cannot broadcast x [1, 768, 1, 256] with y [1, 12, 1, 256]"});
  }
  auto x32 = b.input("x32", tensor_type(DType::kFp32, {1, 768, 1, 256}));
  expect_error([&] { b.add(x, x32); },
               {"add", "x tensor<fp16, [1, 768, 1, 256]> and y tensor<fp32, [1, 768, 1, 256]> have different dtypes"});
  expect_error([&] { b.pow(i8, 2.0); }, {"pow", "int8", "expected dtype fp16/fp32"});
}
TEST_F(Fixture, Unary) {
  for (const char* op : {"sigmoid", "tanh", "exp", "relu", "softplus"})
    expect_error([&] { b.op(op, {{"x", i8}}); }, {op, "argument x = i8 has type tensor<int8, [1, 768, 1, 256]>"});
  expect_error([&] { b.op("identity", {}); }, {"identity", "missing required argument 'x'"});
}
TEST_F(Fixture, Cast) {
  expect_error([&] { b.cast(x, DType::kUint64); }, {"cast", "dtype = \"uint64\""});
}
TEST_F(Fixture, Quantize) {
  expect_error([&] { b.quantize(x, DType::kFp16, 0.5); }, {"quantize", "output_dtype = \"fp16\""});
  auto s = b.const_tensor(f16({3}), {1, 2, 3});
  expect_error([&] { b.quantize(x, DType::kInt8, s, {.zero_point = {}, .axis = 1}); },
               {"quantize", "scale tensor<fp16, [3]>", "dimension 1 of [1, 768, 1, 256]"});
}
TEST_F(Fixture, Dequantize) {
  expect_error([&] { b.dequantize(x, 0.5); }, {"dequantize", "argument input = x", "expected dtype int8/uint8"});
  auto zp = b.const_tensor(tensor_type(DType::kUint8, {}), {1});
  expect_error([&] { b.dequantize(i8, 0.5, {.zero_point = zp, .axis = {}}); }, {"dequantize", "zero_point", "uint8"});
}
TEST_F(Fixture, ConstexprAffineDequantize) {
  ConstValue qd =
      ConstValue::blobfile(tensor_type(DType::kInt8, {512, 512, 1, 1}), "@model_path/weights/weight.bin", 64);
  expect_error(
      [&] {
        b.named("W0").constexpr_affine_dequantize(qd, ConstValue::fp16(0.125),
                                                  ConstValue{tensor_type(DType::kUint8, {}), {}, {0}, {}, {}}, 0);
      },
      {"constexpr_affine_dequantize 'W0'", "zero_point", "quantized_data tensor<int8, [512, 512, 1, 1]>"});
  ConstValue sc = ConstValue::floats(f16({3}), {1, 2, 3});
  expect_error([&] { b.constexpr_affine_dequantize(qd, sc, ConstValue::int8(0), 0); },
               {"constexpr_affine_dequantize", "scale tensor<fp16, [3]>", "[512, 512, 1, 1]"});
}
TEST_F(Fixture, Sdpa) {
  auto k = b.input("k", f16({1, 12, 128, 32}));
  expect_error([&] { b.scaled_dot_product_attention(h, k, k); },
               {"scaled_dot_product_attention", "query [1, 12, 256, 64]", "key [1, 12, 128, 32]"});
  auto m = b.input("m", f16({1, 1, 256, 100}));
  expect_error([&] { b.scaled_dot_product_attention(h, h, h, m); },
               {"scaled_dot_product_attention", "attn_mask [1, 1, 256, 100]", "[1, 12, 256, 256]"});
}
TEST_F(Fixture, LayerNorm) {
  auto g = b.const_tensor(f16({100}), std::vector<double>(100, 1));
  expect_error([&] { b.layer_norm(x, {1}, g); }, {"layer_norm", "gamma [100]", "[768]"});
}
TEST_F(Fixture, ConstAndGeneric) {
  expect_error([&] { b.op("rsqrt", {{"x", x}}); }, {"unknown op 'rsqrt'", "known ops", "conv"});
  expect_error([&] { b.op("sigmoid", {{"x", x}, {"mode", x}}); }, {"sigmoid", "unknown argument 'mode'"});
  expect_error([&] { b.op("constexpr_affine_dequantize", {{"axis", x}}); }, {"'axis' must be a bracket attribute"});
  expect_error([&] { b.const_tensor(f16({2, 2}), {1, 2, 3}); }, {"const_tensor", "3 elements"});
  expect_error([&] { b.named("ss").reduce_sum(b.named("sq").mul(x, x), {1}); },
               {"named(\"sq\") while the hint \"ss\" is still pending"});
  FunctionBuilder other;
  auto z = other.input("z", f16({1, 1, 1, 1}));
  expect_error([&] { b.sigmoid(z); }, {"value 'z' is not defined in function 'main'"});
  auto ax = b.input("ax", scalar_type(DType::kInt32));
  expect_error(
      [&] {
        b.op("softmax", {{"axis", ax}, {"x", x}});
      },
      {"softmax", "argument axis = ax must be produced by a const op"});
}

}  // namespace
}  // namespace anelab::mil
