// The native backend passes int8 kernels through unchanged (FakeShim): a W8 conv (int8 weights through
// constexpr_affine_dequantize) and a W8A8 conv (quantize/dequantize around its input) reach the private
// API as the printer's MIL text byte for byte, their int8 blob files equal the bytes the emulator
// compiles, and the results equal the emulator's bit for bit. W8A8 in an ios16 program is refused.
#include <filesystem>

#include "framework/core/file.h"
#include "framework/kernels/w8.h"
#include "tests/ane/ane_test_util.h"

namespace anelab::test {
namespace {

namespace fs = std::filesystem;

// y = conv(x, W8) [cin -> cout], x through quantize/dequantize at scale `act` when act > 0.
Prog int8_conv_prog(int64_t cin, int64_t cout, int64_t s, float act, mil::Dialect d) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  kern::BlobSet bs;
  mil::Value x = b.input("x", kern::act_type(cin, s));
  const std::vector<float> w = randn(static_cast<size_t>(cout * cin), 3, 1.0f / std::sqrt(float(cin)));
  mil::Value xi = act > 0 ? kern::quant_dequant(b, x, act) : x;
  b.output(kern::linear(b, xi, bs.int8_matrix(b, "w", kern::quantize_w8(w, cout, cin))));
  return {pb.build(d), bs.weights()};
}

TEST(NativeInt8, W8AndW8A8PassThroughUnchanged) {
  for (const std::string dev : {"m4", "m1"}) {
    auto emu = make_emulator(dev);
    for (float act : {0.0f, 1.0f / 32}) {
      if (dev == "m1" && act > 0) continue;  // ios16: refused (below)
      const std::string what = dev + (act > 0 ? " w8a8" : " w8");
      Native n = make_native(dev);
      const mil::Dialect d = rt::device_profile(dev).dialect;
      Prog p = int8_conv_prog(128, 64, 64, act, d);
      auto k = n.backend->compile(p.program, p.weights);
      ASSERT_TRUE(k.is_ok()) << what << ": " << k.status().message();
      const ane::ShimCall& c = *n.fake->calls_named("create_model").at(0);
      EXPECT_EQ(c.mil_text, mil::print(p.program, d)) << what;  // byte for byte
      EXPECT_NE(c.mil_text.find("constexpr_affine_dequantize()[axis = "), std::string::npos) << what;
      EXPECT_EQ(c.mil_text.find(" quantize(") != std::string::npos, act > 0) << what;
      const std::string hex = n.backend->shim().hex_string_identifier(ane::ModelHandle{c.model}).value();
      const fs::path dir = fs::path(n.fake->temporary_directory()) / hex;
      const std::vector<uint8_t> blob = read_file_bytes((dir / "weights" / "w.bin").string());
      EXPECT_EQ(blob, *p.weights.at("@model_path/weights/w.bin")) << what;
      EXPECT_EQ(blob.size(), 128u + 128 * 64) << what;  // one byte per weight
      EXPECT_EQ(run_bytes(*n.backend, p, 0, 21), run_bytes(*emu, p, 0, 21)) << what;
    }
  }
}

// quantize / dequantize are iOS17 ops: an ios16 program (M1-M3) with them is refused before the shim.
TEST(NativeInt8, W8A8IsRefusedInIos16Programs) {
  Native n = make_native("m1");
  Prog p = int8_conv_prog(128, 64, 64, 1.0f / 32, mil::Dialect::kIos16);
  auto k = n.backend->compile(p.program, p.weights);
  ASSERT_FALSE(k.is_ok());
  EXPECT_NE(k.status().message().find("quantize 'quantize_0' is an iOS17 op"), std::string::npos)
      << k.status().message();
  EXPECT_TRUE(n.fake->calls_named("create_model").empty());
  EXPECT_FALSE(make_emulator("m1")->compile(p.program, p.weights).is_ok());
}

}  // namespace
}  // namespace anelab::test
