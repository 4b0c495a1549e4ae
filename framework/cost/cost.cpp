// The cost model (cost.h): the chip table, per-op roofline, program, step and inference sums.
// Where each parameter comes from: docs/estimate.md ("fitted" = solved from the one published figure named
// in the comment; the other figures of that page are held out).
#include "framework/cost/cost.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "framework/core/error.h"

namespace anelab::cost {

namespace {

// Spatial efficiency eff(S) = S / (S + s_half): s_half = 46 solves M3 Pro's 9.98 TFLOPS at S = 64 against its
// 16.77 at S = 2048 (maderix/ANE benchmarks/ANE_BENCHMARK_REPORT.md, inmem_peak.m): 9.98/16.77 = eff(64)/eff(2048).
constexpr double kSHalf = 46;
double spatial_eff(double s, double s_half) { return s / (s + s_half); }

// peak such that a program at spatial extent s measures `tflops`.
double peak_from(double tflops, double s) { return tflops / spatial_eff(s, kSHalf); }

// IOSurface staging is one host thread's work (fp16 conversion, packing) at the M4's P-core clock, fitted on
// maderix/ANE commit cb474e1's M4 dynamic timing line: io_fwd 12 + io_bwd 15 ms for what anelab's Stories110M dynamic
// kernels stage (~670 MB per step). Other chips scale it by their fastest cores' clock.
constexpr double kM4CoreGhz = 4.4;
constexpr double kM4StagingGbps = 25;

Chip family_chip(const std::string& fam) {
  Chip c;
  c.family = fam;
  c.name = fam;
  c.s_half = kSHalf;
  if (fam == "m1") {
    c.peak_fp16_tflops = peak_from(5.40, 64);  // fitted: M1 inmem_peak 5.40 TFLOPS (dev-erik/ANE bec6651)
    c.dram_gbps = 110 * 68.0 / 120;            // assumed: M4's scaled by the memory (68 vs 120 GB/s)
    c.sram_mb = 16;                            // dev-erik/ANE internals table: A14/M1 ~16 MB (not measured)
    c.host_gflops = 395;  // one unit; fitted: M1 (Air) static Stories110M 228.5 ms/step (dev-erik/ANE bec6651)
    c.host_gbps = 60;
  } else if (fam == "m2") {
    c.peak_fp16_tflops = peak_from(5.40, 64) * 15.8 / 11.0;  // assumed: Apple's rated 15.8 vs 11 TOPS
    c.dram_gbps = 110 * 100.0 / 120;                         // assumed: M4's scaled by the memory (100 vs 120 GB/s)
    c.sram_mb = 24;                                          // dev-erik/ANE internals table: M2 ~24 MB (not measured)
    c.host_gflops = 395 * 1.2;                               // assumed: M1 + 20 %
    c.host_gbps = 70;
  } else if (fam == "m3") {
    c.peak_fp16_tflops = peak_from(16.77, 2048);  // fitted: M3 Pro 16.77 TFLOPS at S = 2048 (maderix report)
    c.dram_gbps = 110 * 100.0 / 120;              // assumed: M4's scaled by the memory (100 vs 120 GB/s)
    c.sram_mb = 32;
    c.host_gflops = 395 * 1.4;  // assumed: M1 + 40 %
    c.host_gbps = 80;
  } else if (fam == "m4") {
    // fitted: 18.6 TFLOPS for 128 convs of 512 ch over 64x64 (maderix/ANE README, ane_int8_bench.m), W8A8 35.1 TOPS
    c.peak_fp16_tflops = peak_from(18.6, 64 * 64);
    c.int8_speedup = 35.1 / 18.6;
    // fitted: ANEForge (arXiv 2606.17090) Qwen3-0.6B decode ~75 tok/s, taken as an M4 (the paper's chip is not
    // in our notes): a token streams every layer's weights. caiovicentino/ane-inference-engine measured 22-26 GB/s
    // through CoreML on an M4 mini: the private path reaches more.
    c.dram_gbps = 110;
    c.sram_mb = 32;  // thebasedcapital/ane-infer, m0at/ANEtransformers: ~32 MB, spilling to DRAM beyond
    // one unit; fitted: Stories110M dynamic 91 ms/step on M4 (maderix/ANE README), its classifier over the
    // 9.2K compacted vocabulary (training/README.md)
    c.host_gflops = 890;
    c.host_gbps = 100;
  } else if (fam == "m5") {
    c.peak_fp16_tflops = peak_from(12.2, 64);  // fitted: M5 inmem_peak 12.2 TFLOPS (maderix report)
    c.int8_speedup = 35.1 / 18.6;              // M4's ratio (M5 Max's 35.61 / 19.27 held out)
    // fitted: ane-infer's fused FFN (fp32 surfaces, 2048 -> 6144 -> 2048, S = 64) at 3.6 TFLOPS on M5
    c.dram_gbps = 60.2;
    c.sram_mb = 32;  // m0at/ANEtransformers (M5): perf cliff at a 32 MB working set
    // one unit; fitted: M5 Max Stories110M dynamic 73.5 ms/step (maderix/ANE PR #50) on two units, classifier
    // compacted
    c.host_gflops = 1040;
    c.host_gbps = 120;
  } else {
    fail("cost", "no parameters for chip family '", fam, "'");
  }
  return c;
}

// A chip: its family's ANE, its own CPU. `gemm_units`: the matrix units (AMX / SME, one per CPU cluster) the
// trainer's host GEMMs reach. Both trainers (maderix/ANE train_large.m and training_dynamic/train.m, anelab's
// train/kernel_engine.h) issue them from two threads: the main thread (the classifier's logits and dh) and one
// serial worker queue (every dW and the classifier's dE). A thread's GEMM runs on its own cluster's unit, so a chip
// with two or more clusters of large cores gives the two threads a unit each; a chip with one cluster makes them
// share it. A second unit does not speed up either thread's own GEMMs. `core_ghz`: the clock of its fastest cores,
// which sets staging (one thread).
Chip variant(const std::string& name, const std::string& fam, int gemm_units, double core_ghz,
             const std::string& what) {
  Chip c = family_chip(fam);
  c.name = name;
  c.description = what;
  c.host_gemm_units = gemm_units;
  c.staging_gbps = kM4StagingGbps * core_ghz / kM4CoreGhz;
  return c;
}

// Apple's published CPU configurations (apple.com/newsroom; the M5 family's naming: the former performance cores
// are "super" cores, M5 Pro / Max add 12 new mid-size "performance" cores and no efficiency cores) and the fastest
// cores' clocks (notebookcheck.net spec pages). maderix/ANE PR #50 calls the M5 Max "6P + 12E", macOS's two
// performance levels: 6 super + 12 performance cores.
std::vector<Chip> make_chips() {
  return {variant("m1", "m1", 1, 3.2, "Apple M1 (4 P + 4 E cores, one P-cluster)"),
          variant("m1-pro", "m1", 2, 3.2, "Apple M1 Pro (8 P + 2 E cores, two P-clusters)"),
          variant("m2", "m2", 1, 3.49, "Apple M2 (4 P + 4 E cores, one P-cluster)"),
          variant("m3", "m3", 1, 4.05, "Apple M3 (4 P + 4 E cores, one P-cluster)"),
          variant("m3-pro", "m3", 1, 4.05, "Apple M3 Pro (6 P + 6 E cores, one P-cluster)"),
          variant("m4", "m4", 1, 4.4, "Apple M4 (4 P + 6 E cores, one P-cluster)"),
          variant("m4-pro", "m4", 2, 4.51, "Apple M4 Pro (10 P + 4 E cores, two P-clusters)"),
          variant("m4-max", "m4", 2, 4.51, "Apple M4 Max (12 P + 4 E cores, two P-clusters)"),
          variant("m5", "m5", 1, 4.61, "Apple M5 (4 super + 6 efficiency cores, one super cluster)"),
          variant("m5-max", "m5", 2, 4.61,
                  "Apple M5 Max (6 super + 12 performance cores: clusters for both GEMM threads)")};
}

double bytes_of(const mil::TensorType& t) { return double(t.numel()) * double(mil::dtype_bytes(t.dtype)); }

// The spatial extent an op's lanes run over: the product of the dims after the channel dim for rank-4
// [N, C, H, W] tensors, else the last dim.
double spatial_of(const mil::TensorType& t) {
  if (t.rank() == 4) return double(t.shape[2] * t.shape[3]);
  return t.rank() ? double(t.shape.back()) : 1.0;
}

// Bytes a const-produced weight streams: BLOBFILE consts at their dtype, constexpr_* at their stored dtype.
double weight_bytes_of(const mil::Function& fn, const std::string& value) {
  const mil::Operation* p = fn.producer(value);
  if (!p) return 0;
  if (p->op == "const") return bytes_of(p->type);
  if (p->op.starts_with("constexpr_")) {
    for (const auto& [k, v] : p->attrs)
      if (v.blob && v.type.numel() > 1) return bytes_of(v.type);  // the stored (quantized) payload
    return bytes_of(p->type) / 2;
  }
  return 0;
}

double op_flops(const mil::Operation& op, const mil::Function& fn) {
  auto type_of = [&](const char* arg) -> const mil::TensorType* {
    const mil::Arg* a = op.arg(arg);
    return a && a->names.size() == 1 ? fn.type_of(a->names[0]) : nullptr;
  };
  const double out = double(op.type.numel());
  if (op.op == "conv") {
    const mil::TensorType* w = type_of("weight");
    if (!w || w->rank() != 4) return 2 * out;
    return 2.0 * out * double(w->shape[1] * w->shape[2] * w->shape[3]);  // MACs = out · Cin/groups · kH · kW
  }
  if (op.op == "matmul") {
    const mil::TensorType* x = type_of("x");
    if (!x || x->rank() < 2) return 2 * out;
    const mil::Arg* tx = op.arg("transpose_x");
    const mil::ConstValue* t = tx && tx->names.size() == 1 ? fn.const_value(tx->names[0]) : nullptr;
    const bool trans = t && !t->i.empty() && t->i[0] != 0;
    const int64_t k = trans ? x->shape[x->rank() - 2] : x->shape.back();
    return 2.0 * out * double(k);
  }
  if (op.op == "softmax" || op.op == "layer_norm") return 5 * out;
  if (op.op == "scaled_dot_product_attention") {
    const mil::TensorType* k = type_of("key");
    const double keys = k && k->rank() >= 2 ? double(k->shape[k->rank() - 2]) : 1;
    return 4.0 * out * keys;
  }
  if (op.op.starts_with("reduce_")) {
    const mil::TensorType* x = type_of("x");
    return x ? double(x->numel()) : out;
  }
  return out;
}

}  // namespace

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::kConv:
      return "conv";
    case OpClass::kMatmul:
      return "matmul";
    case OpClass::kElementwise:
      return "elementwise";
    case OpClass::kReduce:
      return "reduce";
    case OpClass::kMove:
      return "move";
    case OpClass::kFree:
      return "free";
  }
  return "?";
}

OpClass op_class(const std::string& op) {
  if (op == "conv") return OpClass::kConv;
  if (op == "matmul" || op == "scaled_dot_product_attention") return OpClass::kMatmul;
  if (op == "softmax" || op == "layer_norm" || op.starts_with("reduce_")) return OpClass::kReduce;
  if (op == "reshape" || op == "transpose" || op.starts_with("slice_") || op == "concat" || op == "cast" ||
      op == "identity" || op == "split")
    return OpClass::kMove;
  if (op == "const" || op.starts_with("constexpr_")) return OpClass::kFree;
  return OpClass::kElementwise;
}

// The fraction of the conv peak each class reaches. None is published: all are assumptions (docs/estimate.md).
// kMatmul (runtime operands) 0.6; the vector unit (elementwise, reductions, which count their input) 1/8 and data
// movement 1/16 of the conv rate, counted per element.
double class_efficiency(OpClass c) {
  switch (c) {
    case OpClass::kConv:
      return 1.0;
    case OpClass::kMatmul:
      return 0.6;
    case OpClass::kElementwise:
      return 1.0 / 8;
    case OpClass::kReduce:
      return 1.0 / 8;
    case OpClass::kMove:
      return 1.0 / 16;
    case OpClass::kFree:
      return 1.0;
  }
  return 1.0;
}

const std::vector<Chip>& chips() {
  static const std::vector<Chip> v = make_chips();
  return v;
}

std::vector<std::string> chip_names() {
  std::vector<std::string> n;
  for (const auto& c : chips()) n.push_back(c.name);
  return n;
}

const Chip& chip(const std::string& name) {
  for (const auto& c : chips())
    if (c.name == name) return c;
  std::string known;
  for (const auto& n : chip_names()) known += (known.empty() ? "" : ", ") + n;
  fail("cost", "unknown device '", name, "' (known: ", known, ")");
}

ProgramCost program_cost(const mil::Program& p, const Chip& chip, const std::string& fn_name, CostOptions opt) {
  const mil::Function& fn = fn_name.empty() ? p.main() : p.function(fn_name);
  ProgramCost pc;
  pc.name = fn.name;
  for (const auto& op : fn.ops)
    if (op.op == "quantize") pc.int8 = true;
  double in_bytes = 0, out_bytes = 0;
  for (const auto& [n, t] : fn.inputs) in_bytes += bytes_of(t);
  for (const auto& o : fn.outputs)
    if (const mil::TensorType* t = fn.type_of(o)) out_bytes += bytes_of(*t);
  pc.io_bytes = in_bytes + out_bytes;
  double max_act = 0, act_total = 0, first_weights = -1;
  const double peak = chip.peak_fp16_tflops * 1e12;
  for (const auto& op : fn.ops) {
    OpCost oc;
    oc.op = op.op;
    oc.name = op.name;
    oc.cls = op_class(op.op);
    if (oc.cls == OpClass::kFree) continue;
    oc.flops = op_flops(op, fn);
    oc.act_bytes = bytes_of(op.type);
    if (oc.cls == OpClass::kConv) {
      const mil::Arg* w = op.arg("weight");
      if (w && w->names.size() == 1) oc.weight_bytes = weight_bytes_of(fn, w->names[0]);
    }
    double rate = peak * class_efficiency(oc.cls) * spatial_eff(spatial_of(op.type), chip.s_half);
    if (pc.int8 && (oc.cls == OpClass::kConv || oc.cls == OpClass::kMatmul)) rate *= chip.int8_speedup;
    oc.ms = oc.flops / rate * 1e3;
    pc.flops += (oc.cls == OpClass::kConv || oc.cls == OpClass::kMatmul) ? oc.flops : 0;
    pc.weight_bytes += oc.weight_bytes;
    if (first_weights < 0 && oc.weight_bytes > 0) first_weights = oc.weight_bytes;
    pc.compute_ms += oc.ms;
    max_act = std::max(max_act, oc.act_bytes);
    act_total += oc.act_bytes;
    pc.ops.push_back(std::move(oc));
  }
  // Working set: every weight plus the two largest live activations (an op's input and output). Weights stream
  // from DRAM anyway; the spill is activations that do not fit next to the op's weights: every intermediate then
  // goes to DRAM and back.
  const double sram = chip.sram_mb * 1048576.0;
  double max_op_weights = 0;
  for (const auto& oc : pc.ops) max_op_weights = std::max(max_op_weights, oc.weight_bytes);
  pc.working_set = pc.weight_bytes + 2 * max_act;
  pc.spills = max_op_weights + 2 * max_act > sram;
  const bool resident = opt.resident && pc.weight_bytes <= sram;
  const double dram_bytes = (resident ? 0 : pc.weight_bytes) + pc.io_bytes + (pc.spills ? 2 * act_total : 0);
  const double ms_per_byte = 1e3 / (chip.dram_gbps * 1e9);
  pc.memory_ms = dram_bytes * ms_per_byte;
  // Pipeline fill and drain: the first weight-bearing op starts once the input surfaces and its weights are on
  // chip, and the output surfaces leave after the last op. Only the rest of the traffic streams under the compute.
  // A single-op program pays dispatch + its whole traffic + its compute; a long fused chain hides all but the
  // first op's weights (ane-infer's single-op conv at 1.1 TFLOPS vs 3.6 for the fused FFN, docs/estimate.md).
  const double fill_bytes = in_bytes + (resident ? 0 : std::max(0.0, first_weights));
  pc.fill_ms = fill_bytes * ms_per_byte;
  pc.drain_ms = out_bytes * ms_per_byte;
  pc.dispatch_ms = chip.dispatch_us * 1e-3;
  pc.ms = pc.dispatch_ms + pc.fill_ms + std::max(pc.compute_ms, pc.memory_ms - pc.fill_ms - pc.drain_ms) + pc.drain_ms;
  return pc;
}

FusionCost fusion_cost(const mil::Program& p, const Chip& chip, const std::string& fn) {
  FusionCost f;
  const ProgramCost whole = program_cost(p, chip, fn);
  f.fused_ms = whole.ms;
  // Split: every non-free op its own program: its own dispatch, its weights and input (about its output's size)
  // in before it computes, its output out after (program_cost's fill and drain with nothing to overlap).
  const double ms_per_byte = 1e3 / (chip.dram_gbps * 1e9);
  for (const auto& oc : whole.ops)
    f.split_ms += chip.dispatch_us * 1e-3 + (oc.weight_bytes + 2 * oc.act_bytes) * ms_per_byte + oc.ms;
  return f;
}

StepCost train_step_cost(std::vector<KernelRow> kernels, const TrainShapeInfo& s, const Chip& chip) {
  StepCost sc;
  double staging_bytes = 0;
  for (const auto& k : kernels) {
    sc.ane_ms += k.total_ms();
    staging_bytes += k.staging_bytes * double(k.calls);
  }
  sc.kernels = std::move(kernels);
  const double host = chip.host_gflops * 1e9, N = double(s.tokens);
  sc.staging_ms = staging_bytes / (chip.staging_gbps * 1e9) * 1e3;
  // Classifier on the host: logits = h·Eᵀ, dh = dlogits·E on the main thread, dE = dlogitsᵀ·h on the worker: N x D
  // x V GEMMs over the rows it computes (cls_vocab: the compacted vocabulary where the trainer compacts it).
  const double cls_rows = double(s.cls_vocab > 0 ? s.cls_vocab : s.vocab);
  const double cls_gemm_ms = 2 * N * double(s.dim) * cls_rows / host * 1e3;
  sc.cls_ms = 2 * cls_gemm_ms;
  // dW = dY·Xᵀ for every layer matrix and dE on the worker. It runs while the main thread waits on the ANE; with a
  // matrix unit of its own also while the main thread runs its classifier GEMMs. The excess is exposed.
  // LoRA: the base is frozen, so no dW and no dE: the worker computes the adapters' gradients alone.
  sc.dw_ms =
      s.lora ? s.lora_grad_flops / host * 1e3 : 2 * N * s.layer_params * double(s.n_layers) / host * 1e3 + cls_gemm_ms;
  const double hidden_under = sc.ane_ms + (chip.host_gemm_units >= 2 ? sc.cls_ms : 0.0);
  sc.dw_exposed_ms = std::max(0.0, sc.dw_ms - hidden_under);
  // Adam: reads params, grads, m, v and writes params, m, v (fp32): 28 bytes per parameter, once per update.
  sc.adam_ms = 28 * s.total_params / (chip.host_gbps * 1e9) * 1e3 / std::max(1, s.accum_steps);
  if (s.lora) {  // compiled (and the base staged) once: nothing is recompiled or restaged after an update
    sc.compiles_once = s.compiles_once;
    sc.once_ms = double(s.compiles_once) * chip.compile_ms + s.staged_once_bytes / (chip.staging_gbps * 1e9) * 1e3;
    sc.compile_ms = sc.once_ms / double(std::max<int64_t>(1, s.steps));
  } else if (s.static_weights) {
    sc.compile_ms = double(s.kernels_per_update) * chip.compile_ms / std::max(1, s.accum_steps);
  }
  return sc;
}

InferCost infer_cost(const std::vector<int64_t>& buckets, const std::vector<LayerKernelCost>& kernels, int64_t dim,
                     int64_t vocab, const Chip& chip) {
  for (const LayerKernelCost& k : kernels)
    ANELAB_CHECK(k.prefill.size() == buckets.size(), "cost", "infer_cost: ", buckets.size(), " buckets but ",
                 k.prefill.size(), " programs of layer kernel '", k.name, "'");
  InferCost ic;
  const double cls_ms = 2.0 * double(dim) * double(vocab) / (chip.host_gflops * 1e9) * 1e3;
  // The classifier reads E (fp16 or fp32) once per token: memory-bound on the host.
  const double cls_mem_ms = 2.0 * double(dim) * double(vocab) / (chip.host_gbps * 1e9) * 1e3;
  const double classifier_ms = std::max(cls_ms, cls_mem_ms);
  for (size_t i = 0; i < buckets.size(); ++i) {
    InferCost::Bucket b;
    b.tokens = buckets[i];
    for (const LayerKernelCost& k : kernels) {
      b.kernel_ms.push_back(k.prefill[i].ms * double(k.count));
      b.layers_ms += b.kernel_ms.back();
    }
    b.classifier_ms = classifier_ms;
    b.ms = b.layers_ms + classifier_ms;
    b.tok_per_s = double(b.tokens) / b.ms * 1e3;
    ic.prefill.push_back(b);
  }
  ic.decode_ms = classifier_ms;
  for (const LayerKernelCost& k : kernels) ic.decode_ms += k.decode.ms * double(k.count);
  ic.decode_tok_per_s = 1e3 / ic.decode_ms;
  return ic;
}

}  // namespace anelab::cost
