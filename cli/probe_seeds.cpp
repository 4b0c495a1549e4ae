// The seed-style measurements of `anelab probe` (probe_seeds.h).
#include "cli/probe_seeds.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "cli/probe_raw.h"
#include "cli/probe_timing.h"
#include "framework/backends/registry.h"
#include "framework/kernels/workloads.h"

namespace anelab::cli {
namespace {

using mil::DType;
using mil::Value;
using nlohmann::json;

// Compile on `be`, one warm-up evaluate, then the best of `repeats` (probe_timing.h): {"eval_ms", "tflops"} or
// {"error"}. With `out`, the outputs of the last evaluate (fp32 values, outputs in order).
json timed_workload(rt::Backend& be, const kern::Workload& w, int repeats, std::vector<float>* out = nullptr) {
  TimedRun r = time_program(be, w.program, w.weights, repeats);
  if (!r.error.empty()) return json{{"error", r.error}};
  if (out) *out = std::move(r.out);
  return json{{"eval_ms", r.eval_ms}, {"tflops", w.flops / (r.eval_ms * 1e9)}};
}

// max |a - ref| / max |ref| (infinite for different sizes or an empty reference).
double seed_max_rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size() || ref.empty()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i)
    num = std::max(num, std::fabs(double(a[i]) - double(ref[i]))), den = std::max(den, std::fabs(double(ref[i])));
  return den > 0 ? num / den : num;
}

}  // namespace

// ---- sram -----------------------------------------------------------------------------------------
json sram_probe(rt::Backend& device, int repeats, const std::string& numbers) {
  constexpr int64_t C = 1024, S = 64;
  json sizes = json::array();
  json knee = nullptr;
  double best = 0, best_bytes = 0;
  for (int n = 1; n <= 32; n *= 2) {
    const kern::Workload w = kern::conv_chain_workload(C, S, n);
    const double weight_bytes = double(n) * C * C * 2, io_bytes = 2.0 * C * S * 2;
    json one{{"convs", n}, {"weight_bytes", weight_bytes}, {"working_set_bytes", weight_bytes + io_bytes}};
    one.update(timed_workload(device, w, repeats));
    if (one.contains("tflops")) {
      const double t = one["tflops"].get<double>();
      if (knee.is_null() && best > 0 && t < kKneeFraction * best)
        knee = json{{"last_fast_bytes", best_bytes}, {"first_slow_bytes", weight_bytes + io_bytes}};
      if (t > best) best = t, best_bytes = weight_bytes + io_bytes;
    }
    sizes.push_back(std::move(one));
  }
  return json{{"shape", "chain of n 1x1 convs 1024->1024, S=64, fp16 weights"},
              {"numbers", numbers},
              {"knee_fraction", kKneeFraction},
              {"sizes", sizes},
              {"knee", knee},
              {"answer", knee.is_null() ? "no knee up to 64 MiB: throughput held at every size"
                                        : "the on-chip working set lies between knee.last_fast_bytes and "
                                          "knee.first_slow_bytes"}};
}

// ---- quant ----------------------------------------------------------------------------------------
// The seed's five weight forms and lut6 on one 1x1 conv (every form from the same random matrix), each on the device
// and on the emulator (same program, same inputs): TFLOPS on the device, its speed against fp16, max rel diff of the
// device's outputs against the emulator's, and max rel diff of the form's outputs against the fp16 program's on the
// device (max_rel_diff_vs_fp16) and on the emulator (max_rel_diff_vs_fp16_emulator): the accuracy the compression
// costs.
json quant_probe(rt::Backend& device, int repeats, const std::string& numbers) {
  constexpr int64_t C = 2048, S = 64;
  rt::BackendOptions eo;
  eo.device = device.profile().name;
  auto emu = rt::create_backend("emulator", eo);
  const std::pair<const char*, kern::Workload> forms[] = {
      {"fp16", kern::conv1x1_workload(C, C, S)},
      {"int8", kern::conv1x1_int8_workload(C, C, S, false)},
      {"uint4", kern::conv1x1_4bit_workload(C, C, S, kern::FourBitForm::kUint4)},
      {"uint4_block32", kern::conv1x1_4bit_workload(C, C, S, kern::FourBitForm::kBlock32)},
      {"lut4", kern::conv1x1_4bit_workload(C, C, S, kern::FourBitForm::kLut4)},
      {"lut6", kern::conv1x1_lut6_workload(C, C, S)},
  };
  json r{{"shape", "1x1 conv 2048->2048, S=64"},
         {"numbers", numbers},
         {"forms",
          "fp16 baked; int8 constexpr_affine_dequantize; uint4 constexpr_affine_dequantize (per channel); "
          "uint4_block32 constexpr_blockwise_shift_scale (block 32); lut4 constexpr_lut_to_dense (16 entries, evenly "
          "spaced); lut6 constexpr_lut_to_dense (uint6, 64 k-means entries per output channel)"}};
  std::vector<float> dev_fp16, emu_fp16;  // the fp16 program's outputs (forms[0])
  for (const auto& [key, w] : forms) {
    std::vector<float> dev_out, emu_out;
    json m = timed_workload(device, w, repeats, &dev_out);
    json e = timed_workload(*emu, w, 0, &emu_out);
    if (std::string(key) == "fp16") dev_fp16 = dev_out, emu_fp16 = emu_out;
    m["max_rel_diff_vs_emulator"] = nullptr;
    if (e.contains("error"))
      m["emulator_error"] = e["error"];
    else if (m.contains("tflops"))
      m["max_rel_diff_vs_emulator"] = seed_max_rel_diff(dev_out, emu_out);
    m["max_rel_diff_vs_fp16"] =
        m.contains("tflops") && !dev_fp16.empty() ? json(seed_max_rel_diff(dev_out, dev_fp16)) : json(nullptr);
    m["max_rel_diff_vs_fp16_emulator"] =
        !e.contains("error") && !emu_fp16.empty() ? json(seed_max_rel_diff(emu_out, emu_fp16)) : json(nullptr);
    r[key] = std::move(m);
  }
  const double fp16_tf = r["fp16"].contains("tflops") ? r["fp16"]["tflops"].get<double>() : 0;
  for (const auto& [key, w] : forms)
    if (std::string(key) != "fp16")
      r[key]["vs_fp16"] =
          fp16_tf > 0 && r[key].contains("tflops") ? json(r[key]["tflops"].get<double>() / fp16_tf) : json(nullptr);
  r["int8_vs_fp16"] = r["int8"]["vs_fp16"];
  r["answer"] = "n/a: a program failed";
  if (!r["int8_vs_fp16"].is_null()) {
    const double ratio = r["int8_vs_fp16"].get<double>();
    r["answer"] = ratio >= 1.5   ? "int8 computes natively (faster than fp16)"
                  : ratio >= 0.8 ? "int8 weights are dequantized to fp16 (same speed)"
                                 : "int8 is slower than fp16";
  }
  return r;
}

// ---- io_size_order --------------------------------------------------------------------------------
namespace {

constexpr int64_t kOrderW = 128, kSmall = 192, kLarge = 384;  // 49152- and 98304-byte surfaces, rows dense

struct OrderCase {
  const char* name;
  bool inputs_ascending, outputs_descending;
};

// inputs small [kSmall, W] and large [kLarge, W] in the case's order; outputs small = small + large[:kSmall]
// and large = 2 * large, in the case's order. Returns the outputs as fp16 bytes (declared order).
Result<std::vector<std::vector<uint8_t>>> run_order_case(Raw& raw, const rt::DeviceProfile& p, const OrderCase& c) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  const auto ts = mil::tensor_type(DType::kFp16, {1, kSmall, 1, kOrderW});
  const auto tl = mil::tensor_type(DType::kFp16, {1, kLarge, 1, kOrderW});
  Value small, large;
  if (c.inputs_ascending) {
    small = b.input("small", ts);
    large = b.input("large", tl);
  } else {
    large = b.input("large", tl);
    small = b.input("small", ts);
  }
  auto out_small = [&] { b.output(b.named("y_small").add(small, b.slice_by_size(large, {0, 0, 0, 0}, ts.shape))); };
  auto out_large = [&] { b.output(b.named("y_large").mul(large, 2.0)); };
  if (c.outputs_descending) {
    out_large();
    out_small();
  } else {
    out_small();
    out_large();
  }
  const Built m = print_for(pb, p);
  Result<size_t> h = raw.load(m.text);
  if (!h) return h.status();
  const size_t bs = static_cast<size_t>(ts.numel() * 2), bl = static_cast<size_t>(tl.numel() * 2);
  const size_t sz = rt::surface_alloc_bytes(tl, p);  // every surface of a multi-I/O request: the largest's size
  std::vector<float> vs(static_cast<size_t>(ts.numel())), vl(static_cast<size_t>(tl.numel()));
  for (size_t k = 0; k < vs.size(); ++k) vs[k] = static_cast<float>(k % 64);  // sums and doubles stay exact
  for (size_t k = 0; k < vl.size(); ++k) vl[k] = static_cast<float>(k % 50 + 100);
  std::vector<std::vector<uint8_t>> in;
  std::vector<size_t> in_sizes;
  if (c.inputs_ascending)
    in = {f16_bytes(vs, sz), f16_bytes(vl, sz)};
  else
    in = {f16_bytes(vl, sz), f16_bytes(vs, sz)};
  auto out = raw.eval(*h, in, {sz, sz}, {sz, sz}, {{0, 1}, {0, 1}, 0});
  raw.unload(*h);
  if (!out) return out.status();
  for (size_t j = 0; j < 2; ++j)  // the tensors' bytes only (rows of 128 fp16 columns are dense)
    (*out)[j].resize(c.outputs_descending == (j == 0) ? bl : bs);
  return out;
}

}  // namespace

json io_size_order_probe(ane::Shim& device, ane::Shim& emulator, const rt::DeviceProfile& profile,
                         const std::string& numbers) {
  const OrderCase cases[] = {{"inputs_ascending_outputs_descending", true, true},
                             {"inputs_descending", false, true},
                             {"outputs_ascending", true, false}};
  Raw dev(device, 21), emu(emulator, 21);
  json r{{"shape",
          "inputs [1,192,1,128] and [1,384,1,128] fp16 (49152 / 98304 bytes, every surface as large as the larger), "
          "two outputs"},
         {"numbers", numbers}};
  std::map<std::string, bool> agrees;
  for (const OrderCase& c : cases) {
    const size_t bs = kSmall * kOrderW * 2, bl = kLarge * kOrderW * 2;
    json one{{"input_tensor_bytes", c.inputs_ascending ? json{bs, bl} : json{bl, bs}},
             {"output_tensor_bytes", c.outputs_descending ? json{bl, bs} : json{bs, bl}}};
    auto want = run_order_case(emu, profile, c);
    auto got = run_order_case(dev, profile, c);
    agrees[c.name] = false;
    if (!want) {
      one["error"] = "emulator: " + want.status().message();
    } else if (!got) {
      one["error"] = got.status().message();
    } else {
      double err = 0, scale = 0;
      bool zeros = true;
      for (size_t j = 0; j < want->size(); ++j)
        for (size_t k = 0; k < (*want)[j].size() / 2; ++k) {
          const double w = f16_at((*want)[j], k), g = f16_at((*got)[j], k);
          err = std::max(err, std::isfinite(g) ? std::abs(g - w) : INFINITY);
          scale = std::max(scale, std::abs(w));
          zeros = zeros && g == 0.0;
        }
      one["max_rel_diff"] = err / std::max(scale, 1e-30);
      one["zeros"] = zeros;
      one["agrees"] = err == 0;  // small integers: exact in fp16 on any device that computes in fp16
      agrees[c.name] = err == 0;
    }
    r[c.name] = one;
  }
  r["compiles"] = dev.compiles();
  const bool base = agrees["inputs_ascending_outputs_descending"];
  r["inputs_any_order"] = base && agrees["inputs_descending"];
  r["outputs_any_order"] = base && agrees["outputs_ascending"];
  r["answer"] = !base ? "even ascending inputs and descending outputs differ from the emulator (see the cases)"
                      : std::string(agrees["inputs_descending"] ? "inputs bind in any size order"
                                                                : "inputs must be in ascending size order") +
                            "; " +
                            (agrees["outputs_ascending"] ? "outputs bind in any size order"
                                                         : "outputs must be in descending size order");
  return r;
}

// ---- direct_eval ----------------------------------------------------------------------------------
json direct_eval_probe(ane::Shim& device, const rt::DeviceProfile& profile, int repeats, const std::string& numbers) {
  constexpr int64_t C = 256, W = 128;  // y = x * 0.5 + 0.25 on a 64 KiB tensor
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  const auto t = mil::tensor_type(DType::kFp16, {1, C, 1, W});
  b.output(b.add(b.mul(b.input("x", t), 0.5), 0.25));
  const Built m = print_for(pb, profile);
  Raw raw(device, 21);
  json r{{"shape", "y = x * 0.5 + 0.25 on [1,256,1,128] fp16"}, {"numbers", numbers}};
  Result<size_t> h = raw.load(m.text);
  r["compiles"] = raw.compiles();
  if (!h) {
    r["error"] = h.status().message();
    return r;
  }
  const size_t bytes = static_cast<size_t>(t.numel() * 2);
  std::vector<float> x(static_cast<size_t>(t.numel()));
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k % 512) / 8.0f - 32.0f;
  std::vector<uint8_t> outputs[2];
  for (const EvalPath path : {EvalPath::kModel, EvalPath::kDirect}) {
    const char* name = path == EvalPath::kModel ? "xpc" : "direct";
    double best = 1e300;
    json one;
    for (int rep = 0; rep <= repeats; ++rep) {
      double ms = 0;
      auto out = raw.eval(*h, {f16_bytes(x, bytes)}, {bytes}, {bytes}, {{0}, {0}, 0}, 0, path, &ms);
      if (!out) {
        one["error"] = out.status().message();
        break;
      }
      if (rep > 0) best = std::min(best, ms);  // rep 0: warm-up
      outputs[path == EvalPath::kDirect] = (*out)[0];
    }
    if (!one.contains("error")) one["eval_ms"] = best;
    r[name] = one;
  }
  raw.unload(*h);
  const bool both = r["xpc"].contains("eval_ms") && r["direct"].contains("eval_ms");
  r["outputs_equal"] = both ? json(outputs[0] == outputs[1]) : json(nullptr);
  r["direct_speedup"] =
      both ? json(r["xpc"]["eval_ms"].get<double>() / r["direct"]["eval_ms"].get<double>()) : json(nullptr);
  r["answer"] = !both                         ? "n/a: a path failed (see its error)"
                : !(outputs[0] == outputs[1]) ? "the direct path's outputs differ from the XPC path's"
                                              : "both paths give the same outputs; direct_speedup = xpc / direct time";
  return r;
}

}  // namespace anelab::cli
