// Contract tests of the portable native backend against the private-API facts of
// ../shared/reference/ane_digest.md, through FakeShim: the exact call sequence, the bytes handed over
// (MIL text, weights dictionary, blob headers, temp dir), surface sizes, request indices, and results
// equal to the emulator backend's bit for bit.
#include <filesystem>

#include "framework/core/file.h"
#include "framework/core/sha256.h"
#include "tests/ane/ane_test_util.h"

namespace anelab::test {
namespace {

namespace fs = std::filesystem;
using ane::ShimCall;

uint32_t le32(const std::vector<uint8_t>& b, size_t off) {
  return uint32_t(b[off]) | uint32_t(b[off + 1]) << 8 | uint32_t(b[off + 2]) << 16 | uint32_t(b[off + 3]) << 24;
}

TEST(NativeContract, CallSequenceOfCompileEvaluateAndTeardown) {
  Native n = make_native();
  Prog p = conv_prog(64, 128, 64);
  {
    auto k = n.backend->compile(p.program, p.weights);
    ASSERT_TRUE(k.is_ok()) << k.status().message();
    EXPECT_EQ(n.fake->call_names(),
              (std::vector<std::string>{"create_model", "hex_string_identifier", "compiled_model_exists", "compile",
                                        "load", "procedure_symbols"}));
    n.fake->clear_calls();
    auto ins = (*k)->make_inputs(0, n.backend->profile());
    auto outs = (*k)->make_outputs(0, n.backend->profile());
    fill_inputs(ins, 3);
    ASSERT_TRUE(n.backend->evaluate(**k, 0, ptrs(ins), ptrs(outs)).is_ok());
    // surfaces + request once, then stage in (write lock), evaluate, stage out (read-only lock)
    EXPECT_EQ(n.fake->call_names(),
              (std::vector<std::string>{"create_surface", "create_surface", "create_request", "lock_surface",
                                        "unlock_surface", "evaluate", "lock_surface", "unlock_surface"}));
    const auto& c = n.fake->calls();
    EXPECT_FALSE(c[3].read_only);
    EXPECT_TRUE(c[6].read_only);
    EXPECT_EQ(c[3].surface, c[2].inputs.at(0));
    EXPECT_EQ(c[6].surface, c[2].outputs.at(0));
    EXPECT_EQ(c[5].request, c[2].request);
    n.fake->clear_calls();
    ASSERT_TRUE(n.backend->evaluate(**k, 0, ptrs(ins), ptrs(outs)).is_ok());  // request reused
    EXPECT_EQ(n.fake->calls_named("create_request").size(), 0u);
    EXPECT_EQ(n.fake->calls_named("evaluate").size(), 1u);
    n.fake->clear_calls();
  }
  // Kernel gone: its request and surfaces are released; the cache still holds the loaded model.
  EXPECT_EQ(n.fake->call_names(), (std::vector<std::string>{"release_request", "release_surface", "release_surface"}));
  EXPECT_EQ(n.fake->loaded_models(), 1u);
  n.fake->clear_calls();
  n.backend->clear_cache();
  EXPECT_EQ(n.fake->call_names(), (std::vector<std::string>{"unload", "release_model"}));
  EXPECT_EQ(n.fake->live_models(), 0u);
  EXPECT_EQ(n.fake->live_surfaces(), 0u);
  EXPECT_EQ(n.fake->live_requests(), 0u);
}

TEST(NativeContract, QosIs21OnEveryModelCall) {
  Native n = make_native();
  Prog p = conv_prog(64, 64, 64);
  run_bytes(*n.backend, p, 0, 1);
  n.backend->clear_cache();
  int seen = 0;
  for (const ShimCall& c : n.fake->calls())
    if (c.call == "compile" || c.call == "load" || c.call == "evaluate" || c.call == "unload") {
      EXPECT_EQ(c.qos, 21u) << c.call;
      ++seen;
    }
  EXPECT_EQ(seen, 4);
}

TEST(NativeContract, MilTextIsThePrinterOutputInTheProfileDialect) {
  for (const char* dev : {"m4", "m5", "m1", "m3"}) {
    Native n = make_native(dev);
    Prog p = conv_prog(64, 64, 64);
    ASSERT_TRUE(n.backend->compile(p.program, p.weights).is_ok()) << dev;
    const auto made = n.fake->calls_named("create_model");
    ASSERT_EQ(made.size(), 1u);
    const mil::Dialect d = rt::device_profile(dev).dialect;
    EXPECT_EQ(made[0]->mil_text, mil::print(p.program, d)) << dev;  // byte for byte
    const bool old = d == mil::Dialect::kIos16;
    EXPECT_EQ(made[0]->mil_text.rfind(old ? "program(1.0)\n" : "program(1.3)\n", 0), 0u) << dev;
    EXPECT_TRUE(contains(made[0]->mil_text, old ? "main<ios16>(" : "main<ios18>(")) << dev;
    EXPECT_EQ(contains(made[0]->mil_text, "tensor<string, []>(\"valid\")"), old) << dev;  // verbose scalars
  }
}

TEST(NativeContract, WeightsDictionaryAndBlobHeaders) {
  Native n = make_native();
  Prog p = attention_prog(64, 4, 64);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  const ShimCall& c = *n.fake->calls_named("create_model").at(0);
  std::vector<std::string> keys;
  for (const auto& [key, blob] : p.weights) keys.push_back(key);
  EXPECT_EQ(c.weight_keys, keys);
  EXPECT_EQ(c.weight_keys, (std::vector<std::string>{"@model_path/weights/mask.bin", "@model_path/weights/wk.bin",
                                                     "@model_path/weights/wo.bin", "@model_path/weights/wq.bin",
                                                     "@model_path/weights/wv.bin"}));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(c.weight_offsets[i], 0u) << keys[i];  // dictionary offset @0 (digest §1.3)
    EXPECT_EQ(c.weight_sizes[i], p.weights.at(keys[i])->size()) << keys[i];
  }
  // The files in the temp dir: digest §3.1 headers, checked field by field from raw bytes.
  const std::string hex = n.backend->shim().hex_string_identifier(ane::ModelHandle{c.model}).value();
  const fs::path dir = fs::path(n.fake->temporary_directory()) / hex;
  for (const auto& [stem, elems] : std::vector<std::pair<std::string, size_t>>{{"wq", 64 * 64}, {"mask", 64 * 64}}) {
    auto b = read_file_bytes((dir / "weights" / (stem + ".bin")).string());
    ASSERT_EQ(b.size(), 128 + elems * 2) << stem;
    EXPECT_EQ(le32(b, 0), 1u);  // MILBlob storage_header: count, version 2
    EXPECT_EQ(le32(b, 4), 2u);
    EXPECT_EQ(le32(b, 64), 0xDEADBEEFu) << stem;
    EXPECT_EQ(le32(b, 68), 1u);                 // mil_dtype Float16
    EXPECT_EQ(le32(b, 72), elems * 2) << stem;  // data_size
    EXPECT_EQ(le32(b, 80), 128u) << stem;       // absolute data_offset
  }
}

TEST(NativeContract, TempDirLayoutExistsFromCompileUntilUnload) {
  Native n = make_native();
  Prog p = conv_prog(64, 64, 64, 1, "weights/layer_00/wq.bin");  // subdirectory key (digest §1.3)
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  const ShimCall& comp = *n.fake->calls_named("compile").at(0);
  EXPECT_EQ(comp.model_dir_files, (std::vector<std::string>{"model.mil", "weights/layer_00/wq.bin"}));
  const std::string text = n.fake->calls_named("create_model").at(0)->mil_text;
  const std::string hex = n.backend->shim().hex_string_identifier(ane::ModelHandle{comp.model}).value();
  // hexStringIdentifier shape: SHA256(mil)_SHA256(weights)_SHA256(options) (digest §1.4)
  EXPECT_EQ(hex.substr(0, 65), sha256_hex(text) + "_");
  EXPECT_EQ(hex.size(), 64u * 3 + 2);
  const fs::path dir = fs::path(n.fake->temporary_directory()) / hex;
  EXPECT_EQ(read_file_text((dir / "model.mil").string()), text);
  EXPECT_EQ(read_file_bytes((dir / "weights/layer_00/wq.bin").string()), *p.weights.begin()->second);
  k.value().reset();
  EXPECT_TRUE(fs::exists(dir));  // still cached and loaded
  n.backend->clear_cache();
  EXPECT_FALSE(fs::exists(dir));  // removed at unload
}

TEST(NativeContract, SurfaceSizesFollowTheDeviceRules) {
  Native n = make_native();
  // single in / out: each its own size, >= 49152, 16 KiB multiples
  run_bytes(*n.backend, conv_prog(768, 2048, 256), 0, 1);
  auto made = n.fake->calls_named("create_surface");
  ASSERT_EQ(made.size(), 2u);
  EXPECT_EQ(made[0]->bytes, 768u * 256 * 2);   // 393216 = 24 pages
  EXPECT_EQ(made[1]->bytes, 2048u * 256 * 2);  // 1 MiB
  n.fake->clear_calls();
  run_bytes(*n.backend, conv_prog(64, 64, 64, 2), 0, 1);  // 4096-byte tensors -> the 49152 minimum
  made = n.fake->calls_named("create_surface");
  ASSERT_EQ(made.size(), 2u);
  EXPECT_EQ(made[0]->bytes, 49152u);
  EXPECT_EQ(made[1]->bytes, 49152u);
  n.fake->clear_calls();
  // several I/O tensors: every surface as large as the largest (digest §4.3)
  run_bytes(*n.backend, two_input_prog(64, 512, 256), 0, 1);
  made = n.fake->calls_named("create_surface");
  ASSERT_EQ(made.size(), 3u);
  for (auto* c : made) EXPECT_EQ(c->bytes, 576u * 256 * 2);
}

TEST(NativeContract, RequestIndicesOfATwoProcedureProgram) {
  Native n = make_native();
  Prog p = two_function_prog(64, 64);
  auto emu = make_emulator();
  for (int fn : {1, 0}) {
    n.fake->clear_calls();
    EXPECT_EQ(run_bytes(*n.backend, p, fn, 7), run_bytes(*emu, p, fn, 7)) << "procedure " << fn;
    auto req = n.fake->calls_named("create_request");
    ASSERT_EQ(req.size(), 1u);
    EXPECT_EQ(req[0]->procedure, fn);  // digest §1.9: inputIndices=@[@(p)], outputIndices=@[@(p)], procedureIndex=@(p)
    EXPECT_EQ(req[0]->input_indices, std::vector<int64_t>{fn});
    EXPECT_EQ(req[0]->output_indices, std::vector<int64_t>{fn});
  }
  EXPECT_EQ(n.fake->compiles(), 1);  // the second compile of the same program was a cache hit
  // the 2-function MIL text: both functions in one program, names suffixed per function
  const std::string text = mil::print(p.program, mil::Dialect::kIos18);
  EXPECT_TRUE(contains(text, "func f0<ios18>(")) << text;
  EXPECT_TRUE(contains(text, "func f1<ios18>(")) << text;
}

TEST(NativeContract, MultiInputRequestIndicesAreZeroToN) {
  Native n = make_native();
  run_bytes(*n.backend, two_input_prog(64, 128, 64), 0, 1);
  auto req = n.fake->calls_named("create_request");
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0]->input_indices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(req[0]->output_indices, (std::vector<int64_t>{0}));
  EXPECT_EQ(req[0]->procedure, 0);
}

TEST(NativeContract, ResultsEqualTheEmulatorBitForBit) {
  auto emu = make_emulator();
  Native n = make_native();
  const std::vector<std::pair<std::string, Prog>> cases = {
      {"conv 768->2048 S=256", conv_prog(768, 2048, 256)},
      {"attention", attention_prog(64, 4, 64)},
      {"two inputs", two_input_prog(64, 512, 64)},
  };
  for (const auto& [name, p] : cases) {
    auto got = run_bytes(*n.backend, p, 0, 21);
    auto want = run_bytes(*emu, p, 0, 21);
    ASSERT_FALSE(want.empty()) << name;
    EXPECT_EQ(got, want) << name;
    bool nonzero = false;
    for (uint8_t b : want.at(0)) nonzero = nonzero || b;
    EXPECT_TRUE(nonzero) << name;
  }
}

TEST(NativeContract, M1PrintsIos16AndMatchesTheEmulatorOnIos16) {
  Native n = make_native("m1");
  auto emu = make_emulator("m1");
  Prog p = attention_prog(64, 4, 64);
  Prog p16 = p;
  p16.program.dialect = mil::Dialect::kIos16;  // the emulator takes the program as printed for m1
  EXPECT_EQ(run_bytes(*n.backend, p, 0, 4), run_bytes(*emu, p16, 0, 4));
  EXPECT_EQ(n.fake->calls_named("create_model").at(0)->mil_text.rfind("program(1.0)", 0), 0u);
}

TEST(NativeContract, CastIsRejectedOnM1AndM2WithoutCallingTheShim) {
  for (const char* dev : {"m1", "m2"}) {
    Native n = make_native(dev);
    Prog p = conv_prog(64, 64, 64, 1, "weights/w.bin", mil::DType::kFp32);
    auto k = n.backend->compile(p.program, p.weights);
    ASSERT_FALSE(k.is_ok()) << dev;
    EXPECT_EQ(k.status().code(), Code::kInvalidArgument);
    const std::string& m = k.status().message();
    EXPECT_TRUE(contains(m, dev)) << m;
    EXPECT_TRUE(contains(m, "fp16 I/O")) << m;
    EXPECT_TRUE(n.fake->calls().empty()) << dev;
    EXPECT_EQ(n.backend->compiles_used(), 0) << dev;
  }
  Native m3 = make_native("m3");  // M3 has cast: the same program compiles, ios16 text with cast
  Prog p = conv_prog(64, 64, 64, 1, "weights/w.bin", mil::DType::kFp32);
  ASSERT_TRUE(m3.backend->compile(p.program, p.weights).is_ok());
  EXPECT_TRUE(contains(m3.fake->calls_named("create_model").at(0)->mil_text, "cast("));
}

}  // namespace
}  // namespace anelab::test
