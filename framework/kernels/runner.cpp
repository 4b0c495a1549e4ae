// Host-side staging and evaluation of the training kernels (see runner.h).
#include "framework/kernels/runner.h"

#include <chrono>

#include "framework/core/error.h"

namespace anelab::kern {

namespace {
size_t idx(KernelKind k) { return static_cast<size_t>(k); }
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// ---- KernelCache ----------------------------------------------------------------------------------

KernelCache::KernelCache(rt::Backend& backend, const TrainShape& shape, Strategy strategy)
    : backend_(backend), shape_(shape), strategy_(strategy) {
  shape_.validate();
}

// The kernels are built once in the builder's default dialect; the backend gets them in its device's (M1-M3:
// program(1.0)/ios16 text, digest §2.1), as the native backend prints them and the inference prefill builds them.
std::unique_ptr<rt::Kernel> KernelCache::compile(const KernelSpec& spec) {
  mil::Program p = spec.program;
  p.dialect = backend_.profile().dialect;
  auto r = backend_.compile(p, spec.weights);
  if (!r.is_ok()) {
    const auto& st = r.status();
    const std::string msg =
        cat("[kernels] compile ", spec.name, " (", strategy_name(strategy_), ", ", shape_.str(), ") on ",
            backend_.name(), ": ",
            st.code() == Code::kBudgetExhausted ? "compile budget exhausted (checkpoint and restart "
                                                  "the process): "
                                                : "",
            st.message());
    if (st.code() == Code::kBudgetExhausted || st.code() == Code::kCompileFailed)
      throw rt::CompileError(st.code(), msg);
    throw Error(msg);
  }
  ++compiles_;
  return std::move(r.value());
}

KernelCache::Entry& KernelCache::shared(KernelKind k) {
  ANELAB_CHECK(!kernel_per_layer(k, strategy_), "kernels", kernel_name(k), " is compiled per layer under the ",
               strategy_name(strategy_), " strategy");
  auto& e = entries_[idx(k)];
  if (!e) {
    auto ne = std::make_unique<Entry>();
    ne->spec = build_kernel(k, shape_, strategy_, nullptr);
    ne->kernel = compile(ne->spec);
    e = std::move(ne);
  }
  return *e;
}

// ---- LayerRunner ----------------------------------------------------------------------------------

struct LayerRunner::Slot {
  const KernelSpec* spec = nullptr;  // layouts (shared entry's or own)
  rt::Kernel* kernel = nullptr;
  KernelSpec own_spec;  // static weight-bearing kernels
  std::unique_ptr<rt::Kernel> own_kernel;
  std::vector<rt::Surface> in, out;
};

LayerRunner::LayerRunner(KernelCache& cache) : cache_(&cache) {}
LayerRunner::LayerRunner(LayerRunner&&) noexcept = default;
LayerRunner::~LayerRunner() = default;

LayerRunner::Slot& LayerRunner::slot(KernelKind k) {
  auto& s = slots_[idx(k)];
  if (!s) s = std::make_unique<Slot>();
  if (!s->kernel) {
    ANELAB_CHECK(!kernel_per_layer(k, cache_->strategy()) && (!kernel_has_weights(k) || has_weights_), "kernels",
                 kernel_name(k), ": call set_weights() before running a weight-bearing kernel");
    KernelCache::Entry& e = cache_->shared(k);
    s->spec = &e.spec;
    s->kernel = e.kernel.get();
  }
  if (s->in.empty()) {
    s->in = s->kernel->make_inputs(0, cache_->backend().profile());
    s->out = s->kernel->make_outputs(0, cache_->backend().profile());
    for (auto& f : s->in) f.fill_zero();
  }
  return *s;
}

const KernelSpec& LayerRunner::spec(KernelKind k) { return *slot(k).spec; }

void LayerRunner::release_static_kernels() {
  for (auto& s : slots_)
    if (s && s->own_kernel) {
      s->kernel = nullptr;
      cache_->backend().discard(std::move(s->own_kernel));
    }
}

void LayerRunner::set_weights(const LayerWeights& w) {
  const TrainShape& sh = cache_->shape();
  validate_train_weights(w, sh);
  has_weights_ = true;
  release_static_kernels();  // static: the kernels of the old weights go before any recompile
  std::vector<float> buf;
  for (KernelKind k : kAllKernelKinds) {
    if (!kernel_has_weights(k)) continue;
    if (kernel_per_layer(k, cache_->strategy())) {  // static: rebuild with the new blobs, recompile
      auto& s = slots_[idx(k)];
      if (!s) s = std::make_unique<Slot>();
      s->own_spec = build_kernel(k, sh, Strategy::kStatic, &w);
      s->own_kernel = cache_->compile(s->own_spec);
      s->spec = &s->own_spec;
      s->kernel = s->own_kernel.get();
      continue;
    }
    Slot& s = slot(k);  // dynamic: restage the weight bands of this layer's input surface (not the LoRA bands)
    const double t0 = now_ms();
    for (const WeightSlot& ws : s.spec->weight_slots) {
      if (!lora_slot_weight(ws).empty()) continue;
      weight_slot_values(ws, w, sh, buf);
      rt::stage_in(s.in[0], s.spec->in, ws.slot, buf.data());
    }
    times_.stage_ms += now_ms() - t0;
  }
}

void LayerRunner::set_adapters(const std::function<Adapter(const std::string&)>& adapter) {
  const TrainShape& sh = cache_->shape();
  ANELAB_CHECK(sh.lora_rank > 0 && has_weights_, "kernels",
               "set_adapters: needs a LoRA shape and set_weights() first (shape ", sh.str(), ")");
  const double t0 = now_ms();
  std::vector<float> buf;
  for (KernelKind k : kAllKernelKinds) {
    if (!kernel_has_weights(k)) continue;
    Slot& s = slot(k);
    for (const WeightSlot& ws : s.spec->weight_slots) {
      const std::string w = lora_slot_weight(ws);
      if (w.empty()) continue;
      const Adapter ad = adapter(w);
      lora_slot_values(ws, ad.a, ad.b, sh, buf);
      rt::stage_in(s.in[0], s.spec->in, ws.slot, buf.data());
    }
  }
  times_.stage_ms += now_ms() - t0;
}

void LayerRunner::set_masks(std::initializer_list<KernelKind> kinds,
                            const std::function<const float*(const std::string&)>& mask) {
  const double t0 = now_ms();
  const int64_t S = cache_->shape().seq;
  std::vector<float> buf;
  for (KernelKind k : kinds) {
    Slot& s = slot(k);
    for (const WeightSlot& ws : s.spec->lora_masks) {
      const float* m = mask(ws.weight);  // [in, S]
      if (ws.transposed) {               // the band holds [S, in]
        const int64_t in = s.spec->in.slot(ws.slot).spatial;
        buf.resize(size_t(in * S));
        for (int64_t c = 0; c < in; ++c)
          for (int64_t t = 0; t < S; ++t) buf[size_t(t * in + c)] = m[c * S + t];
        m = buf.data();
      }
      rt::stage_in(s.in[0], s.spec->in, ws.slot, m);
    }
  }
  times_.stage_ms += now_ms() - t0;
}

void LayerRunner::run(KernelKind k, std::initializer_list<In> ins, std::initializer_list<Out> outs) {
  Slot& s = slot(k);
  const double t0 = now_ms();
  for (const auto& [name, src] : ins) rt::stage_in(s.in[0], s.spec->in, name, src);
  rt::Surface* ip = &s.in[0];
  rt::Surface* op = &s.out[0];
  const double t1 = now_ms();
  Status st = cache_->backend().evaluate(*s.kernel, 0, std::span<rt::Surface* const>(&ip, 1),
                                         std::span<rt::Surface* const>(&op, 1));
  if (!st.is_ok()) fail("kernels", "evaluate ", kernel_name(k), ": ", st.message());
  const double t2 = now_ms();
  for (const auto& [name, dst] : outs) {
    const mil::IOSlot& os = s.spec->out.slot(name);
    dst->resize(static_cast<size_t>(os.channels * os.spatial));
    rt::stage_out(s.out[0], s.spec->out, name, dst->data());
  }
  times_.stage_ms += (t1 - t0) + (now_ms() - t2);
  times_.eval_ms += t2 - t1;
  ++times_.evals;
}

void LayerRunner::attn_forward(const float* x, AttnTaps& o) {
  if (cache_->shape().q_norm)  // with k_norm (TrainShape::validate)
    run(KernelKind::kAttnFwd, {{"x", x}},
        {{"o", &o.o},
         {"attn", &o.attn},
         {"q_rope", &o.q_rope},
         {"k_rope", &o.k_rope},
         {"v", &o.v},
         {"xnorm", &o.xnorm},
         {"q", &o.q},
         {"k", &o.k}});
  else
    run(KernelKind::kAttnFwd, {{"x", x}},
        {{"o", &o.o},
         {"attn", &o.attn},
         {"q_rope", &o.q_rope},
         {"k_rope", &o.k_rope},
         {"v", &o.v},
         {"xnorm", &o.xnorm}});
}

void LayerRunner::ffn_forward(const float* x2, FfnTaps& o) {
  run(KernelKind::kFfnFwd, {{"x", x2}},
      {{"y", &o.y}, {"h1", &o.h1}, {"h3", &o.h3}, {"gate", &o.gate}, {"xnorm", &o.xnorm}});
}

void LayerRunner::ffn_backward(const float* dy, const FfnTaps& f, FfnGrads& o) {
  run(KernelKind::kFfnBwd, {{"dy", dy}, {"h1", f.h1.data()}, {"h3", f.h3.data()}},
      {{"dx", &o.dx}, {"dh1", &o.dh1}, {"dh3", &o.dh3}});
}

void LayerRunner::wo_backward(const float* dx2, std::vector<float>& da) {
  run(KernelKind::kWoBwd, {{"dy", dx2}}, {{"da", &da}});
}

void LayerRunner::sdpa_backward(const AttnTaps& f, const float* da, SdpaGrads& o) {
  std::vector<float> probs, dp;  // [H*S, S]
  run(KernelKind::kSdpaBwd1, {{"q_rope", f.q_rope.data()}, {"k_rope", f.k_rope.data()}, {"v", f.v.data()}, {"da", da}},
      {{"dv", &o.dv}, {"probs", &probs}, {"dp", &dp}});
  run(KernelKind::kSdpaBwd2,
      {{"probs", probs.data()}, {"dp", dp.data()}, {"q_rope", f.q_rope.data()}, {"k_rope", f.k_rope.data()}},
      {{"dq", &o.dq}, {"dk", &o.dk}});
}

void LayerRunner::qkv_backward(const SdpaGrads& g, std::vector<float>& dxn) {
  ANELAB_CHECK(!cache_->shape().q_norm, "kernels", "qkv_backward: shape ", cache_->shape().str(),
               " has q/k norms; pass the attention taps (qkv_backward(fwd, g, dxn))");
  run(KernelKind::kQkvBwd, {{"dq", g.dq.data()}, {"dk", g.dk.data()}, {"dv", g.dv.data()}}, {{"dx", &dxn}});
}

void LayerRunner::qkv_backward(const AttnTaps& f, SdpaGrads& g, std::vector<float>& dxn) {
  if (!cache_->shape().q_norm) return qkv_backward(g, dxn);
  run(KernelKind::kQkvBwd,
      {{"dq", g.dq.data()}, {"dk", g.dk.data()}, {"dv", g.dv.data()}, {"q", f.q.data()}, {"k", f.k.data()}},
      {{"dx", &dxn}, {"dq_proj", &g.dq_proj}, {"dk_proj", &g.dk_proj}});
}

void LayerRunner::rms_backward(KernelKind which, const float* dy, const float* x, std::vector<float>& dx) {
  ANELAB_CHECK(which == KernelKind::kRmsAttBwd || which == KernelKind::kRmsFfnBwd, "kernels",
               "rms_backward: kind must be rms_att_bwd or rms_ffn_bwd, got ", kernel_name(which));
  run(which, {{"dy", dy}, {"x", x}}, {{"dx", &dx}});
}

}  // namespace anelab::kern
