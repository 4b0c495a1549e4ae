// Checker errors (SSA, names, declared types with line numbers), parser errors with positions, and a
// malformed-input corpus (every truncation, random byte flips) that must end in anelab::Error.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "framework/mil/check.h"
#include "framework/mil/parser.h"
#include "framework/mil/printer.h"
#include "tests/mil/mil_test_programs.h"

namespace anelab::mil {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string wrap(const std::string& body, const std::string& outputs = "y") {
  return "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 8, 1, 4]> x) {\n" + body + "    } -> (" + outputs +
         ");\n}\n";
}

TEST(MilCheck, UndefinedValueNamesLine) {
  std::string m = error_of([] {
    parse(wrap("        tensor<fp16, [1, 8, 1, 4]> y = sigmoid(x = nope)[name = string(\"s\")];\n"), "k.mil");
  });
  EXPECT_NE(
      m.find(
          "[mil] k.mil:4: function 'main': sigmoid 's': argument x = nope: value 'nope' is not defined before this op"),
      std::string::npos)
      << m;
}

TEST(MilCheck, UseBeforeDefinition) {
  std::string m = error_of([] {
    parse(
        wrap("        tensor<fp16, [1, 8, 1, 4]> y = sigmoid(x = z)[name = string(\"s\")];\n"
             "        tensor<fp16, [1, 8, 1, 4]> z = tanh(x = x)[name = string(\"t\")];\n"));
  });
  EXPECT_NE(m.find("<mil>:4:"), std::string::npos) << m;
  EXPECT_NE(m.find("'z' is not defined before this op"), std::string::npos) << m;
}

TEST(MilCheck, DuplicateValueAndOpNames) {
  std::string m = error_of([] {
    parse(
        wrap("        tensor<fp16, [1, 8, 1, 4]> y = sigmoid(x = x)[name = string(\"s\")];\n"
             "        tensor<fp16, [1, 8, 1, 4]> y = tanh(x = x)[name = string(\"t\")];\n"));
  });
  EXPECT_NE(m.find(":5: function 'main': tanh 't': value 'y' is already defined"), std::string::npos) << m;
  m = error_of([] {
    parse(
        wrap("        tensor<fp16, [1, 8, 1, 4]> y = sigmoid(x = x)[name = string(\"s\")];\n"
             "        tensor<fp16, [1, 8, 1, 4]> y2 = tanh(x = x)[name = string(\"s\")];\n"));
  });
  EXPECT_NE(m.find(":5: function 'main': tanh 's': duplicate op name 's'"), std::string::npos) << m;
  m = error_of([] { parse("program(1.3){func main<ios18>(fp16 x, fp16 x){fp16 y = identity(x = x);} -> (y);}"); });
  EXPECT_NE(m.find("duplicate input name 'x'"), std::string::npos) << m;
}

TEST(MilCheck, WrongDeclaredTypeWithLine) {
  std::string m = error_of([] {
    parse(wrap("        tensor<int32, [2]> pm = const()[name = string(\"pm\"), val = tensor<int32, [2]>([1, 1])];\n"
               "        tensor<fp16, [1, 8, 4, 1]> y = sigmoid(x = x)[name = string(\"s\")];\n"),
          "w.mil");
  });
  EXPECT_NE(m.find("[mil] w.mil:5: function 'main': sigmoid 's': declared type tensor<fp16, [1, 8, 4, 1]> of 'y' but "
                   "the op produces "
                   "tensor<fp16, [1, 8, 1, 4]>"),
            std::string::npos)
      << m;
}

TEST(MilCheck, OutputsAndFunctionsAndDialectMix) {
  EXPECT_NE(error_of([] {
              parse(wrap("        tensor<fp16, [1, 8, 1, 4]> y = sigmoid(x = x)[name = string(\"s\")];\n", "q"));
            }).find("output 'q' is not defined"),
            std::string::npos);
  std::string two =
      "program(1.3){func f<ios18>(fp16 x){fp16 y = identity(x = x);} -> (y); func f<ios18>(fp16 x){fp16 y = identity(x "
      "= x);} -> (y);}";
  EXPECT_NE(error_of([&] { parse(two); }).find("duplicate function name 'f'"), std::string::npos);
  std::string mix = "program(1.0)\n{\n func main<ios18>(fp16 x){fp16 y = identity(x = x);} -> (y);}";
  EXPECT_NE(error_of([&] { parse(mix, "m.mil"); }).find("[mil] m.mil:3:"), std::string::npos);
  EXPECT_NE(error_of([&] { parse(mix); }).find("mixing gives InvalidMILProgram"), std::string::npos);
  // The checker on a hand-made Function (no lines): names function and op.
  Function f;
  f.inputs.emplace_back("x", scalar_type(DType::kFp16));
  f.outputs.push_back("x");
  f.ops.push_back(Operation{"softmax", {{"x", Arg::value("x")}}, {}, "sm", "y", scalar_type(DType::kFp16), 0});
  EXPECT_NE(error_of([&] {
              check_function(f);
            }).find("[mil] function 'main': softmax 'sm': missing required argument 'axis'"),
            std::string::npos);
}

TEST(MilParseErrors, PositionsAndExpectations) {
  auto m = error_of([] { parse("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 8, 1, 4] x) {", "p.mil"); });
  EXPECT_EQ(m, "[mil] p.mil:3:48: expected '>' closing the tensor type, got 'x'");
  m = error_of([] {
    parse("program(1.3) { func main<ios18>(fp16 x) { fp16 y = identity(x = x)[name = string(\"a)]; } -> (y); }");
  });
  EXPECT_NE(m.find("expected a closing '\"', got end of input"), std::string::npos) << m;
  m = error_of([] {
    parse(
        wrap("        tensor<int8, [2]> c = const()[name = string(\"c\"), val = tensor<int8, [2]>([1, 300])];\n", "c"));
  });
  EXPECT_NE(m.find("expected a value in [-128, 127] for int8, got 300"), std::string::npos) << m;
  m = error_of([] {
    parse(
        wrap("        tensor<int32, [3]> c = const()[name = string(\"c\"), val = tensor<int32, [3]>([1, 2])];\n", "c"));
  });
  EXPECT_NE(m.find("expected 3 element(s) for tensor<int32, [3]>, got 2"), std::string::npos) << m;
  m = error_of([] { parse(wrap("        fp16 c = const()[name = string(\"c\"), val = fp16(1.5.5)];\n", "c")); });
  EXPECT_NE(m.find("expected a float literal, got '1.5.5'"), std::string::npos) << m;
  m = error_of([] { parse(""); });
  EXPECT_EQ(m, "[mil] <mil>:1:1: expected 'program', got end of input");
}

// Every prefix of a valid program must parse or fail with anelab::Error (never crash or hang).
void fuzz_truncations(const std::string& text) {
  int ok = 0;
  for (size_t n = 0; n < text.size(); ++n) {
    try {
      parse(std::string_view(text).substr(0, n));
      ++ok;
    } catch (const Error&) {
    }
  }
  EXPECT_LE(ok, 2) << "truncated programs should not parse (only a missing trailing newline may)";
}

TEST(MilFuzz, EveryTruncationIsAnError) {
  fuzz_truncations(print(testprogs::rmsnorm_attention_kernel(Dialect::kIos18, 16, 2, 4)));
  fuzz_truncations(print(testprogs::every_op_program(Dialect::kIos16)).substr(0, 6000));
  fuzz_truncations(print(testprogs::multi_function_program(Dialect::kIos18)));
}

TEST(MilFuzz, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(1234);
  const std::string base18 = print(testprogs::rmsnorm_attention_kernel(Dialect::kIos18, 16, 2, 4));
  const std::string base16 = print(testprogs::conv_kernel(Dialect::kIos16));
  const char* alphabet = "()[]{}<>,;=\"-+.0123456789xpe_ \n/tensorfp16int32BLOBFILE";
  int errors = 0, parsed = 0;
  for (int it = 0; it < 3000; ++it) {
    std::string t = it % 2 ? base18 : base16;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          t[at] = alphabet[rng() % std::strlen(alphabet)];
          break;
        default:
          t.erase(at, 1 + rng() % 8);
          break;
      }
    }
    try {
      Program p = parse(t);
      ++parsed;
      EXPECT_NO_THROW(parse(print(p)));  // whatever parses must print and re-parse
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 2000);
  EXPECT_GT(parsed, 0) << "no mutation parsed: the print / re-parse round trip above was never exercised";
}

TEST(MilFuzz, PathologicalInputs) {
  for (const std::string& t : std::vector<std::string>{
           std::string(100000, '['), std::string(100000, '('),
           "program(1.3){func main<ios18>(tensor<fp16, [" + std::string(5000, '9') + "]> x",
           "program(1.3){func main<ios18>(tensor<fp16, [2147483647, 2147483647, 2147483647]> x){} -> (x);}",
           "program(1.3){func main<ios18>(fp16 x){tensor<fp16, [1]> c = const()[name = string(\"c\"), val = "
           "tensor<fp16, [1]>(" +
               std::string(1000, '[') + "1" + std::string(1000, ']') + ")];} -> (c);}",
           std::string("program\0(1.3)", 13),
           "program(1.3){func main<ios18>(tensor<fp16, [8]> x){tensor<fp16, [8]> y = reshape(shape = s, x = x);} -> "
           "(y);}"}) {
    EXPECT_THROW(parse(t), Error) << t.substr(0, 80);
  }
}

}  // namespace
}  // namespace anelab::mil
