// The MIL prefill with palettized weights (--ane-weights lut4 | lut6, issue 39) on the emulator: `anelab convert
// --palettize` (models::palettize_model) stores k-means palettes in the anelab file and makes each layer matrix fp16
// holding exactly its palette's values; the prefill bakes constexpr_lut_to_dense from the stored palette
// (kern::BlobSet::lut_matrix, uint4 / uint6 indices), so
//   - a whole-layer lut kernel is bit-identical to the fp16 kernel of the same model (the CPU engine reads these
//     numbers too: the palette changes how the ANE stores the weights, nothing else);
//   - the prefill's logits equal the CPU engine's on the same palettized file within the fp16 tolerance of the other
//     prefill tests (2e-2);
//   - the baked matrix bytes are bits / 8 per weight plus the tables;
//   - a model without (or with other) palettes is refused in one line naming the layer, the matrix and the fix, and
//     ios16 profiles refuse lut4 / lut6.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "framework/mil/printer.h"
#include "infer/engine.h"
#include "infer/prefill_mil.h"
#include "models/formats/anelab_file.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "tests/common/errors.h"
#include "tests/infer/prefill_test_helpers.h"

namespace anelab::infer {
namespace {

using prefill_test::kLayerMatrices;
using test::rel_err;

models::Model lut_base() {
  models::ModelConfig c = models::preset("stories15m");
  c.dim = 64, c.hidden_dim = 96, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 512, c.max_seq_len = 128;
  return models::random_model(c, 17);
}

Engine make_lut(models::Model m, const std::string& backend, const std::string& weights) {
  EngineOptions o;
  o.backend = backend;
  o.device = "m4";
  o.dtype = WType::kF32;
  o.ane_weights = weights;
  o.quiet = true;
  return Engine(std::move(m), o);
}

rt::WeightPath lut_path(int bits) { return bits == 4 ? rt::WeightPath::kLut4 : rt::WeightPath::kLut6; }

TEST(PrefillLut, LayerKernelEqualsTheFp16KernelOfTheSameModel) {
  for (const int bits : {4, 6}) {
    Engine e = make_lut(models::palettize_model(lut_base(), bits, bits == 4 ? 16 : 0), "cpu", "fp16");
    const int64_t S = 64;
    const KernelWeights kw{lut_path(bits), nullptr};
    const LayerKernelSource lut = build_layer_kernel(e.desc(), e.layer(1), S, mil::Dialect::kIos18, 1, kw);
    const std::string text = mil::print(lut.program, mil::Dialect::kIos18);
    EXPECT_NE(text.find(bits == 4 ? "indices = tensor<uint4, [" : "indices = tensor<uint6, ["), std::string::npos);
    const std::vector<float> x = prefill_test::sin_input(static_cast<size_t>(e.desc().dim * S), 0.29);
    const auto yl = prefill_test::run_layer_kernel(lut, x);
    const auto y16 =
        prefill_test::run_layer_kernel(build_layer_kernel(e.desc(), e.layer(1), S, mil::Dialect::kIos18, 1), x);
    EXPECT_EQ(yl, y16) << "lut" << bits;
  }
}

TEST(PrefillLut, BakedMatrixBytes) {
  Engine e = make_lut(models::palettize_model(lut_base(), 4, 16), "cpu", "fp16");
  const LayerWeights& L = e.layer(0);
  const MatrixBytes b =
      matrix_bytes(build_layer_kernel(e.desc(), L, 64, mil::Dialect::kIos18, 0, {rt::WeightPath::kLut4, nullptr}), L);
  int64_t expect = 0;  // file header, indices chunk (packed nibbles), table chunk (16 fp16 per 16 rows)
  for (const char* n : kLayerMatrices) {
    const int64_t R = L.matrix(n).rows, C = L.matrix(n).cols;
    expect += 64 + 64 + (R * C / 2 + 63) / 64 * 64 + 64 + R / 16 * 16 * 2;
  }
  EXPECT_EQ(b.bytes, expect);
  std::printf("[prefill-lut] lut4, 16 rows per table: %.4f bytes per weight baked (payload %.4f)\n",
              static_cast<double>(b.bytes) / static_cast<double>(b.weights), 0.5 + 2.0 / 64);
}

TEST(PrefillLut, LogitsMatchTheCpuEngineOnTheSamePalettizedFile) {
  for (const int bits : {4, 6}) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("anelab_prefill_lut" + std::to_string(bits) + ".anelab")).string();
    models::save_model(models::palettize_model(lut_base(), bits, 16), path);
    const std::string w = bits == 4 ? "lut4" : "lut6";
    Engine cpu = make_lut(models::load_any_model(path), "cpu", w),
           emu = make_lut(models::load_any_model(path), "emulator", w);
    const int64_t V = cpu.config().vocab_size, n = 40;
    std::vector<int32_t> toks(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) toks[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 3) % V);
    std::vector<float> a, b;
    cpu.prefill(toks, 0, &a);
    emu.prefill(toks, 0, &b);
    ASSERT_EQ(emu.last_prefill().weights, w);
    ASSERT_EQ(a.size(), b.size());
    for (int64_t t = 0; t < n; ++t)  // fp16 activations through 2 layers: the 2e-2 of the other prefill tests
      EXPECT_LT(rel_err(b.data() + t * V, a.data() + t * V, static_cast<size_t>(V)), 2e-2) << w << " pos " << t;
    std::filesystem::remove(path);
  }
}

TEST(PrefillLut, AModelWithoutThePalettesIsRefused) {
  Engine plain = make_lut(lut_base(), "cpu", "fp16"),
         lut4 = make_lut(models::palettize_model(lut_base(), 4, 0), "cpu", "fp16");
  const std::pair<Engine*, rt::WeightPath> cases[] = {{&plain, rt::WeightPath::kLut4}, {&lut4, rt::WeightPath::kLut6}};
  for (const auto& [e, path] : cases) {
    try {
      build_layer_kernel(e->desc(), e->layer(0), 64, mil::Dialect::kIos18, 0, {path, nullptr});
      ADD_FAILURE() << "built without a palette";
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("layer 0's wq has"), std::string::npos) << m;
      EXPECT_NE(m.find("anelab convert IN OUT --palettize"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  for (const char* w : {"lut4", "lut6"}) {
    EXPECT_THROW(rt::parse_weight_path(w, rt::device_profile("m1")), Error) << w;
    EXPECT_EQ(rt::parse_weight_path(w, rt::device_profile("m5")), lut_path(w[3] == '4' ? 4 : 6));
  }
}

// --ane-weights auto per matrix class (rt::DeviceProfile::auto_ffn_4bit): on m4 / m5 the FFN takes 4 bits where the
// file has them (lut4 palettes, else Q4_0 blocks) and the attention the profile's auto_weights; m1-m3 stay int8.
TEST(PrefillLut, AutoPicksPerMatrixClass) {
  const std::vector<int32_t> toks = {1, 40, 7, 300, 12};
  const std::pair<models::Model, std::string> cases[] = {
      {models::palettize_model(lut_base(), 4, 16), "w8a8 (ffn lut4)"},
      {models::quantize_model(lut_base(), models::QuantMix::kQ4_0), "w8a8 (ffn q4)"},
      {models::palettize_model(lut_base(), 6, 0), "w8a8"},  // 6-bit palettes are not auto's 4-bit FFN
      {lut_base(), "w8a8"}};
  for (const auto& [m, want] : cases) {
    EngineOptions o;
    o.backend = "emulator", o.device = "m4", o.dtype = WType::kF32, o.keep_quantized = true, o.quiet = true;
    o.ane_weights = "auto";
    Engine e(m, o);
    e.prefill(toks, 0);
    EXPECT_EQ(e.last_prefill().weights, want);
    o.device = "m1";
    Engine e1(m, o);
    e1.prefill(toks, 0);
    EXPECT_EQ(e1.last_prefill().weights, "int8");
  }
  Engine e = make_lut(models::palettize_model(lut_base(), 4, 16), "cpu", "fp16");
  const KernelWeights kw{rt::WeightPath::kW8, nullptr, rt::WeightPath::kLut4};
  const std::string text =
      mil::print(build_layer_kernel(e.desc(), e.layer(0), 64, mil::Dialect::kIos18, 0, kw).program);
  for (const char* w : {"wq", "wk", "wv", "wo"})
    EXPECT_NE(text.find(std::string("> ") + w + " = constexpr_affine_dequantize"), std::string::npos) << w;
  for (const char* w : {"w1", "w2", "w3"})
    EXPECT_NE(text.find(std::string("> ") + w + " = constexpr_lut_to_dense"), std::string::npos) << w;
}

}  // namespace
}  // namespace anelab::infer
