// anelab probe: what a user attaches to an issue. Prints the host (OS version, ANE chip family via the
// shim, the device profile it maps to) and runs, on the ANE (when there is one) and on the emulator:
//   workloads  a 1x1 conv 768->2048 at S=256 (fp16, int8 weights, W8A8 where the profile prints ios17+
//              programs: whether this chip compiles the int8 forms, and their speed), a 12-head causal
//              attention block (D=768, S=256, built from framework/kernels/nn.h) and one training
//              layer forward + backward (LayerRunner, dynamic weights, reference-like shape: head dim 64,
//              widths multiples of 32), with compile /
//              load / evaluate times, throughput and max |ane - emu| / max |emu|;
//   training kernels  each kernel of that layer alone: evaluate time and TFLOPS, plus the dispatch
//              overhead (evaluate time of a 2 KiB identity program);
//   rules      the layout / symbol / literal / dimension experiments of probe_rules.h, each next to the
//              device profile's assumption and the emulator's answer (compile_limit with --compile-limit).
//   seeds      sram, quant, io_size_order, direct_eval (probe_seeds.h): measurements of the device that
//              settle open questions; "numbers" says whether the timings are the ANE's or the fake's.
// --out writes JSON (schema "anelab.probe/2", docs/native_backend.md "Reading a probe report").
// Without an ANE only the emulator half runs; --shim fake runs the ANE half through FakeShim.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/probe_rules.h"
#include "cli/probe_seeds.h"
#include "cli/probe_timing.h"
#include "framework/ane/native_backend.h"
#include "framework/backends/registry.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "framework/kernels/runner.h"
#include "framework/kernels/self_check.h"
#include "framework/kernels/workloads.h"
#include "tests/support/fake_shim.h"

namespace anelab::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// What the fake shim's timings are (in the report's "numbers" fields and docs/macos.md).
constexpr const char* kFakeNumbers = "fake shim: the emulator's timings on this CPU, not ANE numbers";

struct ProbeOptions {
  std::string out;
  std::string shim = "system";  // system | fake
  std::string device = rt::kDefaultDevice;
  int repeats = 3;
  int threads = kDefaultThreads;
  int compile_limit = 0;      // > 0: run the compile_limit probe (opt-in: it exhausts the compiler)
  ane::FakeShimOptions fake;  // --shim fake: what the stand-in device does (test hooks)
};

// ---- host -----------------------------------------------------------------------------------------
json host_info() {
  const platform::HostInfo i = platform::host_info();
  json h;
  for (const auto& [k, v] : {std::pair<const char*, const std::string&>{"os", i.os},
                             {"kernel", i.kernel},
                             {"machine", i.machine},
                             {"os_version", i.os_version}})
    if (!v.empty()) h[k] = v;
  h["chip"] = i.chip.empty() ? "unknown" : i.chip;
  return h;
}

// ---- workloads ------------------------------------------------------------------------------------
struct Workload {
  std::string name, shape;
  double flops = 0;  // per evaluation (per layer pass for the training layer)
  // Runs on `be`; fills outputs (concatenated fp32) and timings.
  std::function<void(rt::Backend& be, std::vector<float>& out, json& t)> run;
};

// Compile (timed), one warm-up evaluate, best of `repeats` timed evaluates; outputs of the last (probe_timing.h).
void run_program(rt::Backend& be, const mil::Program& p, const rt::Weights& w, int repeats, std::vector<float>& out,
                 json& t) {
  TimedRun r = time_program(be, p, w, repeats);
  t["compile_ms"] = r.compile_ms;
  if (!r.error.empty()) fail("probe", be.name(), ": ", r.error);
  t["eval_ms"] = r.eval_ms;
  out = std::move(r.out);
}

// A program of framework/kernels/workloads.h run as one case.
Workload program_case(kern::Workload (*make)(), std::string shape, int repeats) {
  const kern::Workload k = make();
  Workload w{k.name, std::move(shape), k.flops, {}};
  w.run = [=](rt::Backend& be, std::vector<float>& out, json& t) {
    const kern::Workload p = make();
    run_program(be, p.program, p.weights, repeats, out, t);
  };
  return w;
}

kern::Workload probe_conv() { return kern::conv1x1_workload(768, 2048, 256); }
kern::Workload probe_conv_w8() { return kern::conv1x1_int8_workload(768, 2048, 256, false); }
kern::Workload probe_conv_w8a8() { return kern::conv1x1_int8_workload(768, 2048, 256, true); }
kern::Workload probe_attention() { return kern::attention_block_workload(768, 12, 256); }

// One layer forward + backward through LayerRunner (dynamic weights: 9 kernels compiled once).
Workload layer_workload(int repeats) {
  const kern::TrainShape s = kern::probe_layer_shape();
  const double D = double(s.dim), QD = double(s.q_dim()), KVD = double(s.kv_dim()), Hd = double(s.hidden),
               S = double(s.seq);
  const double fwd = 2 * S * (D * QD + 2 * D * KVD + QD * D + 3 * D * Hd) + 4 * S * S * QD;
  Workload w{"train_layer", "training layer fwd+bwd " + s.str() + " (dynamic weights)", 3 * fwd, {}};
  w.run = [=](rt::Backend& be, std::vector<float>& out, json& t) {
    const kern::RandomLayer layer(s);
    const int64_t d = s.dim, sq = s.seq;
    const auto x = kern::random_normal(static_cast<size_t>(d * sq), 20, 1.0f);
    const auto dy = kern::random_normal(static_cast<size_t>(d * sq), 21, 1.0f);
    kern::KernelCache cache(be, s, kern::Strategy::kDynamic);
    kern::LayerRunner r(cache);
    auto pass = [&] {
      kern::AttnTaps at;
      kern::FfnTaps ft;
      kern::FfnGrads fg;
      kern::SdpaGrads sg;
      std::vector<float> x2(x.size()), dx2, da, dxn, dx1;
      r.attn_forward(x.data(), at);
      for (size_t i = 0; i < x2.size(); ++i) x2[i] = x[i] + at.o[i];
      r.ffn_forward(x2.data(), ft);
      r.ffn_backward(dy.data(), ft, fg);
      r.rms_backward(kern::KernelKind::kRmsFfnBwd, fg.dx.data(), x2.data(), dx2);
      for (size_t i = 0; i < dx2.size(); ++i) dx2[i] += dy[i];
      r.wo_backward(dx2.data(), da);
      r.sdpa_backward(at, da.data(), sg);
      r.qkv_backward(sg, dxn);
      r.rms_backward(kern::KernelKind::kRmsAttBwd, dxn.data(), x.data(), dx1);
      out.clear();
      for (const auto* v : {&at.o, &ft.y, &fg.dh1, &sg.dq, &sg.dk, &sg.dv, &dx1})
        out.insert(out.end(), v->begin(), v->end());
    };
    const auto t0 = Clock::now();
    r.set_weights(layer.w);
    pass();  // compiles every kernel on first use
    const double first = ms_since(t0);
    double best = 1e300;
    for (int i = 0; i < repeats; ++i) {
      const auto t1 = Clock::now();
      pass();
      best = std::min(best, ms_since(t1));
    }
    t["eval_ms"] = best;
    t["compile_ms"] = std::max(0.0, first - best);  // first pass minus a steady pass
    t["kernels_compiled"] = cache.compiles();
  };
  return w;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size() || ref.empty()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - double(ref[i])));
    den = std::max(den, std::fabs(double(ref[i])));
  }
  return den > 0 ? num / den : num;
}

// ---- training kernels: dispatch overhead and TFLOPS ------------------------------------------------
// FLOPs of one evaluation: 2·MACs of every conv and matmul, plus one per output element of every
// other op (what elementwise kernels such as the RMSNorm backward consist of).
double program_flops(const mil::Function& f) {
  double flops = 0;
  for (const auto& op : f.ops) {
    if (op.op != "conv" && op.op != "matmul" && op.op != "const") flops += double(op.type.numel());
    auto type_of = [&](const char* arg) -> const mil::TensorType* {
      const mil::Arg* a = op.arg(arg);
      return a && !a->names.empty() ? f.type_of(a->names[0]) : nullptr;
    };
    if (op.op == "conv") {
      const mil::TensorType* w = type_of("weight");
      if (w && w->rank() >= 2) flops += 2.0 * double(op.type.numel()) * double(w->numel() / w->shape[0]);
    } else if (op.op == "matmul") {
      const mil::TensorType* x = type_of("x");
      const mil::Arg* tx = op.arg("transpose_x");
      const mil::ConstValue* txv = tx && !tx->names.empty() ? f.const_value(tx->names[0]) : nullptr;
      const bool t = txv && !txv->i.empty() && txv->i[0] != 0;
      if (x && x->rank() >= 2) flops += 2.0 * double(op.type.numel()) * double(x->shape[x->rank() - (t ? 2 : 1)]);
    }
  }
  return flops;
}

json training_kernels(rt::Backend& be, int repeats, bool tflops) {
  json out = json::array();
  for (kern::KernelKind kind : kern::kAllKernelKinds) {
    const kern::KernelSpec k = kern::build_kernel(kind, kern::probe_layer_shape(), kern::Strategy::kDynamic);
    const double flops = program_flops(k.program.functions.front());
    json t{{"name", k.name}, {"gflop", flops * 1e-9}};
    std::vector<float> ignored;
    try {
      run_program(be, k.program, k.weights, repeats, ignored, t);
    } catch (const Error& e) {  // recorded, the probe goes on (a device that breaks a rule fails here)
      t["error"] = e.what();
      out.push_back(std::move(t));
      continue;
    }
    if (tflops)
      t["tflops"] = flops / (t["eval_ms"].get<double>() * 1e9);
    else
      t["gflops"] = flops / (t["eval_ms"].get<double>() * 1e6);
    out.push_back(std::move(t));
  }
  return out;
}

// Evaluate time of a program with almost no work: what every dispatch costs.
double dispatch_overhead_ms(rt::Backend& be, int repeats) {
  const kern::Workload p = kern::dispatch_workload();
  json t;
  std::vector<float> ignored;
  run_program(be, p.program, p.weights, std::max(repeats, 10), ignored, t);
  return t["eval_ms"].get<double>();
}

// ---- the command --------------------------------------------------------------------------------
struct AneSide {
  std::unique_ptr<ane::NativeBackend> backend;
  ane::Shim* shim = nullptr;  // owned by backend
  json info;
};

AneSide make_ane(const ProbeOptions& o) {
  AneSide a;
  std::string why;
  std::unique_ptr<ane::Shim> shim;
  if (o.shim == "fake") {
    ane::FakeShimOptions fo = o.fake;
    fo.device = o.device;
    if (fo.device == "auto") {  // the stand-in device runs the profile its chip family maps to
      const std::string p = rt::profile_for_ane_sub_type(fo.sub_type);
      fo.device = p.empty() ? rt::kFallbackDevice : p;
    }
    fo.threads = o.threads;
    shim = std::make_unique<ane::FakeShim>(fo);
  } else {
    shim = ane::create_system_shim(&why);
  }
  a.info["shim"] = o.shim;
  a.info["available"] = shim != nullptr;
  if (!shim) {
    a.info["reason"] = why;
    a.info["chip_family"] = "n/a";
    return a;
  }
  a.info["shim_describe"] = shim->describe();
  Result<std::string> sub = shim->ane_sub_type();
  a.info["chip_family"] = sub ? *sub : "n/a";
  if (!sub) a.info["chip_family_error"] = sub.status().message();
  a.info["profile_for_chip"] = sub ? rt::profile_for_ane_sub_type(*sub) : "";
  rt::BackendOptions bo;
  bo.device = o.device;
  bo.threads = o.threads;
  a.shim = shim.get();
  a.backend = std::make_unique<ane::NativeBackend>(std::move(shim), bo);
  a.info["device_profile"] = a.backend->profile().name;
  a.info["device_choice"] = a.backend->device_choice().note;
  return a;
}

json run_case(const Workload& w, rt::Backend& emu, ane::NativeBackend* ane) {
  json c{{"name", w.name}, {"shape", w.shape}, {"gflop", w.flops * 1e-9}};
  std::vector<float> emu_out, ane_out;
  json te;
  w.run(emu, emu_out, te);
  te["gflops"] = w.flops / (te["eval_ms"].get<double>() * 1e6);
  c["emulator"] = te;
  c["ane"] = nullptr;
  c["max_rel_diff"] = nullptr;
  if (ane) {
    const double c0 = ane->compile_ms_total(), l0 = ane->load_ms_total();
    json ta;
    try {
      w.run(*ane, ane_out, ta);
    } catch (const Error& e) {  // recorded, the probe goes on
      c["ane"] = {{"error", e.what()}};
      return c;
    }
    ta["compile_ms"] = ane->compile_ms_total() - c0;  // the shim's compile calls only
    ta["load_ms"] = ane->load_ms_total() - l0;
    ta["tflops"] = w.flops / (ta["eval_ms"].get<double>() * 1e9);
    c["ane"] = ta;
    c["max_rel_diff"] = max_rel_diff(ane_out, emu_out);
  }
  return c;
}

void print_case(const json& c) {
  auto num = [](const json& j, const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN; };
  const json& e = c["emulator"];
  std::printf("  %-12s emulator  compile %8.1f ms                  eval %9.3f ms  %8.1f GFLOP/s\n",
              c["name"].get<std::string>().c_str(), num(e, "compile_ms"), num(e, "eval_ms"), num(e, "gflops"));
  if (!c["ane"].is_null() && c["ane"].contains("error")) {
    std::printf("  %-12s ane       FAILED: %s\n", "", c["ane"]["error"].get<std::string>().c_str());
  } else if (!c["ane"].is_null()) {
    const json& a = c["ane"];
    std::printf("  %-12s ane       compile %8.1f ms  load %7.1f ms  eval %9.3f ms  %8.3f TFLOPS  max rel diff %.3g\n",
                "", num(a, "compile_ms"), num(a, "load_ms"), num(a, "eval_ms"), num(a, "tflops"),
                c["max_rel_diff"].get<double>());
  }
}

void print_rule(const json& r) {
  auto verdict = [&](const char* side) -> std::string {
    const json& v = r[std::string(side) + "_agrees"];
    if (r[side].is_null()) return "n/a";
    if (v.is_null()) return "not comparable";
    return v.get<bool>() ? "agrees" : "DIFFERS";
  };
  std::printf("  %-15s emulator: %-15s ane: %s\n", r["name"].get<std::string>().c_str(), verdict("emulator").c_str(),
              verdict("ane").c_str());
  if (r.contains("ane_differences"))
    for (const auto& d : r["ane_differences"]) std::printf("      %s\n", d.get<std::string>().c_str());
}

// The seed-style measurements (probe_seeds.h), each saved as it completes. They measure the device: without
// an ANE each section is {"ane": null, "reason"}; through the fake shim the timings are the emulator's.
void run_seed_sections(const ProbeOptions& o, AneSide& ane, ane::Shim& emu_shim, const rt::DeviceProfile& profile,
                       json& report, const std::function<void(const char*)>& save, int& shim_compiles) {
  const char* names[] = {"sram", "quant", "io_size_order", "direct_eval"};
  if (!ane.backend) {
    for (const char* n : names) {
      report[n] = {{"ane", nullptr}, {"reason", "no ANE: this section measures the device"}};
      save(n);
    }
    return;
  }
  const std::string numbers = o.shim == "fake" ? kFakeNumbers : "ane";
  std::printf("  seed measurements (%s):\n", numbers.c_str());
  report["sram"] = sram_probe(*ane.backend, o.repeats, numbers);
  std::printf("    sram: %s\n", report["sram"]["answer"].get<std::string>().c_str());
  save("sram");
  report["quant"] = quant_probe(*ane.backend, o.repeats, numbers);
  std::printf("    quant: %s\n", report["quant"]["answer"].get<std::string>().c_str());
  save("quant");
  report["io_size_order"] = io_size_order_probe(*ane.shim, emu_shim, profile, numbers);
  shim_compiles += report["io_size_order"]["compiles"].get<int>();
  std::printf("    io_size_order: %s\n", report["io_size_order"]["answer"].get<std::string>().c_str());
  save("io_size_order");
  report["direct_eval"] = direct_eval_probe(*ane.shim, profile, std::max(o.repeats, 10), numbers);
  shim_compiles += report["direct_eval"]["compiles"].get<int>();
  std::printf("    direct_eval: %s\n", report["direct_eval"]["answer"].get<std::string>().c_str());
  save("direct_eval");
}

void run_probe(const ProbeOptions& o) {
  AneSide ane = make_ane(o);
  const std::string device = ane.backend ? ane.backend->profile().name : rt::device_profile(o.device).name;
  const rt::DeviceProfile& profile = rt::device_profile(device);
  json report{{"schema", "anelab.probe/2"},
              {"anelab_commit", build_commit()},
              {"device_profile", device},
              {"device_profile_requested", o.device}};
  report["numbers"] = o.shim == "fake" ? kFakeNumbers : "ane";
  report["host"] = host_info();
  report["ane"] = ane.info;
  const json& h = report["host"];
  std::printf("anelab probe (anelab %s)\n  host: %s %s (%s, %s), OS version %s\n", build_commit(),
              h.value("os", "?").c_str(), h.value("kernel", "?").c_str(), h.value("machine", "?").c_str(),
              h.value("chip", "?").c_str(), h.value("os_version", "?").c_str());
  std::printf("  ANE chip family: %s (device profile %s)\n", ane.info["chip_family"].get<std::string>().c_str(),
              device.c_str());
  if (!ane.backend)
    std::printf("  ANE: not available: %s\n  running the emulator half only\n",
                ane.info["reason"].get<std::string>().c_str());
  else
    std::printf("  ANE: %s\n", ane.info["shim_describe"].get<std::string>().c_str());
  // The report is written after every section ("complete": false until the last), so a crash inside a
  // private call leaves what was measured before it.
  auto save = [&](const char* section) {
    if (o.out.empty()) return;
    report["complete"] = std::string(section) == "done";
    report["last_section"] = section;
    write_file_atomic(o.out, report.dump(2) + "\n");
  };
  save("host");
  rt::BackendOptions eo;
  eo.device = device;
  eo.threads = o.threads;
  auto emu = rt::create_backend("emulator", eo);

  // rules first (they must not see a compiler that the workloads or compile_limit wore out)
  RuleProbeOptions ro;
  ro.compile_limit = o.compile_limit;
  ane::FakeShimOptions emu_fo;  // the emulator half: FakeShim = the emulator with the profile's layout
  emu_fo.device = device;
  emu_fo.threads = o.threads;
  ane::FakeShim emu_shim(emu_fo);
  json emu_rules = run_rule_probes(emu_shim, profile, ro);
  report["rules"] = compare_rules(rule_assumptions(profile, ro), emu_rules, nullptr);
  save("rules_emulator");
  json ane_rules = ane.shim ? run_rule_probes(*ane.shim, profile, ro) : json(nullptr);
  report["rules"] = compare_rules(rule_assumptions(profile, ro), emu_rules, ane_rules);
  save("rules");
  // The silent-zeros self-check (framework/kernels/self_check.h) with the training layer's attn_fwd I/O
  // types: the summary line, also what training and prefill run before their first ANE kernel.
  // After the rules (which must see a fresh compiler), before the workloads.
  std::string summary = "[self-check] n/a: no ANE";
  if (ane.backend) {
    const kern::KernelSpec spec =
        kern::build_kernel(kern::KernelKind::kAttnFwd, kern::probe_layer_shape(), kern::Strategy::kDynamic);
    try {
      const kern::SelfCheck c = kern::run_self_check(*ane.backend, spec.name, spec.in.type(), spec.out.type());
      report["self_check"] = json::parse(c.json());
      summary = c.line();
    } catch (const Error& e) {
      report["self_check"] = {{"error", e.what()}, {"agrees", false}};
      summary = e.what();
    }
    std::printf("  %s\n", summary.c_str());
    save("self_check");
  }

  report["cases"] = json::array();
  std::vector<Workload> cases = {
      program_case(probe_conv, "1x1 conv 768->2048, S=256, fp16", o.repeats),
      program_case(probe_conv_w8, "the same conv, int8 weights (constexpr_affine_dequantize)", o.repeats)};
  if (profile.dialect != mil::Dialect::kIos16)  // quantize / dequantize are iOS17 ops (check_program)
    cases.push_back(program_case(probe_conv_w8a8, "the same conv, W8A8 (+ quantize/dequantize of x)", o.repeats));
  cases.push_back(program_case(probe_attention,
                               "causal attention block D=768, 12 heads, S=256 "
                               "(Wq/Wk/Wv/Wo + matmul/mask/softmax)",
                               o.repeats));
  cases.push_back(layer_workload(o.repeats));
  for (const Workload& w : cases) {
    json c = run_case(w, *emu, ane.backend.get());
    print_case(c);
    report["cases"].push_back(std::move(c));
    save("case");
  }
  json tk{{"shape", kern::probe_layer_shape().str()}, {"emulator", training_kernels(*emu, o.repeats, false)}};
  tk["ane"] = ane.backend ? training_kernels(*ane.backend, o.repeats, true) : json(nullptr);
  report["training_kernels"] = tk;
  save("training_kernels");
  report["dispatch_overhead_ms"] = {{"emulator", dispatch_overhead_ms(*emu, o.repeats)}, {"ane", nullptr}};
  if (ane.backend) {
    try {
      report["dispatch_overhead_ms"]["ane"] = dispatch_overhead_ms(*ane.backend, o.repeats);
    } catch (const Error& e) {
      report["dispatch_overhead_ms"]["ane_error"] = e.what();
    }
  }
  std::printf("  dispatch overhead: emulator %.4f ms", report["dispatch_overhead_ms"]["emulator"].get<double>());
  if (report["dispatch_overhead_ms"]["ane"].is_number())
    std::printf(", ane %.4f ms", report["dispatch_overhead_ms"]["ane"].get<double>());
  std::printf("\n");

  int seed_compiles = 0;  // shim-level compiles of the seed sections (io_size_order, direct_eval)
  run_seed_sections(o, ane, emu_shim, profile, report, save, seed_compiles);

  if (o.compile_limit > 0) {  // last: it leaves the compiler of this process exhausted
    emu_rules["compile_limit"] = run_compile_limit_probe(emu_shim, profile, o.compile_limit, emu_shim.compiles());
    if (ane.shim)
      ane_rules["compile_limit"] =
          run_compile_limit_probe(*ane.shim, profile, o.compile_limit,
                                  ane_rules["compiles"].get<int>() + ane.backend->compiles_used() + seed_compiles);
  }
  report["rules"] = compare_rules(rule_assumptions(profile, ro), emu_rules, ane_rules);
  std::printf("  rules (profile %s):\n", device.c_str());
  for (const auto& r : report["rules"]) print_rule(r);
  std::printf("  summary: %s\n", summary.c_str());
  if (!o.out.empty()) {
    save("done");
    std::printf("  report: %s\n", o.out.c_str());
  }
}

}  // namespace

void add_probe_command(CLI::App& app) {
  auto o = std::make_shared<ProbeOptions>();
  auto* cmd = app.add_subcommand(
      "probe",
      "Report the host's ANE (chip, OS) and run conv / attention / training-layer probes and the device-rule "
      "experiments on the ANE and the emulator (JSON with --out, to attach to an issue)");
  cmd->add_option("--out", o->out, "write the JSON report here");
  cmd->add_option("--shim", o->shim, "system: the real ANE (if any); fake: the FakeShim over the emulator (testing)")
      ->capture_default_str()
      ->check(CLI::IsMember({"system", "fake"}));
  cmd->add_option("--device", o->device, "device profile (m1..m5) for both halves; auto: the ANE chip's")
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "timed evaluations per workload (best reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_threads_option(cmd, o->threads);
  cmd->add_option("--compile-limit", o->compile_limit,
                  "also count compiles until the compiler fails, up to this many (opt-in: the process cannot "
                  "compile afterwards)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fake-sub-type", o->fake.sub_type, "--shim fake: the chip family it reports")
      ->capture_default_str();
  cmd->add_option("--fake-row-align", o->fake.row_align_bytes,
                  "--shim fake: row alignment (bytes) it reads and writes surfaces with (0: the profile's)")
      ->capture_default_str();
  cmd->add_flag("--fake-layout-error", o->fake.layout_error,
                "--shim fake: plant a layout error (every output one row further down, silently)");
  cmd->add_flag("--fake-io-size-order", o->fake.io_size_order,
                "--shim fake: plant the size-order rule of maderix/ANE #47 (inputs ascending, outputs descending, "
                "else zeros)");
  cmd->add_option("--fake-abort-at", o->fake.abort_at,
                  "--shim fake: abort the process in this call (evaluate, load, ...), as a crash in a private call");
  cmd->add_option("--fake-symbol-order", o->fake.symbol_order,
                  "--shim fake: how it numbers procedure symbols (declaration | by_name)")
      ->capture_default_str()
      ->check(CLI::IsMember({"declaration", "by_name"}));
  cmd->callback([o] { run_probe(*o); });
}

}  // namespace anelab::cli
