// Issue 36: Qwen3.5's MIL prefill on the emulator (the Gated DeltaNet layer kernels of framework/kernels/deltanet.h and
// the gated, partially rotated full-attention layer), on the tiny Hugging Face fixture tests/fixtures/hf/qwen35_bf16
// (3 DeltaNet layers of 2 key / 4 value heads of 16, conv 4; 1 gated attention layer, 4/2 heads of 32, RoPE on 8):
// its logits against transformers' and against the CPU engine's recurrent decode (fp32, itself checked against
// transformers in test_qwen35.cpp) at every position of a prompt of several chunks that is not whole chunks, the
// recurrent states it hands to the CPU decode, the decode that continues from them, and every kernel of the model
// within the device rules of m1..m5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <span>

#include "framework/ane/ane_backend.h"
#include "framework/backends/registry.h"
#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/kernels/deltanet.h"
#include "framework/kernels/layer.h"
#include "framework/kernels/nn.h"
#include "framework/runtime/device_profile.h"
#include "framework/runtime/weights.h"
#include "infer/engine.h"
#include "infer/prefill_mil.h"
#include "models/arch/arch.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "tests/common/errors.h"
#include "tests/common/test_data.h"
#include "tests/infer/hf_reference.h"
#include "tests/support/fake_shim.h"

namespace anelab::infer {
namespace {

// The emulator prefill's tolerance of the other architectures (test_prefill.cpp EmulatorMatchesCpuAtBucketBoundaries,
// EmulatorLogitsMatchRunc): fp16 activations and weights through the layers, ~1e-2 of the largest logit.
constexpr double kQ35EmuTol = 2e-2;

Engine q35_mil_engine(const std::string& backend, int64_t prefill_chunk = 256) {
  EngineOptions o;
  o.backend = backend;
  o.dtype = WType::kF32;
  o.quiet = true;
  o.prefill_chunk = prefill_chunk;
  return Engine(models::load_any_model(test::source_path("tests/fixtures/hf/qwen35_bf16")), o);
}

std::vector<int32_t> q35_random_prompt(size_t n, int64_t vocab) {
  std::mt19937 rng(3636);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return p;
}

// test::rel_err passes NaN by (std::max drops it): every value is checked finite first.
bool q35_all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

int32_t q35_argmax(const float* l, int64_t n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

// The fixture's prompts (40, 8 and 1 tokens: one chunk) through the emulator prefill against transformers' fp32
// logits at every position.
TEST(Qwen35MilPrefill, EmulatorLogitsMatchTransformers) {
  Engine e = q35_mil_engine("emulator");
  const auto& m = test::hf_reference("reference_qwen35_bf16.json")["models"]["qwen35_bf16"];
  const int64_t V = e.config().vocab_size;
  for (size_t p = 0; p < m["prompts"].size(); ++p) {
    const auto prompt = m["prompts"][p].get<std::vector<int32_t>>();
    std::vector<float> all;
    e.prefill(prompt, 0, &all);
    ASSERT_EQ(e.last_prefill().path, "emulator") << "prompt " << p;
    ASSERT_TRUE(q35_all_finite(all)) << "prompt " << p;
    double worst = 0;
    for (size_t t = 0; t < prompt.size(); ++t) {
      const auto want = m["logits"][p][t].get<std::vector<float>>();
      const double err = test::rel_err(all.data() + t * V, want.data(), want.size());
      EXPECT_LT(err, kQ35EmuTol) << "prompt " << p << " pos " << t;
      worst = std::max(worst, err);
    }
    std::printf("[qwen35 emulator prefill] prompt %zu (%zu tokens): worst error vs transformers %.2e\n", p,
                prompt.size(), worst);
  }
}

// A prompt of 150 tokens (bucket 256: four chunks of 64, the last two partly or wholly padding): the emulator prefill's
// logits at every position against the CPU's token-by-token recurrent decode, and the states it leaves (delta rule and
// conv, every DeltaNet layer) against the decode's; then the decode continuing from each gives the same greedy tokens.
TEST(Qwen35MilPrefill, SeveralChunksMatchTheRecurrentDecodeAndHandOverTheState) {
  Engine emu = q35_mil_engine("emulator"), dec = q35_mil_engine("cpu");
  const int64_t V = dec.config().vocab_size;
  const std::vector<int32_t> prompt = q35_random_prompt(150, V);
  std::vector<float> ref;
  for (size_t t = 0; t < prompt.size(); ++t) {
    const float* lg = dec.decode(prompt[t], static_cast<int64_t>(t));
    ref.insert(ref.end(), lg, lg + V);
  }
  std::vector<float> all;
  emu.prefill(prompt, 0, &all);
  ASSERT_EQ(emu.last_prefill().path, "emulator");
  ASSERT_EQ(emu.last_prefill().bucket, 256);
  ASSERT_EQ(all.size(), ref.size());
  ASSERT_TRUE(q35_all_finite(all));
  double worst = 0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    const double err = test::rel_err(all.data() + t * V, ref.data() + t * V, static_cast<size_t>(V));
    EXPECT_LT(err, kQ35EmuTol) << "pos " << t;
    worst = std::max(worst, err);
  }
  std::printf("[qwen35 emulator prefill] 150 tokens: worst logit error vs the recurrent decode %.2e\n", worst);
  EXPECT_EQ(emu.state_pos(), static_cast<int64_t>(prompt.size()));
  int64_t linear = 0;
  for (int64_t l = 0; l < emu.config().n_layers; ++l) {
    if (!is_deltanet_layer(emu.desc(), l)) continue;
    ++linear;
    const auto a = emu.delta_state(l), b = dec.delta_state(l);
    ASSERT_TRUE(q35_all_finite(a) && q35_all_finite(emu.conv_state(l))) << "layer " << l;
    const double es = test::rel_err(a.data(), b.data(), a.size());
    EXPECT_LT(es, kQ35EmuTol) << "delta-rule state of layer " << l;
    const auto ca = emu.conv_state(l), cb = dec.conv_state(l);
    const double ec = test::rel_err(ca.data(), cb.data(), ca.size());
    EXPECT_LT(ec, kQ35EmuTol) << "conv state of layer " << l;
    std::printf("[qwen35 emulator prefill] layer %lld: state error %.2e, conv state error %.2e\n",
                static_cast<long long>(l), es, ec);
  }
  EXPECT_EQ(linear, 3);
  // Greedy decode from both: the same tokens, each step's logits within the tolerance.
  int32_t ta = q35_argmax(all.data() + (prompt.size() - 1) * V, V);
  int32_t tb = q35_argmax(ref.data() + (prompt.size() - 1) * V, V);
  for (int64_t pos = static_cast<int64_t>(prompt.size()); pos < static_cast<int64_t>(prompt.size()) + 16; ++pos) {
    ASSERT_EQ(ta, tb) << "greedy token at position " << pos;
    const float* la = emu.decode(ta, pos);
    const std::vector<float> keep(la, la + V);
    const float* lb = dec.decode(tb, pos);
    EXPECT_LT(test::rel_err(keep.data(), lb, static_cast<size_t>(V)), kQ35EmuTol) << "decode at position " << pos;
    ta = q35_argmax(keep.data(), V);
    tb = q35_argmax(lb, V);
  }
}

// The "ane" backend over the fake shim (tests/support/fake_shim.h: the emulator behind the device's row-strided
// surfaces), at device rows of 64, 128 and 1 bytes, runs the DeltaNet kernels' two inputs and their state rows as the
// emulator does: the same logits and states bit for bit.
TEST(Qwen35MilPrefill, FakeAneEqualsTheEmulatorAtEveryRowAlignment) {
  const std::string dir = ::testing::TempDir() + "anelab-q35-rows";
  ::setenv("ANELAB_ANE_SHIM", "fake", 1);
  ::setenv("ANELAB_FAKE_ANE_DIR", dir.c_str(), 1);
  ane::install_fake_shim(&ane::fake_shim_for_backend);
  Engine emu = q35_mil_engine("emulator");
  const std::vector<int32_t> prompt = q35_random_prompt(100, emu.config().vocab_size);
  std::vector<float> want;
  emu.prefill(prompt, 0, &want);
  for (const char* align : {"64", "128", "1"}) {
    ::setenv("ANELAB_FAKE_ANE_ROW_ALIGN", align, 1);
    Engine fake = q35_mil_engine("ane");
    std::vector<float> got;
    fake.prefill(prompt, 0, &got);
    EXPECT_EQ(fake.last_prefill().path, "ane") << align;
    EXPECT_EQ(got, want) << "at fake rows of " << align << " bytes";
    for (int64_t l = 0; l < emu.config().n_layers; ++l) {
      if (!is_deltanet_layer(emu.desc(), l)) continue;
      const auto a = fake.delta_state(l), b = emu.delta_state(l);
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "layer " << l << " at rows of " << align;
      const auto ca = fake.conv_state(l), cb = emu.conv_state(l);
      EXPECT_TRUE(std::equal(ca.begin(), ca.end(), cb.begin())) << "layer " << l << " at rows of " << align;
    }
  }
  ::unsetenv("ANELAB_FAKE_ANE_ROW_ALIGN");
  ::unsetenv("ANELAB_ANE_SHIM");
  ane::install_fake_shim(nullptr);
}

// The DeltaNet layer kernel of layer 0 run on the emulator at bucket S with n real positions of x [dim, S] (the rest
// zeros): its output [dim + conv_dim + R, S].
std::vector<float> q35_run_deltanet_kernel(const Engine& e, int64_t S, int64_t n, const std::vector<float>& x) {
  const LayerKernelSource src =
      build_deltanet_layer_kernel(e.desc(), e.layer(0), e.deltanet(0), S, mil::Dialect::kIos18, 0);
  auto be = rt::create_backend("emulator");
  auto k = be->compile(src.program, src.weights);
  k.status().throw_if_error();
  auto in = k.value()->make_inputs(0, be->profile()), out = k.value()->make_outputs(0, be->profile());
  std::vector<float> valid(static_cast<size_t>(S), 0.0f);
  std::fill(valid.begin(), valid.begin() + n, 1.0f);
  in[0].write(valid.data());
  in[1].write(x.data());
  rt::Surface* ip[2] = {&in[0], &in[1]};
  rt::Surface* op[1] = {&out[0]};
  be->evaluate(*k.value(), 0, ip, op).throw_if_error();
  std::vector<float> y(static_cast<size_t>(out[0].numel()));
  out[0].read(y.data());
  return y;
}

// The padding of a bucket leaves the state as the last real token's, bit for bit: 100 real positions at bucket 1024
// (the state's 1024 values one row of S) and at bucket 2048 (half a row, padded with zeros) give the same outputs at
// the real positions and the same state, the rest of the padded row zeros.
TEST(Qwen35MilPrefill, PaddingChunksLeaveTheStateAsItIs) {
  const Engine e = q35_mil_engine("cpu");
  const models::DeltaNetDesc& d = e.desc().layers[0].steps[0].deltanet;
  const int64_t D = e.config().dim, C = d.conv_dim(), ns = d.n_v_heads * d.k_dim * d.v_dim, n = 100;
  ASSERT_EQ(ns, 1024);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> xt(static_cast<size_t>(n * D));
  for (float& v : xt) v = round_fp16(u(rng));
  std::vector<std::vector<float>> outs;
  for (int64_t S : {1024, 2048}) {
    std::vector<float> x(static_cast<size_t>(D * S), 0.0f);
    for (int64_t c = 0; c < D; ++c)
      for (int64_t t = 0; t < n; ++t) x[static_cast<size_t>(c * S + t)] = xt[static_cast<size_t>(c * n + t)];
    outs.push_back(q35_run_deltanet_kernel(e, S, n, x));
    ASSERT_TRUE(q35_all_finite(outs.back())) << S;
  }
  const std::vector<float>&a = outs[0], &b = outs[1];
  ASSERT_EQ(a.size(), static_cast<size_t>((D + C + 1) * 1024));
  ASSERT_EQ(b.size(), static_cast<size_t>((D + C + 1) * 2048));
  for (int64_t c = 0; c < D + C; ++c)
    for (int64_t t = 0; t < n; ++t)
      ASSERT_EQ(a[static_cast<size_t>(c * 1024 + t)], b[static_cast<size_t>(c * 2048 + t)])
          << "channel " << c << " pos " << t;
  for (int64_t i = 0; i < ns; ++i)
    ASSERT_EQ(a[static_cast<size_t>((D + C) * 1024 + i)], b[static_cast<size_t>((D + C) * 2048 + i)]) << "state " << i;
  for (int64_t i = ns; i < 2048; ++i)
    ASSERT_EQ(b[static_cast<size_t>((D + C) * 2048 + i)], 0.0f) << "row padding " << i;
  double amax = 0;
  for (int64_t i = 0; i < ns; ++i)
    amax = std::max(amax, std::abs(static_cast<double>(a[static_cast<size_t>((D + C) * 1024 + i)])));
  EXPECT_GT(amax, 0.0) << "a state of zeros";
}

// w8a8 calibrates through the transformer layer kernel: asked for on a model with DeltaNet layers, refused in one line
// naming the layer; auto, which picks w8a8 on m4, takes int8 weights there.
TEST(Qwen35MilPrefill, W8a8IsRefusedAndAutoTakesInt8) {
  auto with = [](const std::string& weights) {
    EngineOptions o;
    o.backend = "emulator";
    o.device = "m4";
    o.ane_weights = weights;
    o.quiet = true;
    return Engine(models::load_any_model(test::source_path("tests/fixtures/hf/qwen35_bf16")), o);
  };
  try {
    with("w8a8");
    ADD_FAILURE() << "w8a8 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[infer] --ane-weights w8a8: layer 0 is a Gated DeltaNet layer, whose MIL kernel has no w8a8 "
                 "calibration; use fp16 or int8");
  }
  Engine a = with("auto");
  const std::vector<int32_t> prompt = q35_random_prompt(20, a.config().vocab_size);
  a.prefill(prompt, 0);
  EXPECT_EQ(a.last_prefill().path, "emulator");
  EXPECT_EQ(a.last_prefill().weights, "int8");
}

// Every layer kernel of the model (3 DeltaNet, 1 gated attention) at buckets 64 and 256 passes the device rules of
// each profile m1..m5 (in its own dialect) and compiles on the emulator with that profile.
TEST(Qwen35MilPrefill, EveryKernelPassesTheDeviceRulesOfM1ToM5) {
  const Engine e = q35_mil_engine("cpu");
  for (const std::string& name : rt::device_profile_names()) {
    const rt::DeviceProfile& prof = rt::device_profile(name);
    rt::BackendOptions bo;
    bo.device = name;
    auto be = rt::create_backend("emulator", bo);
    for (int64_t S : {64, 256})
      for (int64_t l = 0; l < e.config().n_layers; ++l) {
        const LayerKernelSource src =
            is_deltanet_layer(e.desc(), l)
                ? build_deltanet_layer_kernel(e.desc(), e.layer(l), e.deltanet(l), S, prof.dialect, l)
                : build_layer_kernel(e.desc(), e.layer(l), S, prof.dialect, l);
        const Status chk = rt::check_program(src.program, prof);
        EXPECT_TRUE(chk.is_ok()) << name << " layer " << l << " S " << S << ": " << chk.message();
        EXPECT_TRUE(rt::check_weights(src.program, src.weights).is_ok()) << name << " layer " << l;
        auto r = be->compile(src.program, src.weights);
        EXPECT_TRUE(r.is_ok()) << name << " layer " << l << " S " << S << ": " << r.status().message();
      }
  }
}

// Item 3: the layer kernels of the Qwen3.5-0.8B shape (preset qwen3.5-0.8b: dim 1024, DeltaNet 16 key / 16 value heads
// of 128, conv 4 over 6144 channels; gated attention 8 / 2 heads of 256, RoPE on 64; FFN 3584), random weights, at
// buckets 64 and 512: a DeltaNet layer (0) and a full-attention layer (3) pass the device rules of m1..m5 and compile
// on the emulator. Shapes and compile only.
TEST(Qwen35MilPrefill, ZeroPointEightBShapeKernelsPassTheDeviceRulesOfM1ToM5) {
  const models::ModelConfig& c = models::preset("qwen3.5-0.8b");
  const models::ModelDesc d = models::describe_model(c);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-0.02f, 0.02f);
  std::deque<std::vector<float>> store;
  auto rnd = [&](int64_t n) -> std::span<const float> {
    store.emplace_back(static_cast<size_t>(n));
    for (float& x : store.back()) x = u(rng);
    return store.back();
  };
  auto mat = [&](int64_t rows, int64_t cols) { return quant::Mat::f32(rnd(rows * cols), rows, cols); };
  auto ones = [&](int64_t n) -> std::span<const float> { return store.emplace_back(static_cast<size_t>(n), 1.0f); };
  const int64_t D = c.dim, H = c.hidden_dim;
  for (int64_t layer : {0, 3}) {
    LayerWeights L;
    kern::DeltaNetWeights W;
    for (const models::Step& s : d.layers[static_cast<size_t>(layer)].steps) {
      if (s.pre_norm) L.set_norm(s.pre_norm->weight, ones(D));
      if (s.kind == models::StepKind::kFfn) {
        L.w1 = mat(H, D), L.w3 = mat(H, D), L.w2 = mat(D, H);
      } else if (s.kind == models::StepKind::kAttention) {
        const models::AttnDesc& a = s.attn;
        const int64_t QD = a.n_heads * a.head_dim, KVD = a.n_kv_heads * a.head_dim;
        L.wq = mat(a.output_gate ? 2 * QD : QD, D), L.wk = mat(KVD, D), L.wv = mat(KVD, D), L.wo = mat(D, QD);
        if (a.q_norm) L.set_norm(a.q_norm->weight, ones(a.head_dim));
        if (a.k_norm) L.set_norm(a.k_norm->weight, ones(a.head_dim));
      } else {
        const models::DeltaNetDesc& n = s.deltanet;
        const int64_t C = n.conv_dim(), V = n.n_v_heads * n.v_dim;
        W.qkv = mat(C, D), W.z = mat(V, D), W.b = mat(n.n_v_heads, D), W.a = mat(n.n_v_heads, D), W.out = mat(D, V);
        W.conv = rnd(C * n.conv_kernel), W.a_log = rnd(n.n_v_heads), W.dt_bias = rnd(n.n_v_heads);
        W.norm = ones(n.v_dim);
      }
    }
    for (int64_t S : {64, 512}) {
      std::string passed;
      for (const std::string& name : rt::device_profile_names()) {
        const rt::DeviceProfile& prof = rt::device_profile(name);
        const LayerKernelSource src = is_deltanet_layer(d, layer)
                                          ? build_deltanet_layer_kernel(d, L, W, S, prof.dialect, layer)
                                          : build_layer_kernel(d, L, S, prof.dialect, layer);
        const Status chk = rt::check_program(src.program, prof);
        EXPECT_TRUE(chk.is_ok()) << name << " layer " << layer << " S " << S << ": " << chk.message();
        EXPECT_TRUE(rt::check_weights(src.program, src.weights).is_ok()) << name << " layer " << layer;
        if (chk.is_ok()) passed += " " + name;
        if (name == "m4") {
          rt::BackendOptions bo;
          bo.device = name;
          auto be = rt::create_backend("emulator", bo);
          auto r = be->compile(src.program, src.weights);
          EXPECT_TRUE(r.is_ok()) << "layer " << layer << " S " << S << ": " << r.status().message();
          const mil::Function& f = src.program.functions.at(0);
          std::printf("[qwen3.5-0.8b] layer %lld (%s) S %lld: %zu ops, output %s, compiled on the m4 emulator\n",
                      static_cast<long long>(layer), is_deltanet_layer(d, layer) ? "deltanet" : "attention",
                      static_cast<long long>(S), f.ops.size(), f.type_of(f.outputs.at(0))->str().c_str());
        }
      }
      std::printf("[qwen3.5-0.8b] layer %lld S %lld: device rules pass on%s\n", static_cast<long long>(layer),
                  static_cast<long long>(S), passed.c_str());
    }
  }
}

// Issue 36: the Qwen3.5-0.8B shape (preset qwen3.5-0.8b) cut to 4 layers (3 DeltaNet, 1 gated attention) and a
// vocabulary of 4096, random weights (models::random_model): the emulator prefill of 150 tokens (bucket 256: two whole
// chunks, one partial, one of padding) against the CPU's token-by-token recurrent decode at every position, and the
// delta-rule states it hands over. The tolerance is the other architectures' emulator prefill tolerance.
TEST(Qwen35MilPrefill, ZeroPointEightBShapeFourLayersMatchTheRecurrentDecode) {
  const models::ModelConfig c =
      models::preset_with_shape("qwen3.5-0.8b", R"({"n_layers": 4, "vocab_size": 4096})", "test");
  auto engine = [&](const std::string& backend) {
    EngineOptions o;
    o.backend = backend;
    o.dtype = WType::kF32;
    o.quiet = true;
    o.prefill_chunk = 256;
    return Engine(models::random_model(c, 36), o);
  };
  Engine emu = engine("emulator"), dec = engine("cpu");
  const int64_t V = c.vocab_size;
  const std::vector<int32_t> prompt = q35_random_prompt(150, V);
  std::vector<float> ref;
  for (size_t t = 0; t < prompt.size(); ++t) {
    const float* lg = dec.decode(prompt[t], static_cast<int64_t>(t));
    ref.insert(ref.end(), lg, lg + V);
  }
  std::vector<float> all;
  emu.prefill(prompt, 0, &all);
  ASSERT_EQ(emu.last_prefill().path, "emulator");
  ASSERT_EQ(emu.last_prefill().bucket, 256);
  ASSERT_EQ(all.size(), ref.size());
  ASSERT_TRUE(q35_all_finite(all));
  double worst = 0, first = 0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    const double err = test::rel_err(all.data() + t * V, ref.data() + t * V, static_cast<size_t>(V));
    EXPECT_LT(err, kQ35EmuTol) << "pos " << t;
    worst = std::max(worst, err);
    if (t == 0) first = err;
  }
  std::printf("[qwen3.5-0.8b 4 layers] 150 tokens: logit error vs the recurrent decode: first token %.2e, worst %.2e\n",
              first, worst);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (!is_deltanet_layer(emu.desc(), l)) continue;
    const auto a = emu.delta_state(l), b = dec.delta_state(l);
    ASSERT_TRUE(q35_all_finite(a)) << "layer " << l;
    const double es = test::rel_err(a.data(), b.data(), a.size());
    EXPECT_LT(es, kQ35EmuTol) << "delta-rule state of layer " << l;
    std::printf("[qwen3.5-0.8b 4 layers] layer %lld: state error %.2e\n", static_cast<long long>(l), es);
  }
}

// The Gated DeltaNet mixer (HF Qwen3_5GatedDeltaNet, token by token: torch_recurrent_gated_delta_rule's recurrence)
// in fp64 on xn [D, n] (row-major, channel-major) and fp16-rounded weights w: out [D, n].
std::vector<double> q35dn_reference(const models::DeltaNetDesc& d, const kern::DeltaNetWeights& w, int64_t D,
                                    const std::vector<float>& xn, int64_t n) {
  const int64_t Hk = d.n_k_heads, Hv = d.n_v_heads, dk = d.k_dim, dv = d.v_dim, K = d.conv_kernel, C = d.conv_dim();
  const int64_t Q = Hk * dk, V = Hv * dv;
  auto mv = [&](const quant::Mat& m, int64_t rows, int64_t t) {  // m [rows, D] times column t of xn
    const std::vector<float> mw = kern::mat_values(m);
    std::vector<double> y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < D; ++c)
        y[static_cast<size_t>(r)] += double{mw[static_cast<size_t>(r * D + c)]} * xn[static_cast<size_t>(c * n + t)];
    return y;
  };
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  std::vector<std::vector<double>> qkv;
  std::vector<double> state(static_cast<size_t>(Hv * dk * dv), 0.0), out(static_cast<size_t>(D * n), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    qkv.push_back(mv(w.qkv, C, t));
    const std::vector<double> z = mv(w.z, V, t), bb = mv(w.b, Hv, t), aa = mv(w.a, Hv, t);
    std::vector<double> mix(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t i = 0; i < K; ++i)
        if (t - (K - 1) + i >= 0)
          acc += double{w.conv[static_cast<size_t>(c * K + i)]} * qkv[static_cast<size_t>(t - (K - 1) + i)][c];
      mix[static_cast<size_t>(c)] = silu(acc);
    }
    for (int64_t h = 0; h < 2 * Hk; ++h) {  // l2 norm of each q and k head, q also * dk^-0.5
      double ss = 0;
      for (int64_t i = 0; i < dk; ++i)
        ss += mix[static_cast<size_t>(h * dk + i)] * mix[static_cast<size_t>(h * dk + i)];
      const double f = 1 / std::sqrt(ss + kern::kDeltaL2Eps) / (h < Hk ? std::sqrt(double(dk)) : 1.0);
      for (int64_t i = 0; i < dk; ++i) mix[static_cast<size_t>(h * dk + i)] *= f;
    }
    std::vector<double> gated(static_cast<size_t>(V));
    for (int64_t h = 0; h < Hv; ++h) {
      const double* q = &mix[static_cast<size_t>(h / (Hv / Hk) * dk)];
      const double* k = &mix[static_cast<size_t>(Q + h / (Hv / Hk) * dk)];
      const double* v = &mix[static_cast<size_t>(2 * Q + h * dv)];
      const double beta = 1 / (1 + std::exp(-bb[static_cast<size_t>(h)]));
      const double x = aa[static_cast<size_t>(h)] + w.dt_bias[static_cast<size_t>(h)];
      const double g = -std::exp(double{w.a_log[static_cast<size_t>(h)]}) * (x > 20 ? x : std::log1p(std::exp(x)));
      double* st = &state[static_cast<size_t>(h * dk * dv)];  // [dk, dv]
      for (int64_t i = 0; i < dk * dv; ++i) st[i] *= std::exp(g);
      std::vector<double> o(static_cast<size_t>(dv), 0.0);
      for (int64_t j = 0; j < dv; ++j) {
        double kv = 0;
        for (int64_t i = 0; i < dk; ++i) kv += st[i * dv + j] * k[i];
        const double delta = (v[j] - kv) * beta;
        for (int64_t i = 0; i < dk; ++i) st[i * dv + j] += k[i] * delta;
        for (int64_t i = 0; i < dk; ++i) o[static_cast<size_t>(j)] += st[i * dv + j] * q[i];
      }
      double ms = 0;
      for (double y : o) ms += y * y / static_cast<double>(dv);
      for (int64_t j = 0; j < dv; ++j)
        gated[static_cast<size_t>(h * dv + j)] = o[static_cast<size_t>(j)] / std::sqrt(ms + d.norm.eps) *
                                                 w.norm[static_cast<size_t>(j)] *
                                                 silu(z[static_cast<size_t>(h * dv + j)]);
    }
    const std::vector<float> ow = kern::mat_values(w.out);
    for (int64_t r = 0; r < D; ++r)
      for (int64_t c = 0; c < V; ++c)
        out[static_cast<size_t>(r * n + t)] +=
            double{ow[static_cast<size_t>(r * V + c)]} * gated[static_cast<size_t>(c)];
  }
  return out;
}

// Issue 36: kern::build_deltanet alone at the Qwen3.5-0.8B mixer shape (16 / 16 heads of 128, conv 4 over 6144
// channels, dim 1024), one chunk of 64 real positions, weights uniform in +-scale (fp16-rounded), against the fp64
// recurrence above. At scale 0.01 the delta rule's outputs are ~1e-6, far below the gated norm's sqrt(eps) = 1e-3
// (eps dominates the norm, as in a model fresh from random init); at 0.1 they are not. The tolerance is fp16's: the
// path from xn to out is ~35 ops, each rounding to fp16 (unit roundoff u = 2^-11, an error of rms u / sqrt(3)), so
// ~3.4u rms, and the largest of the 64K outputs within ~4 of that: 16u.
TEST(Qwen35MilPrefill, DeltaNetMixerAtTheZeroPointEightBShapeIsWithinFp16Rounding) {
  const models::ModelDesc md = models::describe_model(models::preset("qwen3.5-0.8b"));
  const models::DeltaNetDesc* dp = nullptr;
  for (const models::Step& st : md.layers[0].steps)
    if (st.kind == models::StepKind::kLinearAttention) dp = &st.deltanet;
  ASSERT_NE(dp, nullptr);
  const models::DeltaNetDesc& d = *dp;
  const int64_t D = md.dim, S = kern::kDeltaChunk, n = S, C = d.conv_dim(), V = d.n_v_heads * d.v_dim;
  const double tol = 16 * 0x1p-11;
  for (float scale : {0.01f, 0.1f}) {
    std::mt19937 rng(36);
    std::uniform_real_distribution<float> u(-scale, scale), ux(-2.0f, 2.0f);
    std::deque<std::vector<float>> store;
    auto rnd = [&](int64_t k) -> std::span<const float> {
      store.emplace_back(static_cast<size_t>(k));
      for (float& x : store.back()) x = round_fp16(u(rng));
      return store.back();
    };
    auto mat = [&](int64_t rows, int64_t cols) { return quant::Mat::f32(rnd(rows * cols), rows, cols); };
    kern::DeltaNetWeights W;
    W.qkv = mat(C, D), W.z = mat(V, D), W.b = mat(d.n_v_heads, D), W.a = mat(d.n_v_heads, D), W.out = mat(D, V);
    W.conv = rnd(C * d.conv_kernel), W.a_log = rnd(d.n_v_heads), W.dt_bias = rnd(d.n_v_heads);
    W.norm = store.emplace_back(static_cast<size_t>(d.v_dim), 1.0f);
    std::vector<float> xn(static_cast<size_t>(D * S));
    for (float& x : xn) x = round_fp16(ux(rng));
    mil::ProgramBuilder pb;
    auto& b = pb.function("main");
    kern::BlobSet bs;
    mil::Value valid = b.input("valid", kern::act_type(1, S));
    mil::Value x = b.input("xn", kern::act_type(D, S));
    b.output(kern::build_deltanet(b, d, W, bs, x, valid).out);
    auto be = rt::create_backend("emulator");
    auto k = be->compile(pb.build(mil::Dialect::kIos18), bs.weights());
    k.status().throw_if_error();
    auto in = k.value()->make_inputs(0, be->profile()), out = k.value()->make_outputs(0, be->profile());
    const std::vector<float> ones(static_cast<size_t>(S), 1.0f);
    in[0].write(ones.data());
    in[1].write(xn.data());
    rt::Surface* ip[2] = {&in[0], &in[1]};
    rt::Surface* op[1] = {&out[0]};
    be->evaluate(*k.value(), 0, ip, op).throw_if_error();
    std::vector<float> got(static_cast<size_t>(out[0].numel()));
    out[0].read(got.data());
    ASSERT_EQ(got.size(), static_cast<size_t>(D * S));
    ASSERT_TRUE(q35_all_finite(got));
    const std::vector<double> want = q35dn_reference(d, W, D, xn, n);
    double e = 0, m = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      e = std::max(e, std::abs(got[i] - want[i]));
      m = std::max(m, std::abs(want[i]));
    }
    std::printf("[qwen3.5-0.8b mixer] weights +-%.2f: max |out| %.2e, error %.2e of it (tolerance %.2e)\n", scale, m,
                e / m, tol);
    EXPECT_LT(e / m, tol) << "weights +-" << scale;
  }
}

}  // namespace
}  // namespace anelab::infer
