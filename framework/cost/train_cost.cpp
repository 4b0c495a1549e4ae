#include "framework/cost/train_cost.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/core/error.h"
#include "framework/runtime/device_profile.h"

namespace anelab::cost {

namespace {

// Bytes the host writes into / reads from the kernel's surfaces per call: the whole input surface (activations,
// and under kDynamic the weight bands, restaged once per update and layer: per step at accum 1) and the outputs.
double staging_bytes(const kern::KernelSpec& k) {
  double b = 0;
  const mil::Function& fn = k.program.main();
  for (const auto& [n, t] : fn.inputs) b += double(t.numel()) * double(mil::dtype_bytes(t.dtype));
  for (const auto& o : fn.outputs)
    if (const mil::TensorType* t = fn.type_of(o)) b += double(t->numel()) * double(mil::dtype_bytes(t->dtype));
  return b;
}

// LoRA: what the host stages into a kernel's surfaces, slot by slot (the padding columns are never written): per call
// the activations' bands, the adapters' bands and the outputs; once per layer the base's weight bands (dynamic).
struct LoraStaging {
  double per_call = 0, once = 0;  // bytes
  double adapter_bytes = 0;       // of per_call: the adapters' bands
  double adapter_params = 0;      // their elements (A [r, in] and B [out, r] of each adapted projection)
};
LoraStaging lora_staging(const kern::KernelSpec& k) {
  LoraStaging st;
  const double eb = double(mil::dtype_bytes(k.in.dtype()));
  for (const mil::IOSlot& s : k.in.slots()) {
    const double n = double(s.channels * s.spatial);
    const auto ws = std::find_if(k.weight_slots.begin(), k.weight_slots.end(),
                                 [&](const kern::WeightSlot& w) { return w.slot == s.name; });
    if (ws == k.weight_slots.end()) {
      st.per_call += n * eb;  // an activation
    } else if (!kern::lora_slot_weight(*ws).empty()) {
      st.per_call += n * eb, st.adapter_bytes += n * eb, st.adapter_params += n;
    } else {
      st.once += n * eb;  // a base weight's band: staged before the first step, never again
    }
  }
  const mil::Function& fn = k.program.main();
  for (const auto& o : fn.outputs)
    if (const mil::TensorType* t = fn.type_of(o))
      st.per_call += double(t->numel()) * double(mil::dtype_bytes(t->dtype));
  return st;
}

}  // namespace

StepCost estimate_train(const TrainModel& m, kern::Strategy strategy, const Chip& chip) {
  const kern::TrainShape& s = m.shape;
  s.validate();
  const bool lora = s.lora_rank > 0;
  const int64_t D = s.dim, QD = s.q_dim(), KVD = s.kv_dim(), H = s.hidden;
  // Zero weights with the shapes of s (static kernels bake them; the cost reads only their shapes).
  std::vector<float> wq(size_t(QD * D)), wk(size_t(KVD * D)), wv(size_t(KVD * D)), wo(size_t(D * QD));
  std::vector<float> w1(size_t(H * D)), w3(size_t(H * D)), w2(size_t(D * H)), ra(size_t(D), 1.f), rf(size_t(D), 1.f);
  std::vector<float> qn, kn;  // [HD] with q / k norms
  if (s.q_norm) qn.assign(size_t(s.head_dim), 1.f), kn.assign(size_t(s.head_dim), 1.f);
  const kern::LayerWeights w = kern::train_weights(s, wq, wk, wv, wo, w1, w3, w2, ra, rf, qn, kn);
  std::vector<KernelRow> rows;
  int64_t per_update = 0, compiles = 0;
  double once_bytes = 0, adapter_params = 0, adapter_bytes = 0;  // LoRA
  for (kern::KernelKind kind : kern::kAllKernelKinds) {
    kern::KernelSpec k = kern::build_kernel(kind, s, strategy, &w);
    KernelRow r;
    r.name = k.name;
    r.cost = program_cost(k.program, chip);
    r.calls = m.n_layers;
    if (lora) {
      const LoraStaging st = lora_staging(k);
      r.staging_bytes = st.per_call;
      once_bytes += st.once * double(m.n_layers);  // every layer's own surfaces
      adapter_bytes += st.adapter_bytes * double(m.n_layers);
      // Each adapter once: the forward kernels hold every adapted projection's A and B once (the backward kernels
      // hold them again, for Wᵀ + s·AᵀBᵀ).
      if (kind == kern::KernelKind::kAttnFwd || kind == kern::KernelKind::kFfnFwd) adapter_params += st.adapter_params;
    } else {
      r.staging_bytes = staging_bytes(k);
    }
    const bool per_layer = kern::kernel_per_layer(kind, strategy);
    if (per_layer) per_update += m.n_layers;
    compiles += per_layer ? m.n_layers : 1;
    rows.push_back(std::move(r));
  }
  TrainShapeInfo info;
  info.n_layers = m.n_layers;
  info.dim = D;
  info.vocab = m.vocab;
  info.cls_vocab = m.cls_vocab;
  info.tokens = s.seq;
  info.layer_params = double(2 * QD * D + 2 * KVD * D + 3 * H * D + 2 * D);
  info.total_params = info.layer_params * double(m.n_layers) + double(m.vocab * D + D);
  info.accum_steps = m.accum_steps;
  info.static_weights = strategy == kern::Strategy::kStatic;
  info.kernels_per_update = per_update;
  if (lora) {
    info.lora = true;
    info.total_params = adapter_params * double(m.n_layers);
    info.lora_grad_flops = 4 * double(s.seq) * adapter_params * double(m.n_layers);
    info.compiles_once = compiles;
    info.staged_once_bytes = once_bytes;
    info.steps = m.steps;
  }
  StepCost sc = train_step_cost(std::move(rows), info, chip);
  if (lora) sc.adapter_params = info.total_params, sc.adapter_bytes = adapter_bytes;
  return sc;
}

kern::Strategy LoraEstimate::pick() const {
  if (!static_fits()) return kern::Strategy::kDynamic;
  return static_step.ms_per_step_with_compile() <= dynamic_step.ms_per_step_with_compile() ? kern::Strategy::kStatic
                                                                                           : kern::Strategy::kDynamic;
}

int64_t LoraEstimate::static_break_even() const {
  const double saved = dynamic_step.ms_per_step() - static_step.ms_per_step();
  if (saved <= 0) return -1;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil((static_step.once_ms - dynamic_step.once_ms) / saved)));
}

LoraEstimate estimate_lora(const TrainModel& m, const Chip& chip) {
  ANELAB_CHECK(m.shape.lora_rank > 0 && !m.shape.lora_targets.empty(), "cost",
               "estimate_lora: the shape has no LoRA rank or targets (", m.shape.str(), ")");
  LoraEstimate e;
  e.static_step = estimate_train(m, kern::Strategy::kStatic, chip);
  e.dynamic_step = estimate_train(m, kern::Strategy::kDynamic, chip);
  TrainModel full = m;
  full.shape.lora_rank = 0, full.shape.lora_scale = 0, full.shape.lora_targets.clear();
  e.full_static = estimate_train(full, kern::Strategy::kStatic, chip);
  e.full_dynamic = estimate_train(full, kern::Strategy::kDynamic, chip);
  e.budget = rt::device_profile(chip.family).compile_budget;
  e.static_need = e.static_step.compiles_once + 1;  // + the self-check: attn_fwd's I/O types, once per process
  return e;
}

}  // namespace anelab::cost
