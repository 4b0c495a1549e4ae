// anelab estimate train|infer|mil, anelab estimate --calibrate: what a training step, a prefill / decode or a MIL
// program costs on an Apple chip, from the cost model of framework/cost (docs/estimate.md). Thin: builds the
// programs (the training kernels, the MIL prefill's layer kernels, a parsed file), asks the model, prints.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/cost/train_cost.h"
#include "framework/mil/parser.h"
#include "infer/cpu_math.h"
#include "infer/prefill_mil.h"
#include "models/arch/arch.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "train/config.h"
#include "train/kernel_engine.h"
#include "train/lora.h"
#include "train/params.h"

namespace anelab::cli {

namespace {

using nlohmann::json;

struct EstimateOptions {
  std::string shape;  // train: the preset's config fields replaced (train --preset NAME --shape JSON)
  std::string preset, model, program, device = "m4", strategy = "dynamic", calibrate;
  std::string save;         // --calibrate: write the refit chip here (anelab.chip/2)
  std::string device_file;  // a chip file written by --save, instead of a built-in --device
  bool device_given = false;
  int64_t seq = 256;      // training tokens per sequence (maderix's SEQ)
  int64_t cls_vocab = 0;  // classifier rows (0: the model's vocabulary, as anelab's trainer computes it)
  int accum = 10;         // steps per update
  // --lora: both strategies side by side (train --lora's spellings and checks: train/config.h validate_lora)
  bool lora = false;
  int64_t lora_rank = train::TrainConfig{}.lora_rank;
  std::string lora_targets = train::TrainConfig{}.lora_targets;
  int64_t steps = train::TrainConfig{}.steps;  // --lora: the compiles once amortised over the run's steps
  std::vector<int64_t> buckets;
  bool json = false;
};

json program_json(const cost::ProgramCost& p) {
  return {{"ms", p.ms},
          {"compute_ms", p.compute_ms},
          {"memory_ms", p.memory_ms},
          {"fill_ms", p.fill_ms},
          {"drain_ms", p.drain_ms},
          {"dispatch_ms", p.dispatch_ms},
          {"gflop", p.flops * 1e-9},
          {"tflops", p.tflops()},
          {"weight_mb", p.weight_bytes / 1048576.0},
          {"io_mb", p.io_bytes / 1048576.0},
          {"spills", p.spills},
          {"int8", p.int8}};
}

void print_program_row(const std::string& name, const cost::ProgramCost& p, int64_t calls) {
  std::printf(
      "  %-12s %5lld x %8.3f ms = %8.2f ms  (compute %.3f, memory %.3f, %6.2f GFLOP, %5.2f TFLOPS, weights %.1f "
      "MB%s)\n",
      name.c_str(), static_cast<long long>(calls), p.ms, p.ms * double(calls), p.compute_ms, p.memory_ms,
      p.flops * 1e-9, p.tflops(), p.weight_bytes / 1048576.0, p.spills ? ", spills" : "");
}

// The chip to estimate on: the --device-file's parameters, else the built-in --device.
cost::Chip chip_of(const EstimateOptions& o) {
  if (o.device_file.empty()) return cost::chip(o.device);
  ANELAB_CHECK(!o.device_given, "estimate", "give --device or --device-file, not both");
  return cost::load_chip(o.device_file);
}

const models::ModelConfig& preset_or_model(const EstimateOptions& o, models::Model& keep) {
  ANELAB_CHECK(o.preset.empty() != o.model.empty(), "estimate", "give exactly one of --preset NAME or --model FILE");
  ANELAB_CHECK(o.shape.empty() || !o.preset.empty(), "estimate", "--shape goes with --preset NAME");
  if (!o.shape.empty()) {
    keep.config = models::preset_with_shape(o.preset, o.shape, "estimate");
    return keep.config;
  }
  if (!o.preset.empty()) return models::preset(o.preset);
  keep = models::load_any_model(o.model);
  return keep.config;
}

// A training step's kernels and terms as JSON (estimate train's fields).
json estimate_step_json(const cost::StepCost& s) {
  std::vector<const cost::KernelRow*> by_cost;
  for (const auto& k : s.kernels) by_cost.push_back(&k);
  std::sort(by_cost.begin(), by_cost.end(), [](auto* a, auto* b) { return a->total_ms() > b->total_ms(); });
  json ks = json::array();
  for (const auto& k : s.kernels) {
    json j = program_json(k.cost);
    j["name"] = k.name, j["calls"] = k.calls, j["total_ms"] = k.total_ms(),
    j["staging_mb"] = k.staging_bytes / 1048576.0;
    ks.push_back(j);
  }
  return {{"ms_per_step", s.ms_per_step()},
          {"ms_per_step_with_compile", s.ms_per_step_with_compile()},
          {"ane_ms", s.ane_ms},
          {"staging_ms", s.staging_ms},
          {"host_ms", s.host_ms()},
          {"classifier_ms", s.cls_ms},
          {"dw_ms", s.dw_ms},
          {"dw_exposed_ms", s.dw_exposed_ms},
          {"adam_ms", s.adam_ms},
          {"compile_ms_per_step", s.compile_ms},
          {"largest", by_cost.front()->name},
          {"kernels", ks}};
}

// `estimate train --lora`: the LoRA kernels of both strategies side by side, full training of the shape for
// reference, and which to pick.
void run_train_lora(const EstimateOptions& o, const models::ModelConfig& c, cost::TrainModel m,
                    const cost::Chip& chip) {
  train::TrainConfig tc;  // train --lora's checks, in one place
  tc.lora = true, tc.lora_rank = o.lora_rank, tc.lora_targets = o.lora_targets;
  for (const char* st : {"static", "dynamic"}) tc.strategy = st, train::validate_lora(tc);
  train::LoraConfig lc;
  lc.rank = tc.lora_rank, lc.alpha = tc.lora_alpha, lc.targets = train::parse_lora_targets(tc.lora_targets);
  const train::LoraLayout layout(c, lc);  // throws when the model has none of the targets
  m.shape = train::kernel_lora_shape(m.shape, lc);
  m.steps = o.steps;
  const cost::LoraEstimate e = cost::estimate_lora(m, chip);
  const cost::StepCost& st = e.static_step;
  const cost::StepCost& dy = e.dynamic_step;
  const bool pick_static = e.pick() == kern::Strategy::kStatic;
  const std::string model = o.preset.empty() ? o.model : o.preset;
  char rec[320];
  std::snprintf(rec, sizeof rec, "static: %s (%lld of %d compiles), %.1f ms/step; dynamic: %.1f ms/step; pick %s",
                e.static_fits() ? "fits the budget" : "over the budget", static_cast<long long>(e.static_need),
                e.budget, st.ms_per_step_with_compile(), dy.ms_per_step_with_compile(),
                pick_static ? "static" : "dynamic");
  const int64_t even = e.static_break_even();
  std::string why;  // what would change the pick
  if (e.static_fits() && even > 0)
    why = cat(" (static costs no more than dynamic from ", even, " steps on: --steps)");
  else if (!e.static_fits() && even > 0)
    why = " (static would be faster per step: it needs a larger compile budget)";
  if (o.json) {
    auto side = [&](const cost::StepCost& s, const cost::StepCost& full) {
      json j = estimate_step_json(s);
      j["compiles"] = s.compiles_once, j["once_ms"] = s.once_ms, j["adapter_staging_mb"] = s.adapter_bytes / 1048576.0;
      j["full_ms_per_step_with_compile"] = full.ms_per_step_with_compile();
      j["vs_full"] = s.ms_per_step_with_compile() / full.ms_per_step_with_compile();
      j["removed_dw_ms"] = full.dw_ms, j["removed_adam_ms"] = full.adam_ms;  // full training's host work LoRA skips
      return j;
    };
    json out{
        {"device", chip.name},
        {"model", model},
        {"lora",
         {{"rank", lc.rank}, {"targets", train::lora_targets_text(lc.targets)}, {"adapter_params", st.adapter_params}}},
        {"shape", m.shape.str()},
        {"layers", m.n_layers},
        {"steps", m.steps},
        {"accum", m.accum_steps},
        {"compile_budget", e.budget},
        {"static_compiles_needed", e.static_need},
        {"static_fits", e.static_fits()},
        {"pick", pick_static ? "static" : "dynamic"},
        {"recommendation", rec + why},
        {"static_break_even_steps", even},
        {"static", side(st, e.full_static)},
        {"dynamic", side(dy, e.full_dynamic)}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("estimate train --lora: %s, rank %lld on %s (%.2f M adapter parameters), %s, %lld layers, on %s\n",
              model.c_str(), static_cast<long long>(lc.rank), train::lora_targets_text(lc.targets).c_str(),
              st.adapter_params * 1e-6, m.shape.str().c_str(), static_cast<long long>(m.n_layers),
              chip.description.c_str());
  std::printf("  %-40s %-30s %s\n", "", "static", "dynamic");
  for (size_t i = 0; i < st.kernels.size(); ++i) {
    const cost::KernelRow &a = st.kernels[i], &b = dy.kernels[i];
    char l[64], r[64];
    std::snprintf(l, sizeof l, "%lld x %.3f = %.2f ms", static_cast<long long>(a.calls), a.cost.ms, a.total_ms());
    std::snprintf(r, sizeof r, "%lld x %.3f = %.2f ms", static_cast<long long>(b.calls), b.cost.ms, b.total_ms());
    std::printf("  %-40s %-30s %s\n", a.name.c_str(), l, r);
  }
  auto line = [](const char* what, double a, double b, const char* unit) {
    char l[64], r[64];
    std::snprintf(l, sizeof l, "%.1f %s", a, unit);
    std::snprintf(r, sizeof r, "%.1f %s", b, unit);
    std::printf("  %-40s %-30s %s\n", what, l, r);
  };
  line("ANE", st.ane_ms, dy.ane_ms, "ms");
  char what[96];
  std::snprintf(what, sizeof what, "staging (adapters %.1f MB of it)", st.adapter_bytes / 1048576.0);
  line(what, st.staging_ms, dy.staging_ms, "ms");
  line("host: classifier (logits, dh)", st.cls_ms, dy.cls_ms, "ms");
  line("host: adapter gradients (exposed)", st.dw_exposed_ms, dy.dw_exposed_ms, "ms");
  line("host: Adam of the adapters", st.adam_ms, dy.adam_ms, "ms");
  line("= per step", st.ms_per_step(), dy.ms_per_step(), "ms");
  char l2[64], r2[64];  // full training's host work that LoRA does not do
  std::snprintf(l2, sizeof l2, "%.1f + %.1f ms", e.full_static.dw_ms, e.full_static.adam_ms);
  std::snprintf(r2, sizeof r2, "%.1f + %.1f ms", e.full_dynamic.dw_ms, e.full_dynamic.adam_ms);
  std::printf("  %-40s %-30s %s\n", "not done: full training's dW + dE, Adam", l2, r2);
  char l[64], r[64];
  std::snprintf(l, sizeof l, "%lld (2 + 7 x %lld)", static_cast<long long>(st.compiles_once),
                static_cast<long long>(m.n_layers));
  std::snprintf(r, sizeof r, "%lld", static_cast<long long>(dy.compiles_once));
  std::printf("  %-40s %-30s %s\n", "compiles, once", l, r);
  line("before step 1 (compiles, base staged)", st.once_ms, dy.once_ms, "ms");
  std::snprintf(what, sizeof what, "per step, once-costs over %lld steps", static_cast<long long>(m.steps));
  line(what, st.ms_per_step_with_compile(), dy.ms_per_step_with_compile(), "ms");
  std::snprintf(what, sizeof what, "full training, recompiles over accum %d", m.accum_steps);
  line(what, e.full_static.ms_per_step_with_compile(), e.full_dynamic.ms_per_step_with_compile(), "ms");
  std::snprintf(l, sizeof l, "%.2fx", st.ms_per_step_with_compile() / e.full_static.ms_per_step_with_compile());
  std::snprintf(r, sizeof r, "%.2fx", dy.ms_per_step_with_compile() / e.full_dynamic.ms_per_step_with_compile());
  std::printf("  %-40s %-30s %s\n", "LoRA / full training", l, r);
  std::printf("  %s%s\n", rec, why.c_str());
}

void run_train(const EstimateOptions& o) {
  ANELAB_CHECK(o.strategy == "static" || o.strategy == "dynamic", "estimate", "--strategy '", o.strategy,
               "' (use static or dynamic)");
  models::Model keep;
  const models::ModelConfig& c = preset_or_model(o, keep);
  train::check_trainable(c);
  cost::TrainModel m;
  m.shape = train::kernel_train_shape(models::describe_model(c), o.seq);
  m.n_layers = c.n_layers;
  m.vocab = c.vocab_size;
  ANELAB_CHECK(o.cls_vocab <= c.vocab_size, "estimate", "--cls-vocab ", o.cls_vocab, " exceeds the vocabulary (",
               c.vocab_size, ")");
  m.cls_vocab = o.cls_vocab;
  m.accum_steps = o.accum;
  const auto strat = o.strategy == "static" ? kern::Strategy::kStatic : kern::Strategy::kDynamic;
  const cost::Chip chip = chip_of(o);
  if (o.lora) return run_train_lora(o, c, m, chip);
  const cost::StepCost s = cost::estimate_train(m, strat, chip);
  std::vector<const cost::KernelRow*> by_cost;
  for (const auto& k : s.kernels) by_cost.push_back(&k);
  std::sort(by_cost.begin(), by_cost.end(), [](auto* a, auto* b) { return a->total_ms() > b->total_ms(); });
  if (o.json) {
    json out{{"device", chip.name},
             {"model", o.preset.empty() ? o.model : o.preset},
             {"strategy", o.strategy},
             {"shape", m.shape.str()},
             {"layers", m.n_layers}};
    out.update(estimate_step_json(s));
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("estimate train: %s, %s strategy, %s, %lld layers, on %s\n",
              (o.preset.empty() ? o.model : o.preset).c_str(), o.strategy.c_str(), m.shape.str().c_str(),
              static_cast<long long>(m.n_layers), chip.description.c_str());
  for (const auto* k : by_cost) print_program_row(k->name, k->cost, k->calls);
  std::printf(
      "  ANE %.1f ms + staging %.1f ms + host %.1f ms (classifier %.1f, worker dW + dE %.1f of which %.1f exposed, "
      "Adam %.1f)"
      " = %.1f ms/step",
      s.ane_ms, s.staging_ms, s.host_ms(), s.cls_ms, s.dw_ms, s.dw_exposed_ms, s.adam_ms, s.ms_per_step());
  if (strat == kern::Strategy::kStatic)
    std::printf("; + recompiles %.1f ms/step (%d steps per update) = %.1f ms/step", s.compile_ms, o.accum,
                s.ms_per_step_with_compile());
  std::printf("\n  largest: %s (%.1f ms), %s (%.1f ms)\n", by_cost[0]->name.c_str(), by_cost[0]->total_ms(),
              by_cost[1]->name.c_str(), by_cost[1]->total_ms());
}

// The MIL prefill's kernel of layer l of md at bucket S (infer::build_layer_kernel, or build_deltanet_layer_kernel for
// a linear-attention layer), with zero weights of the shapes its steps give them (the cost reads shapes only).
cost::ProgramCost prefill_layer_cost(const models::ModelDesc& md, int64_t l, int64_t S, const cost::Chip& chip) {
  const int64_t D = md.dim;
  const models::LayerDesc& ld = md.layers.at(size_t(l));
  int64_t big = 0, wide = D;  // the largest matrix and vector
  for (const models::Step& st : ld.steps) {
    const auto& a = st.attn;
    const auto& dn = st.deltanet;
    const int64_t qr = a.n_heads * a.head_dim * (a.output_gate ? 2 : 1), kvd = a.n_kv_heads * a.head_dim;
    const int64_t C = dn.conv_dim(), V = dn.n_v_heads * dn.v_dim;
    for (int64_t r : {qr, kvd, st.ffn.hidden, C, V, dn.n_v_heads}) big = std::max(big, r * D), wide = std::max(wide, r);
    big = std::max(big, C * dn.conv_kernel);
    wide = std::max(wide, a.head_dim);
  }
  const std::vector<float> zeros(size_t(big), 0.f), ones(size_t(wide), 1.f);
  auto mat = [&](int64_t r, int64_t cc) {
    infer::Mat m;
    m.type = infer::WType::kF32;
    m.rows = r;
    m.cols = cc;
    m.data = zeros.data();
    return m;
  };
  auto vec = [&](int64_t n) { return std::span<const float>(ones.data(), size_t(n)); };
  infer::LayerWeights L;
  kern::DeltaNetWeights W;
  for (const models::Step& st : ld.steps) {
    switch (st.kind) {
      case models::StepKind::kAttention: {
        const auto& a = st.attn;
        const int64_t QD = a.n_heads * a.head_dim, QR = a.output_gate ? 2 * QD : QD, KVD = a.n_kv_heads * a.head_dim;
        L.wq = mat(QR, D), L.wk = mat(KVD, D), L.wv = mat(KVD, D), L.wo = mat(D, QD);
        if (!a.bq.empty()) L.bq = vec(QR);
        if (!a.bk.empty()) L.bk = vec(KVD);
        if (!a.bv.empty()) L.bv = vec(KVD);
        if (!a.bo.empty()) L.bo = vec(D);
        break;
      }
      case models::StepKind::kFfn: {
        const auto& f = st.ffn;
        L.w1 = mat(f.hidden, D), L.w2 = mat(D, f.hidden);
        if (!f.w_up.empty()) L.w3 = mat(f.hidden, D);
        if (!f.b_in.empty()) L.b1 = vec(f.hidden);
        if (!f.b_out.empty()) L.b2 = vec(D);
        break;
      }
      case models::StepKind::kLinearAttention: {
        const auto& dn = st.deltanet;
        const int64_t C = dn.conv_dim(), V = dn.n_v_heads * dn.v_dim, Hv = dn.n_v_heads;
        W.qkv = mat(C, D), W.z = mat(V, D), W.b = mat(Hv, D), W.a = mat(Hv, D), W.out = mat(D, V);
        W.conv = std::span<const float>(zeros.data(), size_t(C * dn.conv_kernel));
        W.a_log = std::span<const float>(zeros.data(), size_t(Hv));
        W.dt_bias = std::span<const float>(zeros.data(), size_t(Hv));
        W.norm = vec(dn.v_dim);
        break;
      }
    }
    for (const models::StepNorm& n : models::step_norms(st, D)) {  // every norm of the layer by its description name
      L.set_norm(n.norm->weight, vec(n.width));
      if (!n.norm->bias.empty()) L.set_norm(n.norm->bias, vec(n.width));
    }
  }
  const auto& prof = rt::device_profile(chip.family);
  const infer::LayerKernelSource src = infer::is_deltanet_layer(md, l)
                                           ? infer::build_deltanet_layer_kernel(md, L, W, S, prof.dialect, l)
                                           : infer::build_layer_kernel(md, L, S, prof.dialect, l);
  return cost::program_cost(src.program, chip);
}

// The kinds of layer kernel of md: layers whose steps have the same kinds and shapes build programs of the same cost,
// so each kind is costed once (at its first layer) and counted. The name says what the kernel runs: "deltanet",
// "attention", "sliding attention" (a window), with " #2" ... when two kinds of one name differ in their shapes.
struct LayerKind {
  std::string name;
  int64_t first = 0, count = 0;
};
std::vector<LayerKind> layer_kinds(const models::ModelDesc& md) {
  std::vector<LayerKind> kinds;
  std::vector<std::string> keys;
  for (int64_t l = 0; l < static_cast<int64_t>(md.layers.size()); ++l) {
    std::string name, key;
    for (const models::Step& st : md.layers[size_t(l)].steps) {
      const auto& a = st.attn;
      const auto& dn = st.deltanet;
      switch (st.kind) {
        case models::StepKind::kAttention:
          name = a.window > 0 ? "sliding attention" : "attention";
          key += cat("attention ", a.n_heads, "x", a.head_dim, " kv ", a.n_kv_heads, " window ", a.window, " gate ",
                     a.output_gate, " qk-norm ", a.q_norm.has_value(), ";");
          break;
        case models::StepKind::kFfn:
          key += cat("ffn ", int(st.ffn.activation), " ", st.ffn.hidden, " bias ", !st.ffn.b_in.empty(), ";");
          break;
        case models::StepKind::kLinearAttention:
          name = "deltanet";
          key += cat("deltanet ", dn.n_k_heads, "x", dn.k_dim, " ", dn.n_v_heads, "x", dn.v_dim, " conv ",
                     dn.conv_kernel, ";");
          break;
      }
      key += cat("post-norm ", st.post_norm.has_value(), ";");
    }
    if (name.empty()) name = "layer";
    const auto it = std::find(keys.begin(), keys.end(), key);
    if (it != keys.end()) {
      ++kinds[size_t(it - keys.begin())].count;
      continue;
    }
    int64_t same = 1;
    for (const LayerKind& k : kinds) same += k.name.rfind(name, 0) == 0;
    kinds.push_back({same > 1 ? cat(name, " #", same) : name, l, 1});
    keys.push_back(key);
  }
  return kinds;
}

// Each kind of layer kernel of c costed at every bucket, its decode program at decode_bucket.
std::vector<cost::LayerKernelCost> prefill_kernel_costs(const models::ModelConfig& c,
                                                        const std::vector<int64_t>& buckets, int64_t decode_bucket,
                                                        const cost::Chip& chip) {
  const models::ModelDesc md = models::describe_model(c);
  std::vector<cost::LayerKernelCost> out;
  for (const LayerKind& k : layer_kinds(md)) {
    cost::LayerKernelCost kc;
    kc.name = k.name;
    kc.count = k.count;
    for (int64_t S : buckets) kc.prefill.push_back(prefill_layer_cost(md, k.first, S, chip));
    kc.decode =
        decode_bucket == buckets.front() ? kc.prefill.front() : prefill_layer_cost(md, k.first, decode_bucket, chip);
    out.push_back(std::move(kc));
  }
  return out;
}

void run_infer(const EstimateOptions& o) {
  models::Model keep;
  const models::ModelConfig& c = preset_or_model(o, keep);
  const cost::Chip chip = chip_of(o);
  std::vector<int64_t> buckets = o.buckets;
  if (buckets.empty())
    for (int64_t S = 64; S <= std::min<int64_t>(c.max_seq_len, 2048); S *= 2) buckets.push_back(S);
  for (int64_t S : buckets)
    ANELAB_CHECK(S > 0 && S == infer::prefill_bucket(S, c.max_seq_len), "estimate", "--bucket ", S,
                 " is not a prefill bucket of this model (64 x 2^k up to the context ", c.max_seq_len, ")");
  const std::vector<cost::LayerKernelCost> kernels = prefill_kernel_costs(c, buckets, buckets.front(), chip);
  const cost::InferCost ic = cost::infer_cost(buckets, kernels, c.dim, c.vocab_size, chip);
  if (o.json) {
    json b = json::array();
    for (size_t i = 0; i < ic.prefill.size(); ++i) {
      json ks = json::array();
      for (size_t k = 0; k < kernels.size(); ++k) {
        json j = program_json(kernels[k].prefill[i]);
        j["name"] = kernels[k].name, j["count"] = kernels[k].count, j["total_ms"] = ic.prefill[i].kernel_ms[k];
        ks.push_back(j);
      }
      b.push_back({{"tokens", ic.prefill[i].tokens},
                   {"layers_ms", ic.prefill[i].layers_ms},
                   {"classifier_ms", ic.prefill[i].classifier_ms},
                   {"prefill_ms", ic.prefill[i].ms},
                   {"tok_per_s", ic.prefill[i].tok_per_s},
                   {"kernels", ks}});
    }
    json out{{"device", chip.name},       {"model", o.preset.empty() ? o.model : o.preset},
             {"layers", c.n_layers},      {"prefill", b},
             {"decode_ms", ic.decode_ms}, {"decode_tok_per_s", ic.decode_tok_per_s}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("estimate infer: %s (%lld layers, D=%lld, H=%lld) on %s\n",
              (o.preset.empty() ? o.model : o.preset).c_str(), static_cast<long long>(c.n_layers),
              static_cast<long long>(c.dim), static_cast<long long>(c.hidden_dim), chip.description.c_str());
  size_t worst = 0;
  for (size_t i = 0; i < ic.prefill.size(); ++i) {
    const auto& b = ic.prefill[i];
    std::printf("  prefill S=%-5lld all %8.2f ms  %8.0f tok/s  (", static_cast<long long>(b.tokens), b.ms, b.tok_per_s);
    for (size_t k = 0; k < kernels.size(); ++k) {
      const cost::ProgramCost& p = kernels[k].prefill[i];
      std::printf("%s %lld x %.3f ms%s, ", kernels[k].name.c_str(), static_cast<long long>(kernels[k].count), p.ms,
                  p.spills ? " (spills)" : "");
    }
    std::printf("classifier %.3f ms)\n", b.classifier_ms);
    if (b.ms > ic.prefill[worst].ms) worst = i;
  }
  std::printf("  decode (one layer program per token at S=%lld): %.2f ms/token, %.1f tok/s\n",
              static_cast<long long>(buckets.front()), ic.decode_ms, ic.decode_tok_per_s);
  size_t big = 0;  // the kernel that costs the most of the worst bucket
  for (size_t k = 0; k < kernels.size(); ++k)
    if (ic.prefill[worst].kernel_ms[k] > ic.prefill[worst].kernel_ms[big]) big = k;
  const cost::ProgramCost& layer = kernels[big].prefill[worst];
  std::printf(
      "  largest: the S=%lld bucket, %.1f ms for %lld layers; its %s kernel %.1f ms (compute %.3f, memory %.3f "
      "per layer)\n",
      static_cast<long long>(ic.prefill[worst].tokens), ic.prefill[worst].ms, static_cast<long long>(c.n_layers),
      kernels[big].name.c_str(), ic.prefill[worst].kernel_ms[big], layer.compute_ms, layer.memory_ms);
  std::vector<const cost::OpCost*> ops;
  for (const auto& op : layer.ops) ops.push_back(&op);
  std::sort(ops.begin(), ops.end(), [](auto* a, auto* b) { return a->ms > b->ms; });
  std::printf("  its largest ops (compute time):");
  for (size_t i = 0; i < std::min<size_t>(ops.size(), 4); ++i)
    std::printf("%s %s '%s' %.3f ms", i ? "," : "", ops[i]->op.c_str(), ops[i]->name.c_str(), ops[i]->ms);
  std::printf("%s\n", layer.spills ? "; the intermediates exceed the SRAM: the layer spills" : "");
}

void run_mil(const EstimateOptions& o) {
  const mil::Program p = mil::parse(read_file_text(o.program), o.program);
  const cost::Chip chip = chip_of(o);
  json fns = json::array();
  for (const auto& f : p.functions) {
    const cost::ProgramCost pc = cost::program_cost(p, chip, f.name);
    const cost::FusionCost fc = cost::fusion_cost(p, chip, f.name);
    if (o.json) {
      json j = program_json(pc);
      j["function"] = f.name, j["split_ms"] = fc.split_ms;
      json ops = json::array();
      for (const auto& op : pc.ops)
        ops.push_back({{"op", op.op},
                       {"name", op.name},
                       {"class", cost::op_class_name(op.cls)},
                       {"ms", op.ms},
                       {"gflop", op.flops * 1e-9}});
      j["ops"] = ops;
      fns.push_back(j);
      continue;
    }
    std::printf("estimate mil: %s function %s on %s\n", o.program.c_str(), f.name.c_str(), chip.description.c_str());
    std::vector<const cost::OpCost*> ops;
    for (const auto& op : pc.ops) ops.push_back(&op);
    std::sort(ops.begin(), ops.end(), [](auto* a, auto* b) { return a->ms > b->ms; });
    for (size_t i = 0; i < std::min<size_t>(ops.size(), 8); ++i)
      std::printf("  %-24s %-12s %-11s %8.4f ms %8.3f GFLOP\n", ops[i]->name.c_str(), ops[i]->op.c_str(),
                  cost::op_class_name(ops[i]->cls), ops[i]->ms, ops[i]->flops * 1e-9);
    std::printf(
        "  %.3f ms per evaluation (dispatch %.3f + fill %.3f + max(compute %.3f, rest of memory %.3f) + drain %.3f), "
        "%.3f GFLOP, %.2f TFLOPS%s; split into one program per op: %.3f ms\n",
        pc.ms, pc.dispatch_ms, pc.fill_ms, pc.compute_ms, pc.memory_ms - pc.fill_ms - pc.drain_ms, pc.drain_ms,
        pc.flops * 1e-9, pc.tflops(), pc.spills ? ", spills" : "", fc.split_ms);
  }
  if (o.json)
    std::printf("%s\n", json{{"device", chip.name}, {"program", o.program}, {"functions", fns}}.dump(2).c_str());
}

// `device` "" = the report's device profile.
void run_calibrate(const EstimateOptions& o, const std::string& dev) {
  const cost::Calibration cal = cost::calibrate(read_file_text(o.calibrate), o.calibrate, dev);
  if (!o.save.empty()) cost::save_chip(cal.after, o.save);
  if (o.json) {
    json ch = json::array(), nf = json::array();
    for (const auto& c : cal.changed)
      ch.push_back({{"param", c.param}, {"from", c.from_section}, {"before", c.before}, {"after", c.after}});
    for (const auto& [p, why] : cal.not_fitted) nf.push_back({{"param", p}, {"why", why}});
    std::printf("%s\n", json{{"device", cal.after.name}, {"numbers", cal.numbers}, {"changed", ch}, {"not_fitted", nf}}
                            .dump(2)
                            .c_str());
    return;
  }
  std::printf("estimate --calibrate %s: device %s%s%s\n", o.calibrate.c_str(), cal.after.name.c_str(),
              cal.numbers.empty() ? "" : "; the report says: ", cal.numbers.c_str());
  for (const auto& c : cal.changed)
    std::printf("  %-18s %10.4g -> %-10.4g (from %s)\n", c.param.c_str(), c.before, c.after, c.from_section.c_str());
  for (const auto& [p, why] : cal.not_fitted) std::printf("  %-18s not fitted: %s\n", p.c_str(), why.c_str());
  if (!o.save.empty())
    std::printf("  saved to %s: estimate with it by `anelab estimate train|infer|mil --device-file %s`\n",
                o.save.c_str(), o.save.c_str());
}

}  // namespace

std::string estimate_infer_note(const models::ModelConfig& c, int64_t prompt_tokens, const std::string& device) {
  const std::string dev = device == "auto" || device.empty() ? rt::kFallbackDevice : device;
  try {
    const cost::Chip& chip = cost::chip(dev);
    const int64_t S = infer::prefill_bucket(prompt_tokens, c.max_seq_len);
    const std::vector<cost::LayerKernelCost> kernels =
        prefill_kernel_costs(c, {S}, infer::prefill_bucket(1, c.max_seq_len), chip);
    const cost::InferCost ic = cost::infer_cost({S}, kernels, c.dim, c.vocab_size, chip);
    return cat("estimate on the ANE of ", chip.description, " (docs/estimate.md): prefill pp", prompt_tokens, " ",
               static_cast<int64_t>(double(prompt_tokens) / ic.prefill[0].ms * 1e3), " tok/s (bucket ", S, "), decode ",
               static_cast<int64_t>(ic.decode_tok_per_s), " tok/s");
  } catch (const std::exception& e) {  // a model the MIL prefill refuses, a device without cost parameters
    return cat("no estimate: ", e.what());
  }
}

std::string estimate_train_note(const std::string& preset, const std::string& strategies, int64_t seq) {
  std::string out;
  for (const std::string st : {"dynamic", "static"}) {
    if (strategies.find(st) == std::string::npos) continue;
    try {
      const models::ModelConfig& c = models::preset(preset);
      cost::TrainModel m;
      m.shape = train::kernel_train_shape(models::describe_model(c), seq);
      m.n_layers = c.n_layers;
      m.vocab = c.vocab_size;
      const cost::Chip& chip = cost::chip(rt::kFallbackDevice);
      const cost::StepCost s =
          cost::estimate_train(m, st == "static" ? kern::Strategy::kStatic : kern::Strategy::kDynamic, chip);
      char nums[160];
      std::snprintf(nums, sizeof nums, "%.1f ms/step (ANE %.1f, staging %.1f, host %.1f)", s.ms_per_step(), s.ane_ms,
                    s.staging_ms, s.host_ms());
      out += cat("estimate ", st, " on the ANE of ", chip.description, " (docs/estimate.md): ", nums, "\n");
    } catch (const std::exception& e) {
      out += cat("no ", st, " estimate: ", e.what(), "\n");
    }
  }
  return out;
}

void add_estimate_command(CLI::App& app) {
  auto* est = app.add_subcommand("estimate",
                                 "Estimate what training, inference or a MIL program costs on an Apple chip"
                                 " (cost model: docs/estimate.md)");
  auto o = std::make_shared<EstimateOptions>();
  const std::string devices = [] {
    std::string s;
    for (const auto& n : cost::chip_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }();
  est->add_option("--calibrate", o->calibrate, "refit the chip's parameters from an `anelab probe --out` report");
  est->add_option("--save", o->save, "with --calibrate: write the refit chip parameters to this file (JSON)");
  est->add_option("--device", o->device, "chip: " + devices)->capture_default_str();
  est->add_flag("--json", o->json, "JSON output");
  auto* tr = est->add_subcommand("train", "a training step: per-kernel table and ms/step");
  tr->add_option("--preset", o->preset, "model preset");
  tr->add_option("--model", o->model, "model file (its config)");
  tr->add_option("--shape", o->shape,
                 "with --preset: a JSON object of model config fields that replace the preset's (as train --shape)");
  tr->add_option("--strategy", o->strategy, "static | dynamic")->capture_default_str();
  tr->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str()->check(CLI::Range(64, 65536));
  tr->add_option("--accum", o->accum, "steps per weight update (Adam, static recompiles)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  tr->add_option("--cls-vocab", o->cls_vocab,
                 "classifier rows, for a trainer that compacts the vocabulary to the tokens its data uses (maderix's "
                 "dynamic pipeline: 9200); default the whole vocabulary")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  tr->add_flag("--lora", o->lora,
               "LoRA fine-tuning (train --lora): the static and dynamic strategies side by side, and which to pick "
               "(--strategy is not read)");
  tr->add_option("--lora-rank", o->lora_rank, "with --lora: LoRA rank r")->capture_default_str();
  tr->add_option("--lora-targets", o->lora_targets,
                 "with --lora: a comma list of q,k,v,o,gate,up,down (the ANE kernels take these; train's DeltaNet "
                 "targets lin_* have none)")
      ->capture_default_str();
  tr->add_option("--steps", o->steps, "with --lora: the run's steps, over which the compiles once are amortised")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  auto* inf = est->add_subcommand("infer", "prefill tok/s per bucket and decode tok/s");
  inf->add_option("--preset", o->preset, "model preset");
  inf->add_option("--model", o->model, "model file (its config)");
  inf->add_option("--bucket", o->buckets, "prefill buckets (default 64, 128, ... up to 2048 or the context)");
  auto* mil = est->add_subcommand("mil", "a MIL program file: per-op table and time per evaluation");
  mil->add_option("program", o->program, "MIL program file")->required();
  for (auto* sub : {tr, inf, mil}) {
    sub->add_option("--device", o->device, "chip: " + devices)->capture_default_str();
    sub->add_option("--device-file", o->device_file,
                    "chip parameters from a file written by `estimate --calibrate probe.json --save FILE`");
    sub->add_flag("--json", o->json, "JSON output");
  }
  auto given = [o, est](CLI::App* sub) { o->device_given = sub->count("--device") + est->count("--device") > 0; };
  tr->callback([o, tr, given] {
    given(tr);
    ANELAB_CHECK(o->lora || tr->count("--lora-rank") + tr->count("--lora-targets") + tr->count("--steps") == 0,
                 "estimate", "--lora-rank, --lora-targets and --steps go with --lora");
    run_train(*o);
  });
  inf->callback([o, inf, given] { given(inf), run_infer(*o); });
  mil->callback([o, mil, given] { given(mil), run_mil(*o); });
  est->callback([o, est] {
    ANELAB_CHECK(o->save.empty() || !o->calibrate.empty(), "estimate", "--save needs --calibrate probe.json");
    if (!o->calibrate.empty()) return run_calibrate(*o, est->count("--device") ? o->device : "");
    ANELAB_CHECK(!est->get_subcommands().empty(), "estimate",
                 "give a subcommand (train, infer, mil) or --calibrate probe.json");
  });
}

}  // namespace anelab::cli
