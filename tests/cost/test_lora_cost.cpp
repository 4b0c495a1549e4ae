// `estimate train --lora` (framework/cost/train_cost.h estimate_lora): the LoRA kernels the estimate costs are the
// ones train --lora's engine builds and compiles (train::kernel_lora_shape, make_kernel_lora_engine), their adapter
// bands are in the costed MIL (the products' flops and the bands' bytes), the estimate grows with the rank, and static
// over the compile budget is flagged for a 24-layer shape.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "framework/cost/train_cost.h"
#include "framework/kernels/train.h"
#include "models/arch/arch.h"
#include "models/presets.h"
#include "train/kernel_engine.h"
#include "train/lora.h"
#include "train/params.h"

namespace anelab::cost {
namespace {

train::LoraConfig lora_cost_config(int64_t rank, const std::string& targets = "q,k,v,o,gate,up,down") {
  train::LoraConfig lc;
  lc.rank = rank, lc.alpha = 16;
  lc.targets = train::parse_lora_targets(targets);
  return lc;
}

// The estimate's model of config c at T tokens with LoRA lc (as estimate train --lora builds it).
TrainModel lora_cost_model(const models::ModelConfig& c, const train::LoraConfig& lc, int64_t T) {
  TrainModel m;
  m.shape = train::kernel_lora_shape(train::kernel_train_shape(models::describe_model(c), T), lc);
  m.n_layers = c.n_layers, m.vocab = c.vocab_size;
  return m;
}

models::ModelConfig lora_cost_qwen05() {
  return models::preset_with_shape("qwen2.5-0.5b", R"({"qkv_bias": false})", "test");
}

constexpr auto kLoraCostStatic = kern::Strategy::kStatic;
constexpr auto kLoraCostDynamic = kern::Strategy::kDynamic;

// The kernels the estimate costs are the engine's: the nine kinds in the engine's order, each run once per layer, and
// as many compiles as make_kernel_lora_engine asks for before its first step (static 2 + 7·L, dynamic 9); the adapter
// bands of the costed forward kernels hold exactly the engine's adapters (LoraLayout::total).
TEST(LoraCost, KernelsAreTheEngines) {
  const models::ModelConfig c = models::preset("stories260k");
  const train::LoraConfig lc = lora_cost_config(4);
  const train::ParamLayout layout(c);
  const train::LoraLayout ll(c, lc);
  const std::vector<float> base(size_t(layout.total()), 0.f);
  const TrainModel m = lora_cost_model(c, lc, 64);
  const int64_t L = c.n_layers;
  for (auto st : {kLoraCostStatic, kLoraCostDynamic}) {
    train::KernelEngineOptions o;
    o.strategy = kern::strategy_name(st), o.seq_len = 64;
    const auto engine = train::make_kernel_lora_engine(o, layout, base.data(), ll);
    const StepCost sc = estimate_train(m, st, chip("m4"));
    EXPECT_EQ(sc.compiles_once, engine->compiles_needed()) << o.strategy;
    EXPECT_EQ(sc.compiles_once, st == kLoraCostStatic ? 2 + 7 * L : 9) << o.strategy;
    ASSERT_EQ(sc.kernels.size(), kern::kAllKernelKinds.size());
    for (size_t i = 0; i < sc.kernels.size(); ++i) {
      EXPECT_EQ(sc.kernels[i].name, kern::kernel_name(kern::kAllKernelKinds[i])) << o.strategy;
      EXPECT_EQ(sc.kernels[i].calls, L) << o.strategy;
    }
    EXPECT_EQ(sc.adapter_params, double(ll.total())) << o.strategy;
  }
}

// The adapters' products are in the costed MIL: each weight-bearing LoRA kernel has, over the same kernel without
// adapters, at least the flops of its adapted projections' low-rank products (forward B(A x), backward Aᵀ(Bᵀ dy):
// 2·S·r·(in + out) per projection) and its input surface carries their bands (r·(in + out) fp16 values each).
TEST(LoraCost, BandsAreInTheCostedMil) {
  const models::ModelConfig c = models::preset("stories110m");
  const int64_t r = 8, S = 256, D = c.dim, H = c.hidden_dim, QD = c.q_dim(), KVD = c.kv_dim();
  const train::LoraConfig lc = lora_cost_config(r);
  TrainModel lora = lora_cost_model(c, lc, S), full = lora;
  full.shape.lora_rank = 0, full.shape.lora_scale = 0, full.shape.lora_targets.clear();
  auto pr = [&](int64_t in, int64_t out) { return double(r * (in + out)); };  // one projection's A and B
  const double attn = pr(D, QD) + 2 * pr(D, KVD) + pr(QD, D), ffn = 2 * pr(D, H) + pr(H, D);
  const std::vector<std::pair<const char*, double>> per_kernel = {
      {"attn_fwd", attn}, {"ffn_fwd", ffn}, {"ffn_bwd", ffn}, {"wo_bwd", pr(QD, D)}, {"qkv_bwd", attn - pr(QD, D)},
      {"sdpa_bwd1", 0},   {"sdpa_bwd2", 0}};
  for (auto st : {kLoraCostStatic, kLoraCostDynamic}) {
    const StepCost a = estimate_train(lora, st, chip("m4")), b = estimate_train(full, st, chip("m4"));
    for (const auto& [name, params] : per_kernel) {
      const KernelRow *ka = nullptr, *kb = nullptr;
      for (size_t i = 0; i < a.kernels.size(); ++i)
        if (a.kernels[i].name == name) ka = &a.kernels[i], kb = &b.kernels[i];
      ASSERT_NE(ka, nullptr) << name;
      const double dflops = ka->cost.flops - kb->cost.flops, dio = ka->cost.io_bytes - kb->cost.io_bytes;
      std::printf("%s %s: +%.4g flops (products %.4g), +%.4g io bytes (bands %.4g)\n", kern::strategy_name(st), name,
                  dflops, 2 * double(S) * params, dio, 2 * params);
      if (params == 0) {
        EXPECT_EQ(dflops, 0.0) << name;
        continue;
      }
      EXPECT_GE(dflops, 2 * double(S) * params) << kern::strategy_name(st) << " " << name;
      EXPECT_GE(dio, 2 * params) << kern::strategy_name(st) << " " << name;
    }
    EXPECT_GT(a.ane_ms, b.ane_ms) << kern::strategy_name(st);
  }
}

// More rank, more work: the ANE time, the staging and the adapters grow with r on both strategies; the compiles do not.
TEST(LoraCost, MonotoneInRank) {
  const models::ModelConfig c = models::preset("stories110m");
  for (auto st : {kLoraCostStatic, kLoraCostDynamic}) {
    StepCost prev;
    for (int64_t r : {4, 8, 16, 32, 64}) {
      const StepCost s = estimate_train(lora_cost_model(c, lora_cost_config(r), 256), st, chip("m4"));
      std::printf("%s r=%lld: %.2f ms/step (ANE %.2f, staging %.2f)\n", kern::strategy_name(st),
                  static_cast<long long>(r), s.ms_per_step(), s.ane_ms, s.staging_ms);
      if (r > 4) {
        EXPECT_GT(s.ane_ms, prev.ane_ms) << r;
        EXPECT_GT(s.staging_ms, prev.staging_ms) << r;
        EXPECT_GT(s.adapter_params, prev.adapter_params) << r;
        EXPECT_GE(s.ms_per_step(), prev.ms_per_step()) << r;
        EXPECT_EQ(s.compiles_once, prev.compiles_once) << r;
      }
      prev = s;
    }
  }
}

// The compile budget: static's 2 + 7·L (+ the ANE self-check) against the profile's 100. Stories110M's 12 layers fit
// (87); the Qwen2.5-0.5B shape's 24 do not (171): flagged, and dynamic picked whatever the step times.
TEST(LoraCost, StaticOverBudgetIsFlagged) {
  const LoraEstimate small =
      estimate_lora(lora_cost_model(models::preset("stories110m"), lora_cost_config(8), 256), chip("m4"));
  EXPECT_EQ(small.budget, 100);
  EXPECT_EQ(small.static_need, 2 + 7 * 12 + 1);
  EXPECT_TRUE(small.static_fits());
  // Where static fits and is faster per step, its compiles decide by the run's length: the pick turns to static at
  // the break-even step count and not one step before.
  const int64_t even = small.static_break_even();
  ASSERT_GT(even, 1);
  for (int64_t n : {even - 1, even}) {
    TrainModel m = lora_cost_model(models::preset("stories110m"), lora_cost_config(8), 256);
    m.steps = n;
    EXPECT_EQ(estimate_lora(m, chip("m4")).pick(), n == even ? kLoraCostStatic : kLoraCostDynamic) << n;
  }
  const models::ModelConfig q = lora_cost_qwen05();
  ASSERT_EQ(q.n_layers, 24);
  for (const char* dev : {"m4", "m1"}) {
    TrainModel m = lora_cost_model(q, lora_cost_config(8), 256);
    m.steps = 1000000;  // compiles amortised to nothing: the budget alone decides
    const LoraEstimate e = estimate_lora(m, chip(dev));
    EXPECT_EQ(e.static_step.compiles_once, 2 + 7 * 24) << dev;
    EXPECT_EQ(e.static_need, 171) << dev;
    EXPECT_FALSE(e.static_fits()) << dev;
    EXPECT_EQ(e.pick(), kLoraCostDynamic) << dev;
    EXPECT_EQ(e.dynamic_step.compiles_once, 9) << dev;
  }
  TrainModel none = lora_cost_model(q, lora_cost_config(8), 256);  // a shape without LoRA is refused
  none.shape.lora_rank = 0;
  EXPECT_THROW(estimate_lora(none, chip("m4")), std::exception);
}

// The host work LoRA removes: no dW and no dE on the worker (the adapters' gradients instead: 4·S flops per adapter
// parameter), Adam over the adapters only (28 bytes each, once per update); the classifier's logits and dh stay.
TEST(LoraCost, HostWorkLoraRemoves) {
  const models::ModelConfig c = models::preset("stories110m");
  const Chip& m4 = chip("m4");
  TrainModel lora = lora_cost_model(c, lora_cost_config(8), 256), full = lora;
  full.shape.lora_rank = 0, full.shape.lora_scale = 0, full.shape.lora_targets.clear();
  for (auto st : {kLoraCostStatic, kLoraCostDynamic}) {
    const StepCost a = estimate_train(lora, st, m4), b = estimate_train(full, st, m4);
    EXPECT_EQ(a.cls_ms, b.cls_ms);
    EXPECT_NEAR(a.dw_ms, 4 * 256 * a.adapter_params / (m4.host_gflops * 1e9) * 1e3, 1e-9 * a.dw_ms);
    EXPECT_LT(a.dw_ms, 0.1 * b.dw_ms);
    EXPECT_NEAR(a.adam_ms, 28 * a.adapter_params / (m4.host_gbps * 1e9) * 1e3 / lora.accum_steps, 1e-9 * a.adam_ms);
    EXPECT_GT(b.adam_ms, 50 * a.adam_ms);
  }
}

}  // namespace
}  // namespace anelab::cost
