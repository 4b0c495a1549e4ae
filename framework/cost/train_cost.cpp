#include "framework/cost/train_cost.h"

#include <vector>

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

}  // namespace

StepCost estimate_train(const TrainModel& m, kern::Strategy strategy, const Chip& chip) {
  const kern::TrainShape& s = m.shape;
  s.validate();
  const int64_t D = s.dim, QD = s.q_dim(), KVD = s.kv_dim(), H = s.hidden;
  // Zero weights with the shapes of s (static kernels bake them; the cost reads only their shapes).
  std::vector<float> wq(size_t(QD * D)), wk(size_t(KVD * D)), wv(size_t(KVD * D)), wo(size_t(D * QD));
  std::vector<float> w1(size_t(H * D)), w3(size_t(H * D)), w2(size_t(D * H)), ra(size_t(D), 1.f), rf(size_t(D), 1.f);
  std::vector<float> qn, kn;  // [HD] with q / k norms
  if (s.q_norm) qn.assign(size_t(s.head_dim), 1.f), kn.assign(size_t(s.head_dim), 1.f);
  const kern::LayerWeights w = kern::train_weights(s, wq, wk, wv, wo, w1, w3, w2, ra, rf, qn, kn);
  std::vector<KernelRow> rows;
  int64_t per_update = 0;
  for (kern::KernelKind kind : kern::kAllKernelKinds) {
    kern::KernelSpec k = kern::build_kernel(kind, s, strategy, &w);
    KernelRow r;
    r.name = k.name;
    r.cost = program_cost(k.program, chip);
    r.calls = m.n_layers;
    r.staging_bytes = staging_bytes(k);
    if (kern::kernel_per_layer(kind, strategy)) per_update += m.n_layers;
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
  return train_step_cost(std::move(rows), info, chip);
}

}  // namespace anelab::cost
