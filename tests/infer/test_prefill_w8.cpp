// The MIL prefill with int8 weights (--ane-weights int8) and int8 activations (w8a8) on the emulator
// (infer/prefill_mil.h, framework/kernels/w8.h), on stories260K:
//   - a whole-layer W8 kernel is bit-identical to the fp16 kernel built from the folded weights
//     fp16(q * scale): the int8 path changes the weights and nothing else (the per-product bound of
//     that change is test_w8.cpp's);
//   - the baked matrix bytes halve;
//   - the W8A8 kernel quantizes each distinct conv input once, in MDX's working form;
//   - the engine picks the path from --ane-weights / the device profile, calibrates once and keeps the
//     scales (static), and its logits stay near the CPU fp32 path's.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/backends/registry.h"
#include "framework/kernels/w8.h"
#include "framework/mil/printer.h"
#include "framework/quant/blocks.h"
#include "infer/engine.h"
#include "infer/prefill_mil.h"
#include "models/io/load_any.h"
#include "tests/common/test_data.h"
#include "tests/infer/prefill_test_helpers.h"

namespace anelab::infer {
namespace {

constexpr const char* kModel = "llama2c/stories260K.bin";

Engine make_w8(const std::string& backend, const std::string& weights = "fp16", const std::string& device = "m4") {
  EngineOptions o;
  o.backend = backend;
  o.device = device;
  o.dtype = WType::kF32;
  o.ane_weights = weights;
  o.quiet = true;
  return Engine(models::load_any_model(test::data_path(kModel)), o);
}

TEST(PrefillW8, LayerKernelEqualsTheFp16KernelOfTheFoldedWeights) {
  ANELAB_REQUIRE_DATA(kModel);
  Engine e = make_w8("cpu");
  const auto& c = e.config();
  const int64_t S = 64;
  const LayerWeights& L = e.layer(1);
  LayerWeights folded = L;
  std::vector<std::vector<float>> keep;
  for (const char* n : prefill_test::kLayerMatrices) {
    const quant::Mat& m = L.matrix(n);
    keep.push_back(kern::dequantize_w8(kern::quantize_w8(kern::mat_values(m), m.rows, m.cols)));
    const_cast<quant::Mat&>(folded.matrix(n)) = quant::Mat::f32(keep.back(), m.rows, m.cols);
  }
  const std::vector<float> x = prefill_test::sin_input(static_cast<size_t>(c.dim * S), 0.37);
  const auto y8 = prefill_test::run_layer_kernel(
      build_layer_kernel(c, L, S, mil::Dialect::kIos18, 1, {rt::WeightPath::kW8, nullptr}), x);
  const auto y16 = prefill_test::run_layer_kernel(build_layer_kernel(c, folded, S, mil::Dialect::kIos18, 1), x);
  EXPECT_EQ(y8, y16);
  const auto y_orig = prefill_test::run_layer_kernel(build_layer_kernel(c, L, S, mil::Dialect::kIos18, 1), x);
  EXPECT_NE(y8, y_orig);  // the weights did change
}

// A block-quantized model (Q8_0 / Q4_0 matrices kept in their blocks) feeds the int8 path of an ios16 program (no
// blockwise op there) by requantizing per output channel: its W8 kernel is the W8 kernel of its dequantized matrices.
// (On ios18 a Q8_0 matrix keeps its blocks: test_prefill_q8.cpp.)
TEST(PrefillW8, BlockQuantizedMatricesAreRequantizedPerChannelOnIos16) {
  ANELAB_REQUIRE_DATA(kModel);
  Engine e = make_w8("cpu");
  const auto& c = e.config();
  const LayerWeights& L = e.layer(0);
  LayerWeights qw = L, dq = L;
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<std::vector<float>> values;
  for (const char* n : prefill_test::kLayerMatrices) {
    const quant::Mat& m = L.matrix(n);
    if (m.cols % 32 != 0) continue;  // w2's rows (172) are not whole blocks: it stays fp32
    const quant::WType t = std::string(n) == "w1" ? quant::WType::kQ4_0 : quant::WType::kQ8_0;
    const quant::BlockInfo bi = quant::block_info(quant::block_type(t));
    blocks.emplace_back(static_cast<size_t>(m.rows * (m.cols / bi.values) * bi.bytes));
    const std::vector<float> v = kern::mat_values(m);
    for (int64_t r = 0; r < m.rows; ++r)
      quant::quantize(quant::block_type(t), v.data() + r * m.cols,
                      blocks.back().data() + r * (m.cols / bi.values) * bi.bytes, m.cols);
    quant::Mat q = m;
    q.type = t, q.data = blocks.back().data();
    const_cast<quant::Mat&>(qw.matrix(n)) = q;
    values.push_back(kern::mat_values(q));
    const_cast<quant::Mat&>(dq.matrix(n)) = quant::Mat::f32(values.back(), m.rows, m.cols);
  }
  const KernelWeights w8{rt::WeightPath::kW8, nullptr};
  const std::vector<float> x = prefill_test::sin_input(static_cast<size_t>(c.dim * 64), 0.37);
  const LayerKernelSource a = build_layer_kernel(c, qw, 64, mil::Dialect::kIos16, 0, w8);
  const LayerKernelSource b = build_layer_kernel(c, dq, 64, mil::Dialect::kIos16, 0, w8);
  EXPECT_EQ(mil::print(a.program), mil::print(b.program));
  for (const auto& [k, blob] : a.weights) EXPECT_EQ(*blob, *b.weights.at(k)) << k;
  EXPECT_EQ(prefill_test::run_layer_kernel(a, x), prefill_test::run_layer_kernel(b, x));
}

TEST(PrefillW8, BakedMatrixBytesHalve) {
  ANELAB_REQUIRE_DATA(kModel);
  Engine e = make_w8("cpu");
  const auto& c = e.config();
  const LayerKernelSource s16 = build_layer_kernel(c, e.layer(0), 64, mil::Dialect::kIos18);
  const LayerKernelSource s8 =
      build_layer_kernel(c, e.layer(0), 64, mil::Dialect::kIos18, 0, {rt::WeightPath::kW8, nullptr});
  auto total = [](const rt::Weights& w) {
    size_t n = 0;
    for (const auto& [k, b] : w) n += b->size();
    return n;
  };
  size_t elems = 0;
  for (const char* n : prefill_test::kLayerMatrices) {
    const std::string key = std::string("@model_path/weights/") + n + ".bin";
    const size_t p16 = s16.weights.at(key)->size() - 128, p8 = s8.weights.at(key)->size() - 128;
    EXPECT_EQ(p16, 2 * p8) << n;
    elems += p8;
  }
  EXPECT_EQ(total(s16.weights) - total(s8.weights), elems);  // everything else (norms, mask, RoPE) unchanged
  EXPECT_EQ(elems, static_cast<size_t>(2 * c.dim * (c.q_dim() + c.kv_dim()) + 3 * c.dim * c.hidden_dim));
}

TEST(PrefillW8A8, EachConvInputIsQuantizedOnceInTheWorkingForm) {
  ANELAB_REQUIRE_DATA(kModel);
  Engine e = make_w8("cpu");
  const std::map<std::string, float> scales = {
      {"attn_in", 0.25f}, {"attn_out", 0.125f}, {"ffn_in", 0.5f}, {"ffn_mid", 1.0f}};
  const LayerKernelSource s =
      build_layer_kernel(e.config(), e.layer(0), 64, mil::Dialect::kIos18, 0, {rt::WeightPath::kW8A8, &scales});
  std::map<std::string, int> count;
  for (const auto& op : s.program.functions.at(0).ops) ++count[op.op];
  EXPECT_EQ(count["quantize"], 4);
  EXPECT_EQ(count["dequantize"], 4);
  EXPECT_EQ(count["constexpr_affine_dequantize"], 7);
  const std::string text = mil::print(s.program);
  EXPECT_NE(text.find("output_dtype = "), std::string::npos);
  EXPECT_NE(text.find("val = fp16(0x1p-3)"), std::string::npos);  // attn_out's scale, as MDX writes it
  EXPECT_THROW(
      build_layer_kernel(e.config(), e.layer(0), 64, mil::Dialect::kIos18, 0, {rt::WeightPath::kW8A8, nullptr}), Error);
}

TEST(PrefillW8A8, AutoFollowsTheDeviceProfile) {
  ANELAB_REQUIRE_DATA(kModel);
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"m4", "w8a8"}, {"m5", "w8a8"}, {"m1", "int8"}, {"m3", "int8"}};
  for (const auto& [dev, want] : cases) {
    Engine e = make_w8("emulator", "auto", dev);
    e.prefill(toks, 0);
    EXPECT_EQ(e.last_prefill().weights, want) << dev;
  }
  EXPECT_THROW(make_w8("emulator", "int4"), Error);
  EXPECT_THROW(make_w8("emulator", "w8a8", "m2"), Error);  // quantize / dequantize are iOS17 ops; m1-m3 print ios16
}

// Relative max error: max |a-b| / max |b|.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::abs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::abs(static_cast<double>(b[i])));
  }
  return e / std::max(m, 1e-30);
}

TEST(PrefillW8A8, CalibratedOnceThenStatic) {
  ANELAB_REQUIRE_DATA(kModel);
  EngineOptions o;
  o.backend = "emulator", o.dtype = WType::kF32, o.ane_weights = "w8a8", o.quiet = true;
  Engine e(models::load_any_model(test::data_path(kModel)), o);
  std::vector<int32_t> a(70), b(20);  // buckets 128 and 64
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>((i * 37 + 11) % 512);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>((i * 91 + 5) % 512);
  a[0] = b[0] = 1;
  // the scales of prompt a, calibrated directly through the fp16 emulator
  auto emu = rt::create_backend("emulator");
  const ActScales want = calibrate_act_scales(e, a, *emu);
  ASSERT_EQ(want.size(), static_cast<size_t>(e.config().n_layers));
  for (const auto& layer : want) {
    ASSERT_EQ(layer.size(), 4u);
    for (const auto& [name, s] : layer) {
      int ex = 0;
      EXPECT_EQ(std::frexp(s, &ex), 0.5f) << name << " " << s;  // a power of two
    }
  }
  std::vector<float> la, lb;
  e.prefill(a, 0, &la);
  EXPECT_EQ(e.last_prefill().weights, "w8a8");
  ASSERT_NE(e.mil_prefill(), nullptr);
  EXPECT_EQ(e.mil_prefill()->act_scales(), want);
  e.prefill(b, 0, &lb);  // b does not recalibrate: the kernels of its bucket use a's scales
  EXPECT_EQ(e.mil_prefill()->act_scales(), want);
  Engine cpu = make_w8("cpu");
  std::vector<float> ca, cb;
  cpu.prefill(a, 0, &ca);
  cpu.prefill(b, 0, &cb);
  // For the record (no tolerance: a whole model's error is not bounded by the per-product bounds):
  // the logits' max error relative to their range, next to the fp16 and int8-weight prefills'.
  std::vector<float> l16, l8;
  make_w8("emulator").prefill(a, 0, &l16);
  make_w8("emulator", "int8").prefill(a, 0, &l8);
  std::printf(
      "[infer] prefill vs cpu fp32, rel max err of the logits: fp16 %.3e, int8 %.3e, w8a8 %.3e "
      "(calibration prompt), w8a8 %.3e (another prompt)\n",
      rel_err(l16, ca), rel_err(l8, ca), rel_err(la, ca), rel_err(lb, cb));
  for (float v : lb) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace anelab::infer
