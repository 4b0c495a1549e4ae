// The MIL prefill with 4-bit weights (--ane-weights q4, issue 39) on the emulator (infer/prefill_mil.h,
// kern::BlobSet::q4_matrix): a Q4_0 matrix is baked as constexpr_blockwise_shift_scale with the file's own bits
// (fp16 d per block of 32 input channels, uint4 nibbles, offset 8), so
//   - a whole-layer q4 kernel is bit-identical to the fp16 kernel of the dequantized Q4_0 values (x = d * (q - 8),
//     rounded to fp16 as every fp16 bake is): the 4-bit form changes how the weights are stored, nothing else;
//   - an fp32 matrix is quantized to Q4_0 first (the same kernel as from its Q4_0 model);
//   - the baked matrix bytes are 0.5 + 2/32 = 0.5625 per weight (plus the blob headers);
//   - the prefill's logits equal the CPU engine's on the same Q4_0 weights within the fp16 tolerance of the other
//     prefill tests (the weights are the same numbers: only the fp16 activations differ), also through a GGUF file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "framework/backends/registry.h"
#include "framework/core/fp16.h"
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

using test::rel_err;

// A small Llama whose every matrix has whole Q4_0 blocks (dim, hidden multiples of 32), random weights; its matrices
// quantized to Q4_0 (llama-quantize's q4_0 mix: the tied embeddings Q6_K) or left fp32.
models::Model q4_model(bool quantized = true) {
  models::ModelConfig c = models::preset("stories15m");
  c.dim = 64, c.hidden_dim = 96, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 512, c.max_seq_len = 128;
  const models::Model m = models::random_model(c, 11);
  return quantized ? models::quantize_model(m, models::QuantMix::kQ4_0) : m;
}

Engine make_q4(models::Model m, const std::string& backend, const std::string& weights = "q4") {
  EngineOptions o;
  o.backend = backend;
  o.device = "m4";
  o.dtype = WType::kF32;
  o.keep_quantized = true;  // the Q4_0 matrices as they are (what a GGUF Q4_0 file gives the engine)
  o.ane_weights = weights;
  o.quiet = true;
  return Engine(std::move(m), o);
}

TEST(PrefillQ4, LayerKernelEqualsTheFp16KernelOfTheDequantizedBlocks) {
  Engine e = make_q4(q4_model(), "cpu");
  const models::ModelDesc& d = e.desc();
  const LayerWeights& L = e.layer(1);
  LayerWeights dequantized = L;
  std::vector<std::vector<float>> keep;
  for (const char* n : prefill_test::kLayerMatrices) {
    const quant::Mat& m = L.matrix(n);
    ASSERT_EQ(m.type, WType::kQ4_0) << n;
    keep.emplace_back(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) m.row_values(r, keep.back().data() + r * m.cols);
    const_cast<quant::Mat&>(dequantized.matrix(n)) = quant::Mat::f32(keep.back(), m.rows, m.cols);
  }
  const int64_t S = 64;
  const std::vector<float> x = prefill_test::sin_input(static_cast<size_t>(d.dim * S), 0.41);
  const LayerKernelSource q4 = build_layer_kernel(d, L, S, mil::Dialect::kIos18, 1, {rt::WeightPath::kQ4, nullptr});
  const std::string text = mil::print(q4.program, mil::Dialect::kIos18);
  EXPECT_NE(text.find("constexpr_blockwise_shift_scale"), std::string::npos);
  const auto y4 = prefill_test::run_layer_kernel(q4, x);
  const auto y16 = prefill_test::run_layer_kernel(build_layer_kernel(d, dequantized, S, mil::Dialect::kIos18, 1), x);
  EXPECT_EQ(y4, y16);
}

TEST(PrefillQ4, AnFp32MatrixIsQuantizedToQ4_0First) {
  Engine f32 = make_q4(q4_model(false), "cpu");
  Engine q4 = make_q4(q4_model(true), "cpu");
  const int64_t S = 64;
  const KernelWeights kw{rt::WeightPath::kQ4, nullptr};
  const LayerKernelSource a = build_layer_kernel(f32.desc(), f32.layer(0), S, mil::Dialect::kIos18, 0, kw);
  const LayerKernelSource b = build_layer_kernel(q4.desc(), q4.layer(0), S, mil::Dialect::kIos18, 0, kw);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [path, blob] : a.weights) {
    ASSERT_TRUE(b.weights.count(path)) << path;
    EXPECT_TRUE(*blob == *b.weights.at(path)) << path << ": the fp32 matrix baked other bits than its Q4_0 model";
  }
}

// A Q4_0 matrix's blob: the file header, then three chunks (data, scales, offsets), each a 64-byte chunk header and
// its payload, the next chunk starting at a multiple of 64 (framework/mil/blob.h).
int64_t q4_blob_bytes(int64_t rows, int64_t cols) {
  auto padded = [](int64_t payload) { return (payload + 63) / 64 * 64; };
  const int64_t blocks = rows * cols / 32;
  return 64 + 64 + padded(rows * cols / 2) + 64 + padded(blocks * 2) + 64 + (blocks + 1) / 2;
}

TEST(PrefillQ4, BakedMatrixBytesAreNineSixteenthsOfAByte) {
  Engine e = make_q4(q4_model(), "cpu");
  const int64_t S = 64;
  const LayerWeights& L = e.layer(0);
  const MatrixBytes q4 =
      matrix_bytes(build_layer_kernel(e.desc(), L, S, mil::Dialect::kIos18, 0, {rt::WeightPath::kQ4, nullptr}), L);
  const MatrixBytes f16 = matrix_bytes(build_layer_kernel(e.desc(), L, S, mil::Dialect::kIos18, 0), L);
  ASSERT_GT(q4.weights, 0);
  EXPECT_EQ(q4.weights, f16.weights);
  // Per weight: 4 bits of data + an fp16 scale and a 4-bit offset per 32 = 0.578125 B, plus the blob headers.
  int64_t expect = 0;
  for (const char* n : prefill_test::kLayerMatrices) expect += q4_blob_bytes(L.matrix(n).rows, L.matrix(n).cols);
  EXPECT_EQ(q4.bytes, expect);
  const double payload = 0.5 + 2.0 / 32 + 0.5 / 32;
  std::printf("[prefill-q4] %lld matrix weights: %.4f bytes per weight baked (payload %.6f; fp16 %.4f)\n",
              static_cast<long long>(q4.weights), static_cast<double>(q4.bytes) / static_cast<double>(q4.weights),
              payload, static_cast<double>(f16.bytes) / static_cast<double>(f16.weights));
  // At a real size the headers vanish: Qwen2.5-0.5B's wq (896 x 896) bakes at 0.5785 bytes per weight.
  EXPECT_LT(static_cast<double>(q4_blob_bytes(896, 896)) / (896.0 * 896.0), payload + 1e-3);
}

// Logits of every position: the MIL prefill on q4 weights against the CPU engine on the same Q4_0 matrices.
void expect_prefill_matches_cpu(const std::function<models::Model()>& load, const char* what) {
  Engine cpu = make_q4(load(), "cpu"), emu = make_q4(load(), "emulator");
  const int64_t V = cpu.config().vocab_size, n = 40;
  std::vector<int32_t> toks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) toks[static_cast<size_t>(i)] = static_cast<int32_t>((i * 29 + 7) % V);
  std::vector<float> a, b;
  cpu.prefill(toks, 0, &a);
  emu.prefill(toks, 0, &b);
  ASSERT_EQ(emu.last_prefill().weights, "q4") << what;
  int64_t bytes = 0, weights = 0;  // the engine's report is q4_blob_bytes over both layers' matrices
  for (int64_t l = 0; l < cpu.config().n_layers; ++l)
    for (const char* m : prefill_test::kLayerMatrices) {
      const quant::Mat& w = cpu.layer(l).matrix(m);
      bytes += q4_blob_bytes(w.rows, w.cols), weights += w.rows * w.cols;
    }
  EXPECT_DOUBLE_EQ(emu.last_prefill().matrix_bytes_per_weight,
                   static_cast<double>(bytes) / static_cast<double>(weights))
      << what;
  ASSERT_EQ(a.size(), b.size());
  for (int64_t t = 0; t < n; ++t)  // fp16 activations through 2 layers: the 2e-2 of the other prefill tests
    EXPECT_LT(rel_err(b.data() + t * V, a.data() + t * V, static_cast<size_t>(V)), 2e-2) << what << " pos " << t;
}

TEST(PrefillQ4, LogitsMatchTheCpuEngineOnTheSameQ4_0Weights) {
  expect_prefill_matches_cpu([] { return q4_model(); }, "in memory");
  const std::string path = (std::filesystem::temp_directory_path() / "anelab_prefill_q4.gguf").string();
  models::write_gguf_model(q4_model(), path);
  expect_prefill_matches_cpu([&] { return models::load_any_model(path); }, "from GGUF");
  std::filesystem::remove(path);
}

TEST(PrefillQ4, Ios16ProfilesRefuseQ4) {
  try {
    rt::parse_weight_path("q4", rt::device_profile("m1"));
    ADD_FAILURE() << "q4 accepted on an ios16 profile";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4 needs constexpr_blockwise_shift_scale"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt::parse_weight_path("q4", rt::device_profile("m4")), rt::WeightPath::kQ4);
}

}  // namespace
}  // namespace anelab::infer
