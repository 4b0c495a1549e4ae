// KernelEngine: the `static` and `dynamic` strategies of `anelab train` — a StepEngine whose transformer
// layers run as the per-layer MIL training kernels of framework/kernels on a backend (the emulator here,
// the ANE on Apple hosts), with the rest of the step on the CPU.
//
// One micro-batch of B sequences of T tokens (each sequence is one kernel evaluation at S = T, a
// multiple of rt::dense_width_multiple(fp16): whole device rows):
//   CPU      embedding gather straight into the kernels' channel-first x [D, T] per sequence
//   kernels  per layer: attn_fwd -> x2 = x + o (CPU) -> ffn_fwd -> x' = x2 + y (CPU); taps kept per (layer, seq)
//   CPU      x_L [D, T] -> [N, D] (blocked transpose), CpuModel's head: final RMSNorm, classifier, cross-entropy,
//            dlogits * grad_scale, their backward -> dx_L [N, D] -> [D, T] per sequence
//   kernels  per layer, last to first (runner.h order): ffn_bwd, rms_ffn_bwd (+ dy, CPU), wo_bwd, sdpa_bwd1/2,
//            qkv_bwd, rms_att_bwd (+ dx2, CPU)
//   worker   every dW = dY·Xᵀ (Eigen, [C, S] operands as they come from the kernels: no transposes), the RMSNorm
//            weight gradients and the classifier gradient run on ONE worker thread (a serial queue) while the
//            main thread evaluates the next kernels. Backward buffers are double-buffered by layer parity;
//            before a layer reuses a buffer set the main thread waits for the tasks that read it; all tasks
//            finish before forward_backward returns (then the embedding gradient is scattered).
//
// Weights: kStatic bakes them into 7 kernels per layer (+ sdpa_bwd1/2 shared, compiled once per process):
// weights_updated() marks every layer stale, and the next forward_backward recompiles 7·L kernels —
// compiles_needed() says so, and the trainer checkpoints + exec-restarts when Backend::compiles_left() is short.
// kDynamic compiles 9 kernels once and restages the weight bands of every layer's input surfaces after an update:
// on the worker, layer by layer, while the forward kernels of the layers below run (the forward waits for layer
// l's restaging before its first kernel; only that wait counts as staging).
//
// Threads: the backend is used from the calling thread only (evaluate, and the static compiles: a backend's
// thread pool runs one job at a time and its budget counter is not shared); the worker runs single-threaded Eigen
// (a serial thread, train/parallel.h: it never dispatches to the pool the main thread uses) and restaging (plain
// memory writes into surfaces the main thread is not using yet).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "framework/core/model_desc.h"
#include "framework/kernels/train.h"
#include "train/config.h"
#include "train/lora.h"
#include "train/step_engine.h"

namespace anelab::train {

struct KernelEngineOptions {
  std::string strategy = "dynamic";  // static | dynamic
  std::string backend = "emulator";
  std::string device;       // device profile ("" = backend default)
  int compile_budget = -1;  // per-process compile budget (-1: the device profile's)
  int64_t seq_len = 0;      // T the kernels are built for (a batch with another T rebuilds them)
  // Backend "ane": before the first step the self-check (framework/kernels/self_check.h) runs attn_fwd's
  // I/O types on the device and on the emulator; a difference stops training, its report written here
  // ("" = <temp dir>/anelab-self-check.json).
  std::string self_check_report;
};

// The training kernels' shape for the layers of the description d at T tokens per sequence
// (kern::build_layer_kernels): sizes, the pre-norms' eps, RoPE and the q / k norms of its steps. Throws naming the
// layer when a layer's shape differs from layer 0's (the kernels are shared by every layer).
kern::TrainShape kernel_train_shape(const models::ModelDesc& d, int64_t T);

// The LoRA kernels' shape (`train --lora --strategy static | dynamic`, and `estimate train --lora`): s with
// TrainShape::lora_rank, lora_scale (alpha / r) and lora_targets, the kernels' names of lc's targets (q -> wq,
// k -> wk, v -> wv, o -> wo, gate -> w1, up -> w3, down -> w2).
kern::TrainShape kernel_lora_shape(kern::TrainShape s, const LoraConfig& lc);

// Throws "[backend] ane: no Apple Neural Engine on this host ..." etc. when the backend cannot be created.
std::unique_ptr<StepEngine> make_kernel_engine(const KernelEngineOptions& o, const ParamLayout& layout);

// `train --lora --strategy static | dynamic`: the frozen base (`base` [P], kept alive by the caller) is baked into
// the 7·L weight-bearing kernels ONCE (static: 2 + 7·L compiles) or staged ONCE into the weight bands of the 9
// shared kernels' per-layer input surfaces (dynamic: 9 compiles); compiles_needed() is 0 after the first step and
// weights_updated() neither recompiles nor restages anything. The adapters enter the weight-bearing kernels as
// input bands (kern::TrainShape::lora_rank: y = W x + s·B(A x) in MIL, and Wᵀ + s·AᵀBᵀ in the backward kernels),
// restaged on the worker before every forward. forward_backward's w / g are the adapters and their gradients
// (LoraLayout's flat buffer): dA, dB come from the kernels' taps on the worker (dB += s·dY·(A X)ᵀ,
// dA += s·(Bᵀ dY)·Xᵀ, X the projection's input, dY the gradient of its output); no base gradient is computed (no dW,
// norm, classifier or embedding gradient). Adapter dropout (lora.lora().dropout p > 0): the masks CpuModel draws for
// LoraStep{seed, micro_batch()} (lora_dropout_stream, asked once per call; no micro_batch: 0) enter the kernels as 0 /
// 1 mask bands of every sequence (kern::TrainShape::lora_dropout: y = W x + s/(1-p)·B(A(x ⊙ m01)), the transposed
// products s/(1-p)·m01 ⊙ (AᵀBᵀ dy)), and dA, dB take X ⊙ m on the worker. Static throws, before any compile, when
// 2 + 7·L is over the compile budget left (LoRA has nothing to gain from an exec-restart), naming what dynamic needs.
std::unique_ptr<StepEngine> make_kernel_lora_engine(const KernelEngineOptions& o, const ParamLayout& layout,
                                                    const float* base, const LoraLayout& lora, uint64_t seed = 0,
                                                    std::function<uint64_t()> micro_batch = {});

}  // namespace anelab::train
