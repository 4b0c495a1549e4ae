// Host-side execution of the training kernels (train.h) on a backend: stages activations and weights
// through each kernel's IO layouts, evaluates, and returns the taps as fp32 [C, S] row-major arrays
// (channel-first, element (c, t) at c*S + t, like every CPU buffer of the trainer).
//
//   auto be = rt::create_backend("emulator");
//   kern::KernelCache cache(*be, shape, kern::Strategy::kDynamic);   // shared by all layers
//   std::vector<kern::LayerRunner> layers;  for (...) layers.emplace_back(cache);
//   layers[l].set_weights(w_l);          // static: frees, then recompiles the layer's 7 weight-bearing kernels
//                                        // dynamic: restages weights into the layer's input surfaces
//   layers[l].attn_forward(x, attn);     // x [D, S]
//   ... residual x2 = x + attn.o (CPU) ...
//   layers[l].ffn_forward(x2, ffn);
//   backward (dy = dL/d layer output):
//   layers[l].ffn_backward(dy, ffn, fg);             // fg.dx = dL/d xnorm2
//   layers[l].rms_backward(KernelKind::kRmsFfnBwd, fg.dx.data(), x2, dx2);  dx2 += dy (CPU)
//   layers[l].wo_backward(dx2, da);
//   layers[l].sdpa_backward(attn, da.data(), sg);     // sg.dq / dk pre-RoPE, dk / dv GQA-reduced
//   layers[l].qkv_backward(attn, sg, dxn);            // q/k norms: also sg.dq_proj / dk_proj (their backward)
//   layers[l].rms_backward(KernelKind::kRmsAttBwd, dxn.data(), x, dx);   dx += dx2 (CPU)
//   dW on the CPU: dWo = dx2·attnᵀ, dW2 = dy·gateᵀ, dW1 = dh1·xnorm2ᵀ, dW3 = dh3·xnorm2ᵀ,
//   dWq = dq·xnormᵀ, dWk = dk·xnormᵀ (q/k norms: dq_proj, dk_proj), dWv = dv·xnormᵀ, d rms weights (and q_norm /
//   k_norm: per head) from x, r and the upstream grads.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/backends/registry.h"
#include "framework/kernels/train.h"
#include "framework/runtime/backend.h"
#include "framework/runtime/surface.h"

namespace anelab::kern {

struct AttnTaps {             // attn_fwd outputs, fp32 [C, S]
  std::vector<float> o;       // [D]  Wo · attn
  std::vector<float> attn;    // [QD] attention output before Wo
  std::vector<float> q_rope;  // [QD]
  std::vector<float> k_rope;  // [KVD]
  std::vector<float> v;       // [KVD]
  std::vector<float> xnorm;   // [D]
  std::vector<float> q, k;    // [QD], [KVD] q/k norms only: Wq·xnorm, Wk·xnorm before the head norms
};
struct FfnTaps {              // ffn_fwd outputs
  std::vector<float> y;       // [D]  W2 · gate
  std::vector<float> h1, h3;  // [H]
  std::vector<float> gate;    // [H]  silu(h1) * h3
  std::vector<float> xnorm;   // [D]
};
struct FfnGrads {
  std::vector<float> dx;        // [D] dL/d xnorm2
  std::vector<float> dh1, dh3;  // [H]
};
struct SdpaGrads {
  std::vector<float> dq;       // [QD]  dL/d(Wq·xnorm), pre-RoPE (q/k norms: dL/d of the normed q)
  std::vector<float> dk, dv;   // [KVD] pre-RoPE, reduced over the GQA groups
  std::vector<float> dq_proj;  // [QD]  q/k norms only (qkv_backward): dL/d(Wq·xnorm)
  std::vector<float> dk_proj;  // [KVD] q/k norms only: dL/d(Wk·xnorm)
};

// Compiled kernels shared by every layer of one model: the weight-free sdpa_bwd1/2 (both strategies) and,
// under kDynamic, every kernel. Compiles lazily, once per kind.
class KernelCache {
 public:
  KernelCache(rt::Backend& backend, const TrainShape& shape, Strategy strategy);
  struct Entry {
    KernelSpec spec;
    std::unique_ptr<rt::Kernel> kernel;
  };
  Entry& shared(KernelKind k);  // throws for a per-layer (static weight-bearing) kind
  rt::Backend& backend() { return backend_; }
  const TrainShape& shape() const { return shape_; }
  Strategy strategy() const { return strategy_; }
  int compiles() const { return compiles_; }  // compiles by this cache and its runners
  // Compiles through the backend, counting; throws "[kernels] compile <name>: ..." on failure: an
  // rt::CompileError for kBudgetExhausted / kCompileFailed (the caller should checkpoint and restart),
  // an anelab::Error otherwise.
  std::unique_ptr<rt::Kernel> compile(const KernelSpec& spec);

 private:
  rt::Backend& backend_;
  TrainShape shape_;
  Strategy strategy_;
  int compiles_ = 0;
  std::array<std::unique_ptr<Entry>, kAllKernelKinds.size()> entries_;
};

class LayerRunner {
 public:
  explicit LayerRunner(KernelCache& cache);
  LayerRunner(LayerRunner&&) noexcept;
  ~LayerRunner();

  // static: discards the layer's weight-bearing kernels (Backend::discard), then compiles them from w;
  // dynamic: restages w into the kernels' weight bands (the LoRA bands are set_adapters').
  void set_weights(const LayerWeights& w);
  // static: discards the weight-bearing kernels now (before the recompiles of every layer, as maderix
  // frees all layer kernels first); set_weights() must follow before the next run().
  void release_static_kernels();
  // LoRA (shape lora_rank > 0, either strategy, after set_weights): stages the layer's adapters into the LoRA bands
  // of its weight-bearing kernels; adapter(w) gives A [r, in] and B [out, r] row-major of projection w ("wq" ...
  // "w2"). No compile: the kernels read the bands at every evaluation (dynamic: set_weights leaves them alone).
  struct Adapter {
    std::span<const float> a, b;
  };
  void set_adapters(const std::function<Adapter(const std::string&)>& adapter);
  // LoRA dropout (shape lora_dropout > 0): stages one sequence's 0 / 1 masks into the mask bands of the kernels
  // `kinds` (KernelSpec::lora_masks, transposed where the band is); mask(w) gives projection w's [in, S] row-major.
  // No compile.
  void set_masks(std::initializer_list<KernelKind> kinds, const std::function<const float*(const std::string&)>& mask);

  void attn_forward(const float* x, AttnTaps& out);                       // x [D, S]
  void ffn_forward(const float* x2, FfnTaps& out);                        // x2 [D, S]
  void ffn_backward(const float* dy, const FfnTaps& fwd, FfnGrads& out);  // dy [D, S]
  void wo_backward(const float* dx2, std::vector<float>& da);             // da [QD, S]
  void sdpa_backward(const AttnTaps& fwd, const float* da, SdpaGrads& out);
  void qkv_backward(const SdpaGrads& g, std::vector<float>& dxn);  // dxn [D, S] (no q/k norms)
  // Either shape; with q/k norms it reads fwd.q / fwd.k and also fills g.dq_proj / g.dk_proj.
  void qkv_backward(const AttnTaps& fwd, SdpaGrads& g, std::vector<float>& dxn);
  // which = kRmsAttBwd | kRmsFfnBwd; dy = dL/d xnorm, x = the norm's input; dx [D, S]
  void rms_backward(KernelKind which, const float* dy, const float* x, std::vector<float>& dx);

  // Raw access for callers that chain kernels themselves: stage the named input slots, evaluate,
  // read back the named output slots.
  using In = std::pair<const char*, const float*>;
  using Out = std::pair<const char*, std::vector<float>*>;
  void run(KernelKind k, std::initializer_list<In> ins, std::initializer_list<Out> outs);
  const KernelSpec& spec(KernelKind k);

  // Wall time of run(): staging (fp32 <-> fp16 slot copies, and set_weights' dynamic restaging) and
  // backend evaluation, accumulated over this runner's calls (callers reset it as they like).
  struct Times {
    double stage_ms = 0, eval_ms = 0;
    int64_t evals = 0;
  };
  Times& times() { return times_; }

 private:
  struct Slot;
  Slot& slot(KernelKind k);
  KernelCache* cache_;
  std::array<std::unique_ptr<Slot>, kAllKernelKinds.size()> slots_;
  bool has_weights_ = false;
  Times times_;
};

}  // namespace anelab::kern
