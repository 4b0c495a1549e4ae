// The static / dynamic kernel strategies (see kernel_engine.h for the data flow).
#include "train/kernel_engine.h"

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <optional>
#include <utility>

#include "framework/backends/registry.h"
#include "framework/core/clock.h"
#include "framework/core/error.h"
#include "framework/kernels/runner.h"
#include "framework/kernels/self_check.h"
#include "framework/runtime/backend.h"
#include "models/arch/arch.h"
#include "train/serial_queue.h"

namespace anelab::train {
namespace {

// The kernels evaluate one sequence of T tokens as the width of their fp16 I/O rows: T must fill whole
// device rows (rt::dense_width_multiple, the row-stride rule of the device profiles).
void check_seq_len(int64_t T, const std::string& strategy) {
  const int64_t m = rt::dense_width_multiple(mil::DType::kFp16);
  if (T < m || T % m != 0)
    fail("train", "--seq-len ", T, ": the ", strategy, " strategy evaluates one sequence per kernel as rows of ",
         "fp16 I/O, which must be a multiple of ", m, " columns (the device's ", 2 * m, "-byte rows); use --seq-len ",
         (T + m - 1) / m * m, " or --strategy cpu");
}

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<MatR>;
using CMapR = Eigen::Map<const MatR>;

// dst[c * dst_ld + r] = src[r * src_ld + c] for a rows x cols block, in 32 x 32 tiles (both sides stay in cache).
void transpose_blocked(const float* src, int64_t rows, int64_t cols, int64_t src_ld, float* dst, int64_t dst_ld) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * dst_ld + r] = src[r * src_ld + c];
    }
}

// dW[out, in] += dY[out, S] · X[in, S]ᵀ (channel-first operands straight from the kernels)
void dw_acc(float* dW, const std::vector<float>& dY, const std::vector<float>& X, int64_t out, int64_t in, int64_t S) {
  MapR(dW, out, in).noalias() += CMapR(dY.data(), out, S) * CMapR(X.data(), in, S).transpose();
}

// RMSNorm weight gradient on [heads * D, S], each head normed over its D channels with the shared weight [D]
// (heads = 1: the layer norms; n_heads / n_kv_heads: the q / k norms over HD):
// dw[i] += Σ_h Σ_t dy[h·D+i, t]·x[h·D+i, t]·r[h, t], r[h, t] = 1/sqrt(mean_i x[h·D+i, t]² + eps)
// (x = the norm's input, dy = dL/d(normalised output); double sums like CpuModel's rmsnorm_backward).
void rms_dw_acc(float* dw, const std::vector<float>& dy, const std::vector<float>& x, int64_t heads, int64_t D,
                int64_t S, float eps) {
  std::vector<float> r(static_cast<size_t>(heads * S));
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> ss(size_t(S), 0.0);
    for (int64_t i = h * D; i < (h + 1) * D; ++i)
      for (int64_t t = 0; t < S; ++t) ss[size_t(t)] += double(x[size_t(i * S + t)]) * x[size_t(i * S + t)];
    for (int64_t t = 0; t < S; ++t)
      r[size_t(h * S + t)] = static_cast<float>(1.0 / std::sqrt(ss[size_t(t)] / double(D) + double(eps)));
  }
  for (int64_t i = 0; i < D; ++i) {
    double s = 0;
    for (int64_t h = 0; h < heads; ++h) {
      const size_t row = size_t((h * D + i) * S);
      for (int64_t t = 0; t < S; ++t) s += double(dy[row + size_t(t)]) * x[row + size_t(t)] * r[size_t(h * S + t)];
    }
    dw[i] += static_cast<float>(s);
  }
}

// The adapter gradients of one projection and sequence (LoRA): Z = A X [r, S], dB [out, r] += s·dY·Zᵀ,
// dA [r, in] += s·(Bᵀ dY)·Xᵀ; X [in, S] the adapter's input (with dropout x ⊙ m, as CpuModel's xd), dY [out, S] the
// gradient of the projection's output.
void lora_grad_acc(const LoraSlot& sl, int64_t r, float scale, const float* w, float* g, const std::vector<float>& dY,
                   const std::vector<float>& X, int64_t S) {
  const CMapR A(w + sl.a, r, sl.in), B(w + sl.b, sl.out, r), x(X.data(), sl.in, S), dy(dY.data(), sl.out, S);
  const MatR z = A * x;
  MapR(g + sl.b, sl.out, r).noalias() += scale * (dy * z.transpose());
  const MatR u = B.transpose() * dy;
  MapR(g + sl.a, r, sl.in).noalias() += scale * (u * x.transpose());
}

// The kernels' name of the projection a LoRA target adapts (nullptr: a Gated DeltaNet projection, a step the kernels
// do not run: check_kernel_steps refuses such models).
const char* lora_kernel_weight(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ:
      return "wq";
    case LoraTarget::kK:
      return "wk";
    case LoraTarget::kV:
      return "wv";
    case LoraTarget::kO:
      return "wo";
    case LoraTarget::kGate:
      return "w1";
    case LoraTarget::kUp:
      return "w3";
    case LoraTarget::kDown:
      return "w2";
    case LoraTarget::kLinQkv:
    case LoraTarget::kLinZ:
    case LoraTarget::kLinB:
    case LoraTarget::kLinA:
    case LoraTarget::kLinOut:
      return nullptr;
  }
  fail("train", "unknown LoRA target");
}

// The target whose kernels' name is kw ("wq" ... "w2").
LoraTarget lora_kernel_target(const std::string& kw) {
  for (int t = 0; t < kLoraTargets; ++t)
    if (const char* n = lora_kernel_weight(LoraTarget(t)); n && kw == n) return LoraTarget(t);
  fail("train", "no LoRA target for the kernels' weight ", kw);
}

void add_inplace(std::vector<float>& y, const std::vector<float>& a) {
  for (size_t i = 0; i < y.size(); ++i) y[i] += a[i];
}
void add_into(std::vector<float>& y, const std::vector<float>& a, const std::vector<float>& b) {
  y.resize(a.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = a[i] + b[i];
}

class KernelEngine final : public StepEngine {
 public:
  KernelEngine(const KernelEngineOptions& o, const ParamLayout& layout)
      : layout_(layout), c_(layout.config()), desc_(models::describe_model(c_)), head_(layout), seq_len_(o.seq_len) {
    if (o.strategy == "static")
      strategy_ = kern::Strategy::kStatic;
    else if (o.strategy == "dynamic")
      strategy_ = kern::Strategy::kDynamic;
    else
      fail("train", "--strategy ", o.strategy, ": the kernel engine runs static or dynamic");
    check_kernel_steps(desc_, o.strategy);
    if (o.seq_len > 0) check_seq_len(o.seq_len, o.strategy);
    self_check_report_ = o.self_check_report.empty()
                             ? (std::filesystem::temp_directory_path() / "anelab-self-check.json").string()
                             : o.self_check_report;
    rt::BackendOptions bo;
    if (!o.device.empty()) bo.device = o.device;
    bo.compile_budget = o.compile_budget;
    backend_ = rt::create_backend(o.backend, bo);
    for (kern::KernelKind k : kern::kAllKernelKinds) (kern::kernel_per_layer(k, strategy_) ? per_layer_ : shared_) += 1;
  }
  // LoRA (make_kernel_lora_engine): the base baked (static) or staged (dynamic) once, the adapters kernel inputs.
  KernelEngine(const KernelEngineOptions& o, const ParamLayout& layout, const float* base, const LoraLayout& lora,
               uint64_t seed, std::function<uint64_t()> micro_batch)
      : KernelEngine(o, layout) {
    check_static_lora_budget();
    base_ = base, lora_ = &lora, seed_ = seed, micro_batch_ = std::move(micro_batch);
  }
  ~KernelEngine() override {
    try {
      queue_.drain();
    } catch (...) {
    }
  }

  std::string name() const override { return kern::strategy_name(strategy_); }
  int compiles_needed() const override {
    const int L = int(c_.n_layers);
    if (!cache_ || T_ != seq_len_)  // a fresh process (or a new T); the ANE self-check compiles once first
      return shared_ + per_layer_ * L + (self_check_pending() ? 1 : 0);
    return stale_ ? per_layer_ * L : 0;  // static: recompile after an update
  }
  int compiles_left() const override { return backend_->compiles_left(); }
  int budget() const override { return backend_->compile_budget(); }
  int compiles_total() const override { return compiles_; }
  std::pair<int, double> take_compile_batch() override {
    const auto r = std::pair<int, double>{pending_, pending_ms_};
    pending_ = 0, pending_ms_ = 0;
    return r;
  }
  std::string take_self_check() override { return std::exchange(self_check_json_, {}); }
  void weights_updated() override {  // static: kernels of the old weights are never run again: free them now
    if (lora_) return;               // LoRA: the base never changes; the adapters are restaged every call
    stale_ = true;                   // (so none is loaded, or kept on disk, across an exec-restart)
    if (strategy_ == kern::Strategy::kStatic)
      for (auto& r : runners_) r.release_static_kernels();
  }
  double forward_backward(const float* w, const Batch& b, float grad_scale, float* g, StepTimes* t) override;
  void set_grads_final_hook(std::function<void(int64_t)> f) override { grads_final_ = std::move(f); }

 private:
  struct SeqActs {             // one sequence of one layer, fp32 [C, S]
    std::vector<float> x, x2;  // [D, S] layer input, x + attention
    kern::AttnTaps attn;
    kern::FfnTaps ffn;
  };
  struct SeqMasks {  // LoRA dropout: one sequence of one layer, by LoraTarget: the 0 / 1 mask [in, S] (adapted only)
    std::array<std::vector<float>, kLoraTargets> m;
  };
  struct SeqGrads {          // backward buffers of one sequence (double-buffered by layer parity)
    std::vector<float> dy;   // [D, S] dL/d(layer output)
    kern::FfnGrads ffn;      // dx [D] = dL/d xnorm2, dh1 / dh3 [H]
    std::vector<float> dx2;  // [D, S] dL/d x2
    std::vector<float> da;   // [QD, S]
    kern::SdpaGrads sdpa;    // dq [QD], dk / dv [KVD], pre-RoPE (+ dq_proj / dk_proj with q/k norms)
    std::vector<float> dxn;  // [D, S] dL/d xnorm
  };

  kern::LayerWeights layer_weights(const float* w, int64_t l) const;
  kern::TrainShape train_shape(int64_t T) const;
  void stage_adapters(int64_t l, const float* a);
  bool dropout() const { return lora_ && lora_->lora().dropout > 0; }
  void draw_masks(int64_t l, uint64_t micro_batch);
  void stage_masks(int64_t l, int64_t bi, std::initializer_list<kern::KernelKind> kinds);
  void check_static_lora_budget() const;
  // LoRA: adapter gradients of (layer l, sequence bi, target t) from X (the projection's input; with dropout X ⊙ m
  // here) and dY (on the worker); no-op when t is not adapted.
  void lora_acc(int64_t l, int64_t bi, LoraTarget t, const std::vector<float>& dY, const std::vector<float>& X) {
    const int64_t i = lora_->slot(l, t);
    if (i < 0) return;
    const LoraSlot& sl = lora_->slots()[size_t(i)];
    const std::vector<float>* xd = &X;
    if (dropout()) {  // x ⊙ m, m = 0 or 1/(1-p) in fp32 as CpuModel::lora_forward multiplies it
      const std::vector<float>& m01 = masks_[size_t(l * B_ + bi)].m[size_t(t)];
      const float keep = lora_dropout_scale(lora_->lora().dropout);
      xdrop_.resize(X.size());
      for (size_t k = 0; k < X.size(); ++k) xdrop_[k] = X[k] * (m01[k] != 0.0f ? keep : 0.0f);
      xd = &xdrop_;
    }
    lora_grad_acc(sl, lora_->lora().rank, lora_->lora().scale(), w_, lg_, dY, *xd, T_);
  }
  bool self_check_pending() const { return !self_checked_ && backend_->name() == "ane"; }
  void self_check(const float* w, const kern::TrainShape& s);
  void prepare(const float* w, int64_t B, int64_t T);
  void submit_restage(const float* base, const float* adapters);
  void forward(const Batch& b);
  void layer_backward(int64_t l, int64_t B, float* g, double* wait_ms);
  void submit_qkv_dw(const SeqActs& a, const SeqGrads& s, const LayerPtrs& gl);
  void wait(uint64_t ticket, double* wait_ms) {
    const double t0 = now_ms();
    queue_.wait(ticket);
    *wait_ms += now_ms() - t0;
  }
  double step(const float* w, const Batch& b, float grad_scale, float* g, StepTimes* t);
  // grads[from, P) are final once the worker's tasks submitted so far ran: the hook is called there, after them.
  void submit_grads_final(int64_t from) {
    if (grads_final_) queue_.submit([this, from] { grads_final_(from); });
  }

  ParamLayout layout_;
  models::ModelConfig c_;
  models::ModelDesc desc_;  // what the kernels' shape is taken from (kernel_train_shape)
  kern::Strategy strategy_ = kern::Strategy::kDynamic;
  std::unique_ptr<rt::Backend> backend_;
  std::unique_ptr<kern::KernelCache> cache_;
  std::vector<kern::LayerRunner> runners_;  // [L]
  CpuModel head_;                           // final norm, classifier, loss (CPU)
  SerialQueue queue_;                       // dW worker
  int64_t seq_len_ = 0, T_ = 0, B_ = 0;
  int shared_ = 0, per_layer_ = 0;  // compiles per process / per layer and update
  bool stale_ = true;
  bool self_checked_ = false;
  std::string self_check_report_;
  std::string self_check_json_;                          // the passed self-check's report, until take_self_check
  int compiles_ = 0, pending_ = 0, seen_ = 0;            // seen_: cache_->compiles() already counted
  double pending_ms_ = 0;                                // compile ms not yet taken
  std::vector<uint64_t> restage_ticket_;                 // [L] dynamic restaging tasks of this call
  std::vector<double> restage_hidden_;                   // [L] their runner-timed staging ms (on the worker)
  double restage_wait_ms_ = 0;                           // forward's wait for them
  std::vector<SeqActs> acts_;                            // [L * B], index l * B + b
  std::vector<std::vector<float>> xout_;                 // [B][D, S] last layer's output
  std::array<std::vector<SeqGrads>, 2> grads_;           // [layer parity][B]
  std::array<uint64_t, 2> dy_ticket_{}, last_ticket_{};  // last queue task reading grads_[p] dy / any field
  std::vector<float> rows_, drows_;                      // [N, D] head input / its gradient
  const float* w_ = nullptr;                             // weights of the current forward_backward (LoRA: adapters)
  const float* wb_ = nullptr;                            // the base's weights of the call (w_ without LoRA)
  float* lg_ = nullptr;                                  // LoRA: adapter gradients of the call
  const float* base_ = nullptr;                          // LoRA: [P] the frozen base (the caller's)
  const LoraLayout* lora_ = nullptr;                     // LoRA: the adapters (nullptr: full training)
  uint64_t seed_ = 0;                                    // LoRA dropout: the run's seed (LoraStep::seed)
  std::function<uint64_t()> micro_batch_;                // LoRA dropout: the call's micro-batch index (LoraStep's)
  std::vector<SeqMasks> masks_;                          // LoRA dropout: [L * B] this call's masks (draw_masks)
  std::vector<float> xdrop_;                             // LoRA dropout: x ⊙ m of lora_acc (the worker's)
  LoraStep head_lora_;                                   // LoRA: makes the CPU head skip the base's gradients
  std::function<void(int64_t)> grads_final_;             // called on the worker after the dW tasks it follows
};

kern::LayerWeights KernelEngine::layer_weights(const float* w, int64_t l) const {
  const LayerPtrs p = layout_.layer(const_cast<float*>(w), l);
  const size_t D = size_t(c_.dim), H = size_t(c_.hidden_dim), QD = size_t(c_.q_dim()), KD = size_t(c_.kv_dim());
  const size_t HD = cache_->shape().q_norm ? size_t(c_.head_dim) : 0;  // q_norm / k_norm (null without them)
  return kern::train_weights(cache_->shape(), {p.wq, QD * D}, {p.wk, KD * D}, {p.wv, KD * D}, {p.wo, D * QD},
                             {p.w1, H * D}, {p.w3, H * D}, {p.w2, D * H}, {p.attn_norm, D}, {p.ffn_norm, D},
                             {p.q_norm, HD}, {p.k_norm, HD});
}

kern::TrainShape KernelEngine::train_shape(int64_t T) const {
  const kern::TrainShape s = kernel_train_shape(desc_, T);
  return lora_ ? kernel_lora_shape(s, lora_->lora()) : s;
}

// LoRA: A and B of every adapted projection of layer l into the bands of its kernels (no compile).
void KernelEngine::stage_adapters(int64_t l, const float* a) {
  runners_[size_t(l)].set_adapters([&](const std::string& w) {
    const int64_t i = lora_->slot(l, lora_kernel_target(w));
    ANELAB_CHECK(i >= 0, "train", "layer ", l, " has no adapter on ", w);
    const LoraSlot& sl = lora_->slots()[size_t(i)];
    const size_t r = size_t(lora_->lora().rank);
    return kern::LayerRunner::Adapter{{a + sl.a, r * size_t(sl.in)}, {a + sl.b, size_t(sl.out) * r}};
  });
}

// LoRA dropout: the 0 / 1 masks of layer l's adapted projections for every sequence of the call (on the worker, with
// the adapters' restaging), element (c, t) of sequence bi the element ((bi·T + t)·in + c) of the slot's stream: the
// masks CpuModel draws for the same seed, micro-batch, layer and projection, transposed to the kernels' [in, S].
void KernelEngine::draw_masks(int64_t l, uint64_t micro_batch) {
  const double p = lora_->lora().dropout;
  for (int t = 0; t < kLoraTargets; ++t) {
    const int64_t si = lora_->slot(l, LoraTarget(t));
    if (si < 0 || !lora_kernel_weight(LoraTarget(t))) continue;
    const int64_t in = lora_->slots()[size_t(si)].in, T = T_;
    const uint64_t stream = lora_dropout_stream(seed_, micro_batch, si);
    for (int64_t bi = 0; bi < B_; ++bi) {
      std::vector<float>& m = masks_[size_t(l * B_ + bi)].m[size_t(t)];
      m.resize(size_t(in * T));
      for (int64_t c = 0; c < in; ++c)
        for (int64_t tt = 0; tt < T; ++tt)
          m[size_t(c * T + tt)] = lora_dropout_kept(stream, uint64_t((bi * T + tt) * in + c), p) ? 1.0f : 0.0f;
    }
  }
}

// LoRA dropout: sequence bi's masks of layer l into the mask bands of its kernels `kinds`.
void KernelEngine::stage_masks(int64_t l, int64_t bi, std::initializer_list<kern::KernelKind> kinds) {
  const SeqMasks& sm = masks_[size_t(l * B_ + bi)];
  runners_[size_t(l)].set_masks(kinds,
                                [&](const std::string& w) { return sm.m[size_t(lora_kernel_target(w))].data(); });
}

// LoRA on the static strategy compiles 2 + 7·L kernels once and can never compile fewer: when that is over the
// process's compile budget an exec-restart cannot help, so say so before the first compile (and what dynamic needs).
void KernelEngine::check_static_lora_budget() const {
  const int left = backend_->compiles_left(), need = compiles_needed();
  if (strategy_ != kern::Strategy::kStatic || need <= left) return;
  const int extra = self_check_pending() ? 1 : 0, dyn = int(kern::kAllKernelKinds.size()) + extra;
  fail("train", "--lora --strategy static: ", c_.n_layers, " layers need ", need, " compiles (", shared_, " + ",
       per_layer_, " x ", c_.n_layers, extra ? " + the self-check" : "", "), over the ", left,
       " left of the compile budget ", backend_->compile_budget(), " (device ", backend_->profile().name,
       "); --strategy dynamic compiles ", dyn, dyn <= left ? " and fits" : ", over it too");
}

// The silent-zeros self-check on the ANE: attn_fwd's input and output types, device against emulator.
// A difference throws before any kernel of the first step runs.
void KernelEngine::self_check(const float* w, const kern::TrainShape& s) {
  self_checked_ = true;
  const kern::LayerWeights lw = layer_weights(w, 0);
  const kern::KernelSpec spec = kern::build_kernel(kern::KernelKind::kAttnFwd, s, strategy_, &lw);
  const kern::SelfCheck c = kern::run_self_check(*backend_, spec.name, spec.in.type(), spec.out.type());
  if (c.ok()) {
    self_check_json_ = c.json();
    return;
  }
  const bool written = kern::write_self_check_report(c, self_check_report_);
  fail("train", c.line(), "; report ", written ? self_check_report_ : "not written (" + self_check_report_ + ")",
       ". Training stops before its first step: train with --strategy cpu, and run `anelab probe` (docs/macos.md)");
}

// Kernels current for T and the weights w; buffers sized for B sequences.
void KernelEngine::prepare(const float* w, int64_t B, int64_t T) {
  if (!cache_ || T != T_) {
    check_seq_len(T, name());
    const kern::TrainShape s = train_shape(T);
    runners_.clear();
    cache_ = std::make_unique<kern::KernelCache>(*backend_, s, strategy_);
    if (self_check_pending()) self_check(w, s);  // before the first compile of a kernel
    T_ = T, B_ = 0, seen_ = 0, stale_ = true;
    const double t0 = now_ms();
    for (kern::KernelKind k : kern::kAllKernelKinds)
      if (!kern::kernel_per_layer(k, strategy_)) cache_->shared(k);
    pending_ms_ += now_ms() - t0;
    for (int64_t l = 0; l < c_.n_layers; ++l) runners_.emplace_back(*cache_);
  }
  if (stale_ && strategy_ == kern::Strategy::kStatic) {   // rebuild + recompile 7 kernels per layer (main thread:
    const double t0 = now_ms();                           // the backend's budget counter is not shared)
    for (auto& r : runners_) r.release_static_kernels();  // all old-weight kernels first (maderix's order)
    for (int64_t l = 0; l < c_.n_layers; ++l) runners_[size_t(l)].set_weights(layer_weights(w, l));
    pending_ms_ += now_ms() - t0;
    stale_ = false;
  }
  const int n = cache_->compiles() - seen_;
  seen_ = cache_->compiles();
  compiles_ += n, pending_ += n;
  if (B != B_) {
    acts_.assign(size_t(c_.n_layers * B), SeqActs{});
    for (auto& a : acts_) a.x.resize(size_t(c_.dim * T));
    xout_.assign(size_t(B), std::vector<float>(size_t(c_.dim * T)));
    for (auto& gp : grads_) gp.assign(size_t(B), SeqGrads{});
    for (auto& gp : grads_)
      for (auto& s : gp) s.dy.resize(size_t(c_.dim * T));
    rows_.resize(size_t(B * T * c_.dim)), drows_.resize(size_t(B * T * c_.dim));
    if (dropout()) masks_.assign(size_t(c_.n_layers * B), SeqMasks{});
    B_ = B;
  }
}

// Restaging layer l (transposes + fp16 conversion into its own input surfaces) runs on the worker while the kernels
// of layers < l evaluate; forward() waits for layer l's ticket before its first kernel. `base` (dynamic, when stale:
// the weights' bands) and `adapters` (LoRA: their bands, every call) may each be null.
void KernelEngine::submit_restage(const float* base, const float* adapters) {
  restage_ticket_.assign(size_t(c_.n_layers), 0);
  restage_hidden_.assign(size_t(c_.n_layers), 0.0);
  const bool drop = adapters && dropout();
  const uint64_t micro = drop && micro_batch_ ? micro_batch_() : 0;  // the call's dropout stream
  for (int64_t l = 0; l < c_.n_layers; ++l)
    restage_ticket_[size_t(l)] = queue_.submit([this, base, adapters, l, drop, micro] {
      kern::LayerRunner& r = runners_[size_t(l)];
      const double s0 = r.times().stage_ms;
      if (base) r.set_weights(layer_weights(base, l));
      if (adapters) stage_adapters(l, adapters);
      if (drop) draw_masks(l, micro);
      restage_hidden_[size_t(l)] = r.times().stage_ms - s0;  // runner-timed; replaced by the wait below
    });
  if (base) stale_ = false;
}

// Embedding -> every layer on the kernels (taps kept per layer and sequence) -> xout_.
void KernelEngine::forward(const Batch& b) {
  const int64_t B = b.B, T = b.T, D = c_.dim, V = c_.vocab_size, L = c_.n_layers;
  const float* emb = layout_.embedding(const_cast<float*>(wb_));
  for (int64_t bi = 0; bi < B; ++bi) {  // gather rows [T, D], then one blocked transpose to [D, T]
    float* rows = rows_.data() + bi * T * D;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = b.tokens[size_t(bi * (T + 1) + t)];
      if (id < 0 || id >= V) fail("train", "token id ", id, " out of range for vocab_size ", V);
      std::copy_n(emb + int64_t(id) * D, D, rows + t * D);
    }
    transpose_blocked(rows, T, D, D, acts_[size_t(bi)].x.data(), T);
  }
  for (int64_t l = 0; l < L; ++l)
    for (int64_t bi = 0; bi < B; ++bi) {
      if (bi == 0 && size_t(l) < restage_ticket_.size()) wait(restage_ticket_[size_t(l)], &restage_wait_ms_);
      SeqActs& a = acts_[size_t(l * B + bi)];
      kern::LayerRunner& r = runners_[size_t(l)];
      if (dropout()) stage_masks(l, bi, {kern::KernelKind::kAttnFwd, kern::KernelKind::kFfnFwd});
      r.attn_forward(a.x.data(), a.attn);
      add_into(a.x2, a.x, a.attn.o);
      r.ffn_forward(a.x2.data(), a.ffn);
      add_into(l + 1 < L ? acts_[size_t((l + 1) * B + bi)].x : xout_[size_t(bi)], a.x2, a.ffn.y);
    }
}

// dWq, dWk, dWv (and with q/k norms their weight gradients) of one sequence, on the worker.
void KernelEngine::submit_qkv_dw(const SeqActs& a, const SeqGrads& s, const LayerPtrs& gl) {
  const kern::TrainShape& sh = cache_->shape();
  const int64_t S = T_, D = sh.dim, QD = sh.q_dim(), KD = sh.kv_dim(), HD = sh.head_dim;
  const int64_t Hq = sh.n_heads, Hkv = sh.n_kv_heads;
  const std::optional<models::NormDesc> qn = sh.q_norm, kn = sh.k_norm;  // both or neither (TrainShape::validate)
  queue_.submit([&a, &s, gl, D, QD, KD, S, HD, Hq, Hkv, qn, kn] {
    dw_acc(gl.wq, qn ? s.sdpa.dq_proj : s.sdpa.dq, a.attn.xnorm, QD, D, S);
    dw_acc(gl.wk, kn ? s.sdpa.dk_proj : s.sdpa.dk, a.attn.xnorm, KD, D, S);
    dw_acc(gl.wv, s.sdpa.dv, a.attn.xnorm, KD, D, S);
    if (qn) rms_dw_acc(gl.q_norm, s.sdpa.dq, a.attn.q, Hq, HD, S, static_cast<float>(qn->eps));
    if (kn) rms_dw_acc(gl.k_norm, s.sdpa.dk, a.attn.k, Hkv, HD, S, static_cast<float>(kn->eps));
  });
}

// One layer's backward for every sequence; dW / norm-weight gradients go to the worker.
void KernelEngine::layer_backward(int64_t l, int64_t B, float* g, double* wait_ms) {
  const kern::TrainShape& sh = cache_->shape();
  const int64_t S = T_, D = sh.dim, H = sh.hidden, QD = sh.q_dim();
  const float eps = static_cast<float>(sh.norm_eps);
  const size_t p = size_t(l % 2), q = 1 - p;
  const LayerPtrs gl = lora_ ? LayerPtrs{} : layout_.layer(g, l);  // LoRA: g holds the adapters' gradients
  const bool qk = sh.q_norm.has_value();                           // qkv_bwd also returns dq_proj / dk_proj
  kern::LayerRunner& r = runners_[size_t(l)];
  wait(last_ticket_[p], wait_ms);  // layer l+2's tasks still read grads_[p]
  for (int64_t bi = 0; bi < B; ++bi) {
    const SeqActs& a = acts_[size_t(l * B + bi)];
    SeqGrads& s = grads_[p][size_t(bi)];
    SeqGrads& nx = grads_[q][size_t(bi)];  // its dy receives dL/d(layer input)
    if (dropout()) stage_masks(l, bi, {kern::KernelKind::kFfnBwd, kern::KernelKind::kWoBwd, kern::KernelKind::kQkvBwd});
    r.ffn_backward(s.dy.data(), a.ffn, s.ffn);
    if (lora_)
      dy_ticket_[p] = queue_.submit([this, &a, &s, l, bi] {
        lora_acc(l, bi, LoraTarget::kDown, s.dy, a.ffn.gate);
        lora_acc(l, bi, LoraTarget::kGate, s.ffn.dh1, a.ffn.xnorm);
        lora_acc(l, bi, LoraTarget::kUp, s.ffn.dh3, a.ffn.xnorm);
      });
    else
      dy_ticket_[p] = queue_.submit([&a, &s, gl, D, H, S] {
        dw_acc(gl.w2, s.dy, a.ffn.gate, D, H, S);
        dw_acc(gl.w1, s.ffn.dh1, a.ffn.xnorm, H, D, S);
        dw_acc(gl.w3, s.ffn.dh3, a.ffn.xnorm, H, D, S);
      });
    r.rms_backward(kern::KernelKind::kRmsFfnBwd, s.ffn.dx.data(), a.x2.data(), s.dx2);
    add_inplace(s.dx2, s.dy);
    if (lora_)
      queue_.submit([this, &a, &s, l, bi] { lora_acc(l, bi, LoraTarget::kO, s.dx2, a.attn.attn); });
    else
      queue_.submit([&a, &s, gl, D, QD, S, eps] {
        dw_acc(gl.wo, s.dx2, a.attn.attn, D, QD, S);
        rms_dw_acc(gl.ffn_norm, s.ffn.dx, a.x2, 1, D, S, eps);
      });
    r.wo_backward(s.dx2.data(), s.da);
    r.sdpa_backward(a.attn, s.da.data(), s.sdpa);
    if (!qk && !lora_) submit_qkv_dw(a, s, gl);
    r.qkv_backward(a.attn, s.sdpa, s.dxn);
    if (qk && !lora_) submit_qkv_dw(a, s, gl);  // dWq / dWk need qkv_bwd's dq_proj / dk_proj
    if (lora_)
      queue_.submit([this, &a, &s, l, bi, qk] {
        lora_acc(l, bi, LoraTarget::kQ, qk ? s.sdpa.dq_proj : s.sdpa.dq, a.attn.xnorm);
        lora_acc(l, bi, LoraTarget::kK, qk ? s.sdpa.dk_proj : s.sdpa.dk, a.attn.xnorm);
        lora_acc(l, bi, LoraTarget::kV, s.sdpa.dv, a.attn.xnorm);
      });
    if (bi == 0) wait(dy_ticket_[q], wait_ms);  // layer l+1's dW2 task reads grads_[q] dy
    r.rms_backward(kern::KernelKind::kRmsAttBwd, s.dxn.data(), a.x.data(), nx.dy);
    add_inplace(nx.dy, s.dx2);
    if (lora_)
      last_ticket_[p] = queue_.submit([] {});
    else
      last_ticket_[p] = queue_.submit([&a, &s, gl, D, S, eps] { rms_dw_acc(gl.attn_norm, s.dxn, a.x, 1, D, S, eps); });
  }
}

double KernelEngine::step(const float* w, const Batch& b, float grad_scale, float* g, StepTimes* t) {
  const int64_t B = b.B, T = b.T, D = c_.dim, L = c_.n_layers;
  double t0 = now_ms(), wait_ms = 0;
  forward(b);
  double t1 = now_ms();
  for (int64_t bi = 0; bi < B; ++bi) transpose_blocked(xout_[size_t(bi)].data(), D, T, T, rows_.data() + bi * T * D, D);
  const double loss = head_.head_forward_backward(wb_, b, rows_.data(), grad_scale, lora_ ? nullptr : g, drows_.data());
  if (!lora_) {
    queue_.submit([this, g] { head_.head_classifier_dw(g); });
    submit_grads_final(layout_.final_norm(g) - g);
  }
  const size_t top = size_t((L - 1) % 2);
  for (int64_t bi = 0; bi < B; ++bi)
    transpose_blocked(drows_.data() + bi * T * D, T, D, D, grads_[top][size_t(bi)].dy.data(), T);
  double t2 = now_ms();
  for (int64_t l = L - 1; l >= 0; --l) {
    layer_backward(l, B, g, &wait_ms);
    if (!lora_) submit_grads_final(layout_.layer(g, l).attn_norm - g);
  }
  wait(queue_.submit([] {}), &wait_ms);  // every dW (and the classifier's: tied embeddings) is in g now
  float* demb = lora_ ? nullptr : layout_.embedding(g);
  for (int64_t bi = 0; demb && bi < B; ++bi) {  // dL/d(layer 0 input) sits in grads_[1] (parity of layer -1)
    float* rows = rows_.data() + bi * T * D;
    transpose_blocked(grads_[1][size_t(bi)].dy.data(), D, T, T, rows, D);
    for (int64_t tt = 0; tt < T; ++tt) {
      float* e = demb + int64_t(b.tokens[size_t(bi * (T + 1) + tt)]) * D;
      for (int64_t i = 0; i < D; ++i) e[i] += rows[tt * D + i];
    }
  }
  if (t) {
    const double t3 = now_ms();
    t->fwd += t1 - t0, t->cls += t2 - t1, t->bwd += t3 - t2, t->cpu_dw += wait_ms;
  }
  return loss;
}

double KernelEngine::forward_backward(const float* w, const Batch& b, float grad_scale, float* g, StepTimes* t) {
  if (b.B <= 0 || b.T <= 0 || int64_t(b.tokens.size()) != b.B * (b.T + 1))
    fail("train", "batch of ", b.tokens.size(), " tokens does not hold B=", b.B, " x (T+1)=", b.T + 1);
  wb_ = lora_ ? base_ : w;
  w_ = w, lg_ = lora_ ? g : nullptr;
  if (lora_) {
    head_lora_ = LoraStep{lora_, w, g, 0, 0, false};
    head_.set_lora(&head_lora_);  // the head: no final-norm or classifier gradient
  }
  prepare(wb_, b.B, b.T);
  double stage0 = 0, eval0 = 0;
  for (auto& r : runners_) stage0 += r.times().stage_ms, eval0 += r.times().eval_ms;
  restage_ticket_.clear(), restage_hidden_.clear(), restage_wait_ms_ = 0;
  double loss = 0;
  try {
    if (stale_ || lora_) submit_restage(stale_ ? wb_ : nullptr, lora_ ? w : nullptr);  // LoRA: the base once
    loss = step(w, b, grad_scale, g, t);
  } catch (...) {
    stale_ = true;  // a failed restage leaves the surfaces undefined
    try {           // no task may outlive the call (they write into g / the surfaces)
      queue_.drain();
    } catch (...) {
    }
    throw;
  }
  if (t) {  // staging: slot copies + the part of the restaging the forward had to wait for
    double stage1 = 0, eval1 = 0, hidden = 0;
    for (auto& r : runners_) stage1 += r.times().stage_ms, eval1 += r.times().eval_ms;
    for (double h : restage_hidden_) hidden += h;
    t->staging += stage1 - stage0 - hidden + restage_wait_ms_, t->kernel += eval1 - eval0;
  }
  return loss;
}

}  // namespace

namespace {
// A q / k norm as the shape keeps it: its kind and eps (layer_steps names its weight).
std::optional<models::NormDesc> head_norm_params(const std::optional<models::NormDesc>& n) {
  if (!n) return std::nullopt;
  return models::NormDesc{n->kind, n->eps};
}

// The shape of layer l's steps (check_kernel_steps has refused the parts the kernels lack).
kern::TrainShape layer_train_shape(const models::ModelDesc& d, int64_t l, int64_t T) {
  constexpr const char* kExecutor = "the MIL training kernels";
  kern::TrainShape s;
  s.dim = d.dim, s.seq = T;
  std::optional<float> eps;  // the kernels take one eps for both pre-norms
  for (const models::Step& st : d.layers[static_cast<size_t>(l)].steps) {
    if (!st.pre_norm) models::unsupported("train", kExecutor, l, st.kind, "a step without a pre-norm");
    if (eps && st.pre_norm->eps != *eps)
      models::unsupported("train", kExecutor, l, st.kind, "pre-norms of different eps in one layer");
    eps = st.pre_norm->eps;
    switch (st.kind) {
      case models::StepKind::kAttention: {
        const models::AttnDesc& a = st.attn;
        s.n_heads = a.n_heads, s.n_kv_heads = a.n_kv_heads, s.head_dim = a.head_dim;
        s.rope = a.rope.style, s.rope_theta = a.rope.theta, s.rope_scaling = a.rope.scaling;
        s.q_norm = head_norm_params(a.q_norm);
        s.k_norm = head_norm_params(a.k_norm);
        break;
      }
      case models::StepKind::kFfn:
        s.hidden = st.ffn.hidden;
        break;
      case models::StepKind::kLinearAttention:  // check_kernel_steps refuses it first
        models::unsupported("train", kExecutor, l, st.kind, "a Gated DeltaNet mixer");
    }
  }
  if (eps) s.norm_eps = *eps;
  return s;
}

bool same_norm(const std::optional<models::NormDesc>& a, const std::optional<models::NormDesc>& b) {
  return a.has_value() == b.has_value() && (!a || (a->kind == b->kind && a->eps == b->eps));
}
}  // namespace

kern::TrainShape kernel_train_shape(const models::ModelDesc& d, int64_t T) {
  if (d.layers.empty()) fail("train", "model '", d.arch, "' has no layers");
  const kern::TrainShape s = layer_train_shape(d, 0, T);
  for (int64_t l = 1; l < static_cast<int64_t>(d.layers.size()); ++l) {  // the kernels are shared by every layer
    const kern::TrainShape o = layer_train_shape(d, l, T);
    const bool same = o.str() == s.str() && o.norm_eps == s.norm_eps && o.rope == s.rope &&
                      o.rope_theta == s.rope_theta && o.rope_scaling == s.rope_scaling &&
                      same_norm(o.q_norm, s.q_norm) && same_norm(o.k_norm, s.k_norm);
    if (!same)
      fail("train", "layer ", l, " has the shape ", o.str(), ", layer 0 ", s.str(),
           ": the MIL training kernels take one shape (sizes, norms, RoPE) for every layer");
  }
  return s;
}

kern::TrainShape kernel_lora_shape(kern::TrainShape s, const LoraConfig& lc) {
  s.lora_rank = lc.rank, s.lora_scale = lc.scale(), s.lora_dropout = lc.dropout;
  s.lora_targets.clear();
  for (int t = 0; t < kLoraTargets; ++t)
    if (lc.targets[size_t(t)] && lora_kernel_weight(LoraTarget(t)))  // (the DeltaNet targets have no kernel)
      s.lora_targets.push_back(lora_kernel_weight(LoraTarget(t)));
  return s;
}

std::unique_ptr<StepEngine> make_kernel_engine(const KernelEngineOptions& o, const ParamLayout& layout) {
  return std::make_unique<KernelEngine>(o, layout);
}

std::unique_ptr<StepEngine> make_kernel_lora_engine(const KernelEngineOptions& o, const ParamLayout& layout,
                                                    const float* base, const LoraLayout& lora, uint64_t seed,
                                                    std::function<uint64_t()> micro_batch) {
  return std::make_unique<KernelEngine>(o, layout, base, lora, seed, std::move(micro_batch));
}

}  // namespace anelab::train
