// Printer goldens (both dialects), print -> parse -> print round trips, hand-written ANE-style MIL.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "framework/mil/parser.h"
#include "framework/mil/printer.h"
#include "tests/common/mil_text_checks.h"
#include "tests/mil/mil_test_programs.h"

namespace anelab::mil {
namespace {

std::string golden_path(const std::string& name) {
  return std::string(ANELAB_SOURCE_DIR) + "/tests/mil/golden/" + name;
}

// Compares with tests/mil/golden/<name>; ANELAB_UPDATE_GOLDEN=1 rewrites the file (review the diff!).
void expect_golden(const std::string& text, const std::string& name) {
  if (std::getenv("ANELAB_UPDATE_GOLDEN")) std::ofstream(golden_path(name), std::ios::binary) << text;
  std::ifstream in(golden_path(name), std::ios::binary);
  ASSERT_TRUE(in) << "missing golden file " << golden_path(name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(text, ss.str()) << "golden " << name << " differs";
}

void expect_round_trip(const Program& p, Dialect d) {
  std::string t1 = print(p, d);
  Program q = parse(t1, "roundtrip.mil");
  EXPECT_EQ(q.dialect, d);
  EXPECT_TRUE(q == p) << "parse(print(p)) != p for\n" << t1;
  EXPECT_EQ(print(q, d), t1);
}

TEST(MilGolden, ConvKernel) {
  expect_golden(print(testprogs::conv_kernel(Dialect::kIos18)), "conv_ios18.mil");
  expect_golden(print(testprogs::conv_kernel(Dialect::kIos16)), "conv_ios16.mil");
}

TEST(MilGolden, RmsnormAttentionKernel) {
  expect_golden(print(testprogs::rmsnorm_attention_kernel(Dialect::kIos18)), "rmsnorm_attention_ios18.mil");
  expect_golden(print(testprogs::rmsnorm_attention_kernel(Dialect::kIos16)), "rmsnorm_attention_ios16.mil");
}

TEST(MilGolden, HeaderLinesMatchTheDigest) {
  std::string a = print(testprogs::conv_kernel(Dialect::kIos18));
  EXPECT_EQ(a.substr(0, a.find("    func")),
            "program(1.3)\n[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, "
            "{\"coremlc-version\", \"3505.4.1\"}, "
            "{\"coremltools-component-milinternal\", \"\"}, {\"coremltools-version\", \"9.0\"}})]\n{\n");
  std::string b = print(testprogs::conv_kernel(Dialect::kIos16));
  EXPECT_EQ(b.substr(0, b.find("    func")),
            "program(1.0)\n[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{\"coremlc-version\", "
            "\"3505.4.1\"}})]\n{\n");
  EXPECT_NE(b.find("tensor<string, []> c_valid = const()[name = tensor<string, []>(\"c_valid\"), val = tensor<string, "
                   "[]>(\"valid\")];"),
            std::string::npos);
  EXPECT_NE(
      b.find("BLOBFILE(path = tensor<string, []>(\"@model_path/weights/wq.bin\"), offset = tensor<uint64, []>(64))"),
      std::string::npos);
  EXPECT_EQ(a.substr(a.size() - 18), "    } -> (out);\n}\n");
}

TEST(MilRoundTrip, AllProgramsBothDialects) {
  for (Dialect d : {Dialect::kIos18, Dialect::kIos16}) {
    expect_round_trip(testprogs::conv_kernel(d), d);
    expect_round_trip(testprogs::rmsnorm_attention_kernel(d), d);
    expect_round_trip(testprogs::every_op_program(d), d);
    expect_round_trip(testprogs::multi_function_program(d), d);
  }
}

TEST(MilRoundTrip, EveryRegisteredOpIsCovered) {
  Program p = testprogs::every_op_program(Dialect::kIos18);
  for (const auto& spec : all_ops()) {
    bool found = false;
    for (const auto& op : p.main().ops) found = found || op.op == spec.name;
    EXPECT_TRUE(found) << "every_op_program lacks " << spec.name;
  }
}

TEST(MilRoundTrip, FloatLiteralsAreBitExact) {
  ProgramBuilder pb;
  auto& b = pb.function();
  std::vector<double> vals{0.1, 1.0 / 3.0, 1e-300, -2.5e300, 65504, -0.0, 5e-324, 0.0013017654418945312, 1e-5};
  auto x = b.input("x", tensor_type(DType::kFp32, {9}));
  b.output(b.add(x, b.const_tensor(tensor_type(DType::kFp32, {9}), vals)));
  Program p = pb.build();
  Program q = parse(print(p));
  const auto& f = q.main().ops[0].attr("val")->f;
  ASSERT_EQ(f.size(), vals.size());
  for (size_t i = 0; i < vals.size(); ++i) EXPECT_EQ(std::memcmp(&f[i], &vals[i], sizeof(double)), 0) << vals[i];
}

// Issue 17 item 4: constants print exactly, as integers or hex floats (Apple's model.mil form), never
// as exponent-form decimals, and the parser reads them back.
TEST(MilPrinter, FloatConstantsPrintAsExactHexOrIntegers) {
  EXPECT_EQ(format_double(0.125), "0x1p-3");
  EXPECT_EQ(format_double(0.1875), "0x1.8p-3");
  EXPECT_EQ(format_double(-0.5), "-0x1p-1");
  EXPECT_EQ(format_double(-65504), "-65504");
  EXPECT_EQ(format_double(1), "1");
  EXPECT_EQ(format_double(0), "0");
  EXPECT_EQ(format_double(-0.0), "-0");
  EXPECT_EQ(format_double(1.0013580322265625e-05), "0x1.5p-17");
  EXPECT_EQ(format_double(33554432.0), "0x1p+25");  // past 2^24: hex, not "3.3554432e+07"
  ProgramBuilder pb;
  auto& b = pb.function();
  auto x = b.input("x", tensor_type(DType::kFp16, {1, 4, 1, 32}));
  auto y =
      b.add(b.mul(x, 1e-5), b.const_tensor(tensor_type(DType::kFp16, {1, 4, 1, 1}), {1e-5, -65504, 0.015625, 3.0}));
  b.output(b.mul(y, 0.001302));
  for (Dialect d : {Dialect::kIos18, Dialect::kIos16}) {
    Program p = pb.build(d);
    const std::string text = print(p, d);
    EXPECT_EQ(test::bad_float_literals(text), std::vector<std::string>{}) << text;
    EXPECT_NE(text.find("0x1p-6"), std::string::npos) << text;  // 0.015625
    EXPECT_NE(text.find("-65504"), std::string::npos) << text;
    expect_round_trip(p, d);
  }
  // the scanner itself finds the old forms
  EXPECT_EQ(test::bad_float_literals("fp16(1.0013580322265625e-05)"),
            std::vector<std::string>{"1.0013580322265625e-05"});
  EXPECT_EQ(test::bad_float_literals("val = tensor<fp32, [2]>([nan, -inf])").size(), 2u);
  EXPECT_TRUE(
      test::bad_float_literals("fp16 c_fp16_1e5 = const()[name = string(\"c_1e5\"), val = fp16(0x1p-3)];").empty());
}

TEST(MilPrinter, NanAndInfConstantsAreRejected) {
  for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
    ProgramBuilder pb;
    auto& b = pb.function();
    auto x = b.input("x", tensor_type(DType::kFp32, {2}));
    b.output(b.add(x, b.const_tensor(tensor_type(DType::kFp32, {2}), {1.0, bad})));
    Program p = pb.build();
    try {
      print(p);
      ADD_FAILURE() << "printed a " << bad << " literal";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no nan/inf literal"), std::string::npos) << e.what();
    }
  }
}

// ---- hand-written programs in the style of the ANE repos (ane_digest §2) ----

const char* kNoSpaces = R"(program(1.3)
[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, {"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, {"coremltools-version", "9.0"}})]
{
    func main<ios18>(tensor<fp16, [1, 768, 1, 256]> x) {
        string pt = const()[name=string("pt"), val=string("valid")];
        tensor<int32, [2]> st = const()[name=string("st"), val=tensor<int32, [2]>([1,1])];
        tensor<int32, [4]> pd = const()[name=string("pd"), val=tensor<int32, [4]>([0,0,0,0])];
        tensor<int32, [2]> dl = const()[name=string("dl"), val=tensor<int32, [2]>([1,1])];
        int32 gr = const()[name=string("gr"), val=int32(1)];
        tensor<fp16, [768,768,1,1]> Wq = const()[name=string("Wq"), val=tensor<fp16, [768,768,1,1]>(BLOBFILE(path=string("@model_path/weights/wq.bin"), offset=uint64(64)))];
        tensor<fp16, [1,768,1,256]> qf = conv(dilations=dl,groups=gr,pad=pd,pad_type=pt,strides=st,weight=Wq,x=x)[name=string("cq")];
        fp16 invd = const()[name=string("invd"), val=fp16(0.001302)];
        fp16 nh = const()[name=string("nh"), val=fp16(-0.5)];
        fp16 eps = const()[name=string("eps"), val=fp16(0.00001)];
        fp16 sc = const()[name=string("sc"), val=fp16(0x1p-3)];
        fp16 big = const()[name=string("big"), val=fp16(-6.5504e+04)];
        tensor<fp16, [1,768,1,256]> a = mul(x=qf,y=invd)[name=string("a")];
        tensor<fp16, [1,768,1,256]> b2 = add(x=a,y=eps)[name=string("b2")];
        tensor<fp16, [1,768,1,256]> c = pow(x=b2,y=nh)[name=string("c")];
        tensor<fp16, [1,768,1,256]> d = mul(x=c,y=sc)[name=string("d")];
        tensor<fp16, [1,768,1,256]> e = add(x=d,y=big)[name=string("e")];
        tensor<int32, [4]> pm = const()[name=string("pm"), val=tensor<int32, [4]>([0,1,3,2])];
        tensor<int32, [1]> rax = const()[name=string("rax"), val=tensor<int32, [1]>([-1])];
        bool kd = const()[name=string("kd"), val=bool(true)];
        tensor<fp16, [1,768,256,1]> t = transpose(perm=pm,x=e)[name=string("t")];
        tensor<fp16, [1,768,256,1]> r = reduce_sum(x=t,axes=rax,keep_dims=kd)[name=string("r")];
        int32 cax = const()[name=string("cax"), val=int32(1)];
        bool cid = const()[name=string("cid"), val=bool(false)];
        tensor<fp16, [1,1536,1,256]> out = concat(axis=cax,interleave=cid,values=(qf,e))[name=string("cat")];
    } -> (out, r);
}
)";

TEST(MilParse, DigestStyleWithoutSpaces) {
  Program p = parse(kNoSpaces, "nospace.mil");
  const Function& f = p.main();
  EXPECT_EQ(p.dialect, Dialect::kIos18);
  EXPECT_EQ(f.outputs, (std::vector<std::string>{"out", "r"}));
  EXPECT_EQ(f.const_value("invd")->f[0], 0.001302);
  EXPECT_EQ(f.const_value("sc")->f[0], 0.125);
  EXPECT_EQ(f.const_value("eps")->f[0], 1e-5);
  EXPECT_EQ(f.const_value("big")->f[0], -65504.0);
  EXPECT_EQ(f.const_value("rax")->i, std::vector<int64_t>{-1});
  EXPECT_EQ(f.producer("qf")->name, "cq");
  EXPECT_EQ(f.producer("qf")->line, 11);
  EXPECT_EQ(f.const_value("Wq")->blob->offset, 64u);
  Program q = parse(print(p));  // and it survives our own printing
  EXPECT_TRUE(q == p);
}

TEST(MilParse, VerboseIos16SplitParametersAndComments) {
  const char* text = R"(program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]
{
    // weights come first after the activations
    func main<ios16>(tensor<fp16, [1, 64, 1, 1]> q,
                     tensor<fp16, [1, 64, 1, 128]> k ,
                     tensor<fp16,[1,64,1,128]>v) {
        tensor<string, []> pt = const()[name = tensor<string, []>("pt"), val = tensor<string, []>("valid")];
        tensor<int32, []> gr = const()[name = tensor<string, []>("gr"), val = tensor<int32, []>(1)];
        tensor<bool, []> tx = const()[name = tensor<string, []>("tx"), val = tensor<bool, []>(true)];
        tensor<fp16, []> m = const()[name = tensor<string, []>("m"), val = tensor<fp16, []>(-0.5)];
        tensor<fp16, [1, 64, 1, 128]> y = mul(x = k, y = m)[name = tensor<string, []>("y")];
        tensor<fp16, [1, 64, 1, 128]> z = add(x = y,
                                               y = v)[name = tensor<string, []>("z")];
    } -> (z);
}
)";
  Program p = parse(text);
  EXPECT_EQ(p.dialect, Dialect::kIos16);
  EXPECT_EQ(p.main().inputs.size(), 3u);
  EXPECT_EQ(p.main().const_value("m")->f[0], -0.5);
  EXPECT_EQ(p.main().producer("z")->line, 13);
  EXPECT_EQ(print(parse(print(p))), print(p));
}

TEST(MilParse, ConstexprBracketFormAndInlineLiterals) {
  const char* text = R"(program(1.3)
{
    func main<ios18>(tensor<fp16, [1, 512, 64, 64]> x) {
        tensor<fp16, [512, 512, 1, 1]> W0 = constexpr_affine_dequantize()[axis = int32(0), name = string("W0"), quantized_data = tensor<int8, [512, 512, 1, 1]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64))), scale = fp16(0x1p-3), zero_point = int8(0)];
        tensor<fp16, [1, 512, 64, 64]> y = conv(weight = W0, x = x, pad_type = string("valid"), groups = int32(1))[name = string("c0")];
        tensor<int8, [1, 512, 64, 64]> q = quantize(input = y, output_dtype = string("int8"), scale = fp16(0.125))[name = string("q")];
        tensor<fp16, [4]> lit = const()[name = string("lit"), val = tensor<fp16, [4]>([[1.5, -2], [3e-3, 0x1.8p1]])];
    } -> (q);
}
)";
  Program p = parse(text);
  const Function& f = p.main();
  const Operation* w = f.producer("W0");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->attr("scale")->f[0], 0.125);
  EXPECT_EQ(w->attr("quantized_data")->blob->offset, 64u);
  EXPECT_EQ(f.const_value("y_pad_type")->s, "valid");  // desugared inline literal
  EXPECT_EQ(f.const_value("lit")->f, (std::vector<double>{1.5, -2, 3e-3, 3.0}));
  std::string printed = print(p);
  EXPECT_NE(printed.find(
                "[axis = int32(0), name = string(\"W0\"), quantized_data = tensor<int8, [512, 512, 1, 1]>(BLOBFILE("),
            std::string::npos);
  EXPECT_TRUE(parse(printed) == p);
}

// Issue 39's wider forms: uint6 indices into 64-entry tables (lut6, one table per 8 output channels) and blockwise
// int8 data with no offset (GGUF Q8_0): parsed, typed, printed and parsed back to the same program; a uint6 literal
// above 63 and a 16-entry table for uint6 indices are refused.
TEST(MilParse, Ios18Lut6AndInt8BlockwiseForms) {
  const char* text = R"(program(1.3)
{
    func main<ios18>(tensor<fp16, [1, 64, 1, 8]> x) {
        tensor<fp16, [16, 64, 1, 1]> L6 = constexpr_lut_to_dense()[indices = tensor<uint6, [16, 64, 1, 1]>(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(64))), lut = tensor<fp16, [2, 1, 1, 1, 64, 1]>(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(960))), name = string("L6")];
        tensor<fp16, [16, 64, 1, 1]> W8 = constexpr_blockwise_shift_scale()[data = tensor<int8, [16, 64, 1, 1]>(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(1280))), name = string("W8"), scale = tensor<fp16, [16, 2, 1, 1]>(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(2368)))];
        tensor<fp16, [1, 16, 1, 8]> y = conv(weight = L6, x = x)[name = string("y")];
        tensor<fp16, [1, 16, 1, 8]> z = conv(weight = W8, x = x)[name = string("z")];
    } -> (y, z);
}
)";
  Program p = parse(text);
  EXPECT_EQ(p.main().producer("L6")->attr("indices")->type, tensor_type(DType::kUint6, {16, 64, 1, 1}));
  EXPECT_EQ(p.main().producer("W8")->attr("data")->type, tensor_type(DType::kInt8, {16, 64, 1, 1}));
  EXPECT_EQ(p.main().producer("W8")->attr("offset"), nullptr);
  const std::string printed = print(p);
  EXPECT_NE(printed.find("indices = tensor<uint6, [16, 64, 1, 1]>(BLOBFILE("), std::string::npos) << printed;
  EXPECT_TRUE(parse(printed) == p);
  std::string bad = text;
  bad.replace(bad.find("[2, 1, 1, 1, 64, 1]"), 19, "[2, 1, 1, 1, 16, 1]");
  try {
    parse(bad);
    ADD_FAILURE() << "a 16-entry table for uint6 indices parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uint6 indices need 64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      parse("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4, 1, 1]> x) {\n        tensor<uint6, [2]> "
            "c = const()[name = string(\"c\"), val = tensor<uint6, [2]>([1, 64])];\n    } -> (x);\n}\n"),
      Error);
}

TEST(MilParse, Ios18CompressedWeightForms) {
  const char* text = R"(program(1.3)
{
    func main<ios18>(tensor<fp16, [1, 64, 1, 8]> x) {
        tensor<fp16, [16, 64, 1, 1]> W4 = constexpr_blockwise_shift_scale()[data = tensor<uint4, [16, 64, 1, 1]>(BLOBFILE(path = string("@model_path/weights/q4.bin"), offset = uint64(64))), name = string("W4"), offset = tensor<uint4, [16, 2, 1, 1]>(BLOBFILE(path = string("@model_path/weights/q4.bin"), offset = uint64(768))), scale = tensor<fp16, [16, 2, 1, 1]>(BLOBFILE(path = string("@model_path/weights/q4.bin"), offset = uint64(640)))];
        tensor<fp16, [16, 64, 1, 1]> L4 = constexpr_lut_to_dense()[indices = tensor<uint4, [16, 64, 1, 1]>(BLOBFILE(path = string("@model_path/weights/q4.bin"), offset = uint64(832))), lut = tensor<fp16, [16, 1, 1, 1, 16, 1]>(BLOBFILE(path = string("@model_path/weights/q4.bin"), offset = uint64(1408))), name = string("L4")];
        tensor<fp16, [1, 16, 1, 8]> y = conv(weight = W4, x = x)[name = string("y")];
        tensor<fp16, [1, 16, 1, 8]> z = conv(weight = L4, x = x)[name = string("z")];
    } -> (y, z);
}
)";
  Program p = parse(text);
  const Operation* w = p.main().producer("W4");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->attr("data")->type, tensor_type(DType::kUint4, {16, 64, 1, 1}));
  EXPECT_EQ(w->attr("offset")->blob->offset, 768u);
  EXPECT_EQ(p.main().producer("L4")->attr("lut")->blob->offset, 1408u);
  const std::string printed = print(p);
  EXPECT_NE(printed.find("constexpr_lut_to_dense()[indices = tensor<uint4, [16, 64, 1, 1]>(BLOBFILE("),
            std::string::npos)
      << printed;
  EXPECT_TRUE(parse(printed) == p);
  // The block must divide the weight: a [16, 3] scale for [16, 64] data is rejected naming both shapes.
  std::string bad = text;
  for (size_t at; (at = bad.find("[16, 2, 1, 1]")) != std::string::npos;) bad.replace(at, 13, "[16, 3, 1, 1]");
  try {
    parse(bad);
    ADD_FAILURE() << "a non-dividing block was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[16, 3, 1, 1] does not divide the output [16, 64, 1, 1]"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace anelab::mil
