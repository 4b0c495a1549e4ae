// The MIL prefill with --ane-weights int8 on a Q8_0 model (issue 39) on the emulator (infer/prefill_mil.h,
// kern::BlobSet::q8_matrix): on an ios18 program a Q8_0 matrix is baked with the file's own bits as
// constexpr_blockwise_shift_scale with int8 data (fp16 d per block of 32 input channels, no offset), so
//   - a whole-layer kernel is bit-identical to the fp16 kernel of the dequantized Q8_0 values (x = d * q, rounded to
//     fp16 as every fp16 bake is), also when the engine holds the matrices as row tiles (the bits are copied out);
//   - the baked matrix bytes are 1 + 2/32 = 1.0625 per weight (plus the blob headers);
//   - the prefill's logits equal the CPU engine's on the same Q8_0 weights within the fp16 tolerance of the other
//     prefill tests, also through a GGUF file;
//   - other sources (fp32, Q4_0) and every source on ios16 keep int8's per-channel form (constexpr_affine_dequantize).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "framework/mil/printer.h"
#include "infer/engine.h"
#include "infer/prefill_mil.h"
#include "models/io/gguf_model.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "tests/common/errors.h"
#include "tests/infer/prefill_test_helpers.h"

namespace anelab::infer {
namespace {

using prefill_test::kLayerMatrices;
using test::rel_err;

// A small Llama whose every matrix has whole Q8_0 blocks (dim, hidden multiples of 32), random weights, its matrices
// quantized to Q8_0 (llama-quantize's q8_0 mix) or left fp32.
models::Model q8_model(bool quantized = true) {
  models::ModelConfig c = models::preset("stories15m");
  c.dim = 64, c.hidden_dim = 96, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 512, c.max_seq_len = 128;
  const models::Model m = models::random_model(c, 13);
  return quantized ? models::quantize_model(m, models::QuantMix::kQ8_0) : m;
}

Engine make_q8(models::Model m, const std::string& backend, bool row_tiles = false, const std::string& device = "m4") {
  EngineOptions o;
  o.backend = backend;
  o.device = device;
  o.dtype = WType::kF32;
  o.keep_quantized = true;  // the Q8_0 matrices as they are (what a GGUF Q8_0 file gives the engine)
  o.row_tiles = row_tiles;
  o.ane_weights = "int8";
  o.quiet = true;
  return Engine(std::move(m), o);
}

constexpr KernelWeights kInt8{rt::WeightPath::kW8, nullptr};

TEST(PrefillQ8, LayerKernelEqualsTheFp16KernelOfTheDequantizedBlocks) {
  Engine e = make_q8(q8_model(), "cpu");
  const models::ModelDesc& d = e.desc();
  const LayerWeights& L = e.layer(1);
  LayerWeights dequantized = L;
  std::vector<std::vector<float>> keep;
  for (const char* n : kLayerMatrices) {
    const quant::Mat& m = L.matrix(n);
    ASSERT_EQ(m.type, WType::kQ8_0) << n;
    keep.emplace_back(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) m.row_values(r, keep.back().data() + r * m.cols);
    const_cast<quant::Mat&>(dequantized.matrix(n)) = quant::Mat::f32(keep.back(), m.rows, m.cols);
  }
  const int64_t S = 64;
  const std::vector<float> x = prefill_test::sin_input(static_cast<size_t>(d.dim * S), 0.43);
  const LayerKernelSource q8 = build_layer_kernel(d, L, S, mil::Dialect::kIos18, 1, kInt8);
  const std::string text = mil::print(q8.program, mil::Dialect::kIos18);
  EXPECT_NE(text.find("constexpr_blockwise_shift_scale"), std::string::npos);
  EXPECT_EQ(text.find("constexpr_affine_dequantize"), std::string::npos);
  const auto y8 = prefill_test::run_layer_kernel(q8, x);
  const auto y16 = prefill_test::run_layer_kernel(build_layer_kernel(d, dequantized, S, mil::Dialect::kIos18, 1), x);
  EXPECT_EQ(y8, y16);
  // Per-channel int8 of the same values is another set of numbers: the blockwise form is not that.
  const auto per_channel =
      prefill_test::run_layer_kernel(build_layer_kernel(d, dequantized, S, mil::Dialect::kIos18, 1, kInt8), x);
  EXPECT_NE(y8, per_channel);
}

TEST(PrefillQ8, RowTilesBakeTheSameBits) {
  models::Model own = q8_model();
  own.private_memory = true;  // quantize_model's rows are this model's alone: the engine may tile them in place
  Engine flat = make_q8(q8_model(), "cpu", false), tiled = make_q8(std::move(own), "cpu", true);
  ASSERT_GT(tiled.layer(0).matrix("w1").tiled_rows, 0) << "the engine did not tile its Q8_0 rows";
  const LayerKernelSource a = build_layer_kernel(flat.desc(), flat.layer(0), 64, mil::Dialect::kIos18, 0, kInt8);
  const LayerKernelSource b = build_layer_kernel(tiled.desc(), tiled.layer(0), 64, mil::Dialect::kIos18, 0, kInt8);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [path, blob] : a.weights) EXPECT_TRUE(*blob == *b.weights.at(path)) << path;
}

// A Q8_0 matrix's blob: the file header, then two chunks (data, scales), each a 64-byte chunk header and its payload,
// the next chunk starting at a multiple of 64 (framework/mil/blob.h).
int64_t q8_blob_bytes(int64_t rows, int64_t cols) {
  const int64_t blocks = rows * cols / 32;
  return 64 + 64 + (rows * cols + 63) / 64 * 64 + 64 + blocks * 2;
}

TEST(PrefillQ8, BakedMatrixBytes) {
  Engine e = make_q8(q8_model(), "cpu");
  const LayerWeights& L = e.layer(0);
  const MatrixBytes q8 = matrix_bytes(build_layer_kernel(e.desc(), L, 64, mil::Dialect::kIos18, 0, kInt8), L);
  int64_t expect = 0;
  for (const char* n : kLayerMatrices) expect += q8_blob_bytes(L.matrix(n).rows, L.matrix(n).cols);
  EXPECT_EQ(q8.bytes, expect);
  std::printf("[prefill-q8] %lld matrix weights: %.4f bytes per weight baked (payload 1.0625)\n",
              static_cast<long long>(q8.weights), static_cast<double>(q8.bytes) / static_cast<double>(q8.weights));
}

TEST(PrefillQ8, OtherSourcesAndIos16KeepPerChannelInt8) {
  Engine f32 = make_q8(q8_model(false), "cpu"), q8 = make_q8(q8_model(), "cpu");
  for (const auto& [what, text] :
       {std::pair{"fp32 on ios18",
                  mil::print(build_layer_kernel(f32.desc(), f32.layer(0), 64, mil::Dialect::kIos18, 0, kInt8).program)},
        std::pair{
            "q8_0 on ios16",
            mil::print(build_layer_kernel(q8.desc(), q8.layer(0), 64, mil::Dialect::kIos16, 0, kInt8).program)}}) {
    EXPECT_EQ(text.find("constexpr_blockwise_shift_scale"), std::string::npos) << what;
    EXPECT_NE(text.find("constexpr_affine_dequantize"), std::string::npos) << what;
  }
}

// Logits of every position: the MIL prefill on int8 weights against the CPU engine on the same Q8_0 matrices.
void expect_q8_prefill_matches_cpu(const std::function<models::Model()>& load, const char* what) {
  Engine cpu = make_q8(load(), "cpu", true), emu = make_q8(load(), "emulator", true);
  const int64_t V = cpu.config().vocab_size, n = 40;
  std::vector<int32_t> toks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) toks[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31 + 5) % V);
  std::vector<float> a, b;
  cpu.prefill(toks, 0, &a);
  emu.prefill(toks, 0, &b);
  ASSERT_EQ(emu.last_prefill().weights, "int8") << what;
  ASSERT_EQ(a.size(), b.size());
  for (int64_t t = 0; t < n; ++t)  // fp16 activations through 2 layers: the 2e-2 of the other prefill tests
    EXPECT_LT(rel_err(b.data() + t * V, a.data() + t * V, static_cast<size_t>(V)), 2e-2) << what << " pos " << t;
}

TEST(PrefillQ8, LogitsMatchTheCpuEngineOnTheSameQ8_0Weights) {
  expect_q8_prefill_matches_cpu([] { return q8_model(); }, "in memory");
  const std::string path = (std::filesystem::temp_directory_path() / "anelab_prefill_q8.gguf").string();
  models::write_gguf_model(q8_model(), path);
  expect_q8_prefill_matches_cpu([&] { return models::load_any_model(path); }, "from GGUF");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace anelab::infer
