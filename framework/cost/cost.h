// Cost model of the ANE per chip (issue 41, docs/estimate.md): what a MIL program, a training step and a
// prefill / decode will take on an Apple chip, from the program's op shapes and a few per-chip parameters
// calibrated on published measurements (../shared/reference/ane_digest.md §4.6, §5.7, §8).
//
//   op time       roofline: max(flops / (peak · class efficiency · spatial efficiency), DRAM bytes / bandwidth)
//                 spatial efficiency eff(S) = S / (S + s_half)  (S: the op's last dimension; the ANE fills
//                 its lanes along the spatial axis: M3 Pro 9.98 TFLOPS at S = 64 vs 16.77 at S = 2048)
//   program time  dispatch + fill + max(Σ op time, the rest of the DRAM traffic) + drain; weights (BLOBFILE
//                 consts) are streamed from DRAM on every evaluation (a step evaluates dozens of programs: none
//                 stays resident) and the program's I/O surfaces are read / written once; intermediates stay on
//                 chip unless the working set exceeds the SRAM, then they go to DRAM and back (the spill).
//                 fill: the input surfaces and the first weight-bearing op's weights arrive before any compute;
//                 drain: the output surfaces leave after it (nothing overlaps them)
//   int8          a program with quantize ops (W8A8) runs its convs / matmuls int8_speedup times faster;
//                 constexpr_affine_dequantize weights stream one byte per element
//   train step    ANE (every kernel once per layer) + IOSurface staging (every surface byte once, host
//                 memcpy) + the host's critical path (the main thread's classifier GEMMs, the worker thread's dW
//                 GEMMs beyond what hides under the ANE, Adam amortised over the accumulation); the static strategy
//                 also recompiles (LoRA: the base frozen, no dW, dE or base Adam: the worker computes the adapters'
//                 gradients, Adam updates the adapters, the kernels compile once). Each of the two threads' GEMMs runs
//                 on one matrix unit: with two units the worker also runs under the main thread's GEMMs, with one it
//                 waits for them
//   prefill       one whole-layer program per layer at the bucket + the classifier on the host
//   decode        one layer program per layer and token at the smallest bucket (weights streamed each token)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/mil/ir.h"

namespace anelab::cost {

// The parameters of one chip. ANE terms come from the chip's family (M1 Pro and M1 share the M1's
// 16-core ANE; every M4 shares the M4's); host terms from its CPU.
struct Chip {
  std::string name;             // "m4", "m4-max", ...
  std::string family;           // device profile: "m1" ... "m5"
  std::string description;      // "Apple M4 (4 P + 6 E cores, one P-cluster)"
  double peak_fp16_tflops = 0;  // ANE fp16 at unbounded spatial extent (class kConv)
  double s_half = 46;           // spatial extent at which the ANE reaches half its peak
  double int8_speedup = 1;      // W8A8 convs / matmuls vs fp16 (1: no int8 datapath reported)
  double dram_gbps = 0;         // DRAM bandwidth the ANE streams weights and surfaces with
  double sram_mb = 32;          // on-chip working memory
  double dispatch_us = 70;      // one evaluation's fixed cost (request, driver, completion)
  double compile_ms = 25;       // one program's compile + load (static training recompiles)
  double host_gflops = 0;       // one host thread's fp32 GEMM throughput (Accelerate on one AMX / SME unit)
  double host_gemm_units = 1;   // matrix units the trainer's two GEMM threads reach: 1 (one cluster), 2
  double host_gbps = 0;         // host memory bandwidth: Adam's streams
  double staging_gbps = 25;     // one host thread's writes / reads of IOSurfaces (fp16 conversion, packing)
};

// Every known chip (m1, m1-pro, m2, m3, m3-pro, m4, m4-pro, m4-max, m5, m5-max).
const std::vector<Chip>& chips();
// The named chip; throws "[cost] unknown device 'X' (known: ...)".
const Chip& chip(const std::string& name);
std::vector<std::string> chip_names();

// Per-op efficiency classes: the fraction of peak an op of the class reaches at large spatial extent.
enum class OpClass : uint8_t {
  kConv,         // conv with const weights (the ANE's native op)
  kMatmul,       // matmul: runtime operands (attention, dynamic weights)
  kElementwise,  // add, mul, silu, exp, rsqrt, ... on the vector unit
  kReduce,       // reduce_*, softmax
  kMove,         // reshape, transpose, slice, concat, split, cast: data movement
  kFree,         // const, constexpr_*: no run-time work
};
const char* op_class_name(OpClass c);
OpClass op_class(const std::string& op);
double class_efficiency(OpClass c);  // kConv 1.0, kMatmul 0.6, ...

struct OpCost {
  std::string op, name;
  OpClass cls = OpClass::kFree;
  double flops = 0;         // multiply-adds count 2
  double weight_bytes = 0;  // const weights the op streams
  double act_bytes = 0;     // the op's output bytes
  double ms = 0;
};

struct ProgramCost {
  std::string name;
  double flops = 0;
  double weight_bytes = 0;  // const weights (streamed from DRAM every evaluation)
  double io_bytes = 0;      // input + output surfaces
  double working_set = 0;   // weights + the largest live activations: compared with the SRAM
  bool spills = false;      // an op's weights + live activations exceed the SRAM: intermediates go through DRAM
  bool int8 = false;        // quantize ops: W8A8
  double compute_ms = 0;    // Σ op time (roofline of each op)
  double memory_ms = 0;     // weights + I/O (+ spilled intermediates) over the DRAM bandwidth
  double fill_ms = 0;       // the part of memory_ms before the first op: input surfaces + its weights
  double drain_ms = 0;      // the part of memory_ms after the last op: output surfaces
  double dispatch_ms = 0;
  double ms = 0;  // dispatch + fill + max(compute, memory - fill - drain) + drain
  double tflops() const { return ms > 0 ? flops / (ms * 1e9) : 0; }
  std::vector<OpCost> ops;
};

struct CostOptions {
  // What-if: weights that fit the SRAM stay there between evaluations. Off everywhere the model is checked: even a
  // benchmark loop of one program restreams them (ane-infer's single-op conv, 2 MB: 1.1 TFLOPS measured, 1.49
  // resident). The tests use it to read a chain's compute term alone.
  bool resident = false;
};
// The cost of evaluating function `fn` ("" = the first) of `p` once on `chip`.
ProgramCost program_cost(const mil::Program& p, const Chip& chip, const std::string& fn = "", CostOptions opt = {});

// Several programs fused into one vs the same work split into single programs (one dispatch each):
// the time of each and the fused speedup.
struct FusionCost {
  double fused_ms = 0, split_ms = 0;
};
FusionCost fusion_cost(const mil::Program& p, const Chip& chip, const std::string& fn = "");

// Chip parameter files: `estimate --calibrate probe.json --save chip.json` writes the refit chip, `--device-file
// chip.json` reads it instead of a built-in chip. Format (framework/cost/chip_file.cpp), one JSON object:
//   "schema": "anelab.chip/2"                     the version: any other value is refused
//   "name", "family", "description": strings      family one of m1 ... m5 (the device profile)
//   every number of Chip under its field name     peak_fp16_tflops, s_half, int8_speedup, dram_gbps, sram_mb,
//                                                 dispatch_us, compile_ms, host_gflops, host_gemm_units, host_gbps,
//                                                 staging_gbps:
//                                                 each present, finite and > 0
// and no other key. save_chip writes atomically (temp file + fsync + rename); chip_from_json / load_chip throw
// "[cost] <source>: field 'X' is <value>, expected ..." naming the first bad field.
std::string chip_to_json(const Chip& c);
Chip chip_from_json(const std::string& text, const std::string& source);
void save_chip(const Chip& c, const std::string& path);
Chip load_chip(const std::string& path);

// ---- workloads ------------------------------------------------------------------------------------------

// One kernel of a workload: its cost and how often it runs per step / token.
struct KernelRow {
  std::string name;
  ProgramCost cost;
  int64_t calls = 0;         // evaluations per step (training) or per bucket (prefill)
  double staging_bytes = 0;  // host bytes written + read per call (IOSurface staging)
  double total_ms() const { return cost.ms * double(calls); }
};

// A training step: per-kernel table plus the host terms. B = 1 sequence of `tokens` tokens.
struct TrainShapeInfo {
  int64_t n_layers = 0, dim = 0, vocab = 0, tokens = 0;
  // Rows the host classifier computes: the vocabulary, or fewer where the trainer compacts it to the tokens its
  // data uses (maderix's dynamic pipeline: 9.2K of 32K-152K; its static one and anelab's trainer: all). 0 = vocab.
  int64_t cls_vocab = 0;
  double layer_params = 0;  // weights of one layer (the dW GEMMs' size)
  double total_params = 0;  // all trainable parameters (Adam)
  int accum_steps = 10;     // steps per weight update (maderix ACCUM: Adam and static recompiles amortised)
  bool static_weights = false;
  int64_t kernels_per_update = 0;  // static: programs recompiled after every update
  // LoRA (the base frozen): the worker's GEMMs are the adapters' gradients (lora_grad_flops per step) instead of every
  // dW and dE, Adam updates total_params = the adapters; nothing is recompiled after an update: compiles_once programs
  // are compiled (and, dynamic, staged_once_bytes of the base's bands staged) once before the first step, amortised
  // over `steps`.
  bool lora = false;
  double lora_grad_flops = 0;
  int64_t compiles_once = 0;
  double staged_once_bytes = 0;
  int64_t steps = 1;
};

struct StepCost {
  std::vector<KernelRow> kernels;
  double ane_ms = 0;          // Σ kernel time
  double staging_ms = 0;      // IOSurface writes + reads on the host
  double cls_ms = 0;          // the main thread's classifier GEMMs: logits = h·Eᵀ and dh = dlogits·E
  double dw_ms = 0;           // the worker's GEMMs: every dW and the classifier's dE (LoRA: the adapters' gradients)
  double dw_exposed_ms = 0;   // the part of dw_ms the main thread's ANE waits (and, on two units, GEMMs) do not hide
  double adam_ms = 0;         // optimizer, per step (amortised)
  double compile_ms = 0;      // static: recompiles per step (amortised); LoRA: once_ms / steps
  double once_ms = 0;         // LoRA: before the first step, the compiles and the base's one staging (dynamic)
  int64_t compiles_once = 0;  // LoRA: programs compiled before the first step (static 2 + 7·L, dynamic 9)
  double adapter_params = 0;  // LoRA: A and B of every layer (estimate_train)
  double adapter_bytes = 0;   // LoRA: fp16 bytes of the adapters' bands staged per step, every kernel and layer
  double host_ms() const { return cls_ms + dw_exposed_ms + adam_ms; }
  double ms_per_step() const { return ane_ms + staging_ms + host_ms(); }  // steady state (what maderix reports)
  double ms_per_step_with_compile() const { return ms_per_step() + compile_ms; }
};
StepCost train_step_cost(std::vector<KernelRow> kernels, const TrainShapeInfo& s, const Chip& chip);

// One layer kernel of the MIL prefill and the layers that run it: a model whose layers differ (Qwen3.5's DeltaNet and
// gated-attention layers) has one per kind of layer, each costed once.
struct LayerKernelCost {
  std::string name;                  // "attention", "deltanet", ...
  int64_t count = 0;                 // layers of this kind
  std::vector<ProgramCost> prefill;  // its program per bucket (the order of the buckets)
  ProgramCost decode;                // its program one token's decode runs (the smallest bucket's)
};

struct InferCost {
  struct Bucket {
    int64_t tokens = 0;
    std::vector<double> kernel_ms;  // per LayerKernelCost: count x its program
    double layers_ms = 0;           // Σ kernel_ms: every layer
    double classifier_ms = 0;       // the last position's classifier on the host
    double ms = 0;                  // layers_ms + classifier_ms
    double tok_per_s = 0;
  };
  std::vector<Bucket> prefill;
  double decode_ms = 0;  // per token
  double decode_tok_per_s = 0;
};
// The prefill per bucket: each layer kernel's program times its count, summed, plus the classifier (dim x vocab) on
// the host; decode the same with each kernel's decode program. Throws "[cost] ..." when a kernel's programs are not
// one per bucket.
InferCost infer_cost(const std::vector<int64_t>& buckets, const std::vector<LayerKernelCost>& kernels, int64_t dim,
                     int64_t vocab, const Chip& chip);

// ---- calibration from `anelab probe` ---------------------------------------------------------------------

// What `anelab estimate --calibrate probe.json` refits: each parameter the probe measures, its value before
// and after, and the parameters it cannot measure with why.
struct Calibration {
  Chip before, after;
  std::string numbers;  // the report's own note on whose timings they are (the fake shim's: the emulator's)
  struct Change {
    std::string param, from_section;
    double before = 0, after = 0;
  };
  std::vector<Change> changed;
  std::vector<std::pair<std::string, std::string>> not_fitted;  // parameter, why
};
// `json_text` is a probe report (schema anelab.probe/2); `device` ("" = the report's device_profile) names
// the chip to refit. Throws "[cost] <source>: ..." naming the field for a report it cannot read.
Calibration calibrate(const std::string& json_text, const std::string& source, const std::string& device);

}  // namespace anelab::cost
