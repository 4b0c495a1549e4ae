// anelab probe: what a user attaches to an issue. Prints the host (OS version, ANE chip family via the
// shim) and runs three workloads on the ANE (when there is one) and on the emulator, with the same
// inputs: a 1x1 conv 768->2048 at S=256, a 12-head causal attention block (D=768, S=256, built from
// framework/kernels blocks) and one training layer forward + backward (framework/kernels LayerRunner,
// dynamic weights, small shape). Reports compile / load / evaluate times, throughput (TFLOPS on the
// ANE, GFLOP/s on the emulator) and max |ane - emu| / max |emu| per workload; --out writes JSON
// (schema "anelab.probe/1", docs/native_backend.md). Without an ANE only the emulator half runs.
#include <sys/utsname.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "framework/ane/fake_shim.h"
#include "framework/ane/native_backend.h"
#include "framework/cli/commands.h"
#include "framework/core/file.h"
#include "framework/kernels/blocks.h"
#include "framework/kernels/runner.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"

namespace anelab::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct ProbeOptions {
  std::string out;
  std::string shim = "system";  // system | fake
  std::string device = rt::kDefaultDevice;
  int repeats = 3;
  int threads = 0;
};

// ---- host -----------------------------------------------------------------------------------------
json host_info() {
  json h;
  struct utsname u {};
  if (uname(&u) == 0) {
    h["os"] = u.sysname;
    h["kernel"] = u.release;
    h["machine"] = u.machine;
    h["os_version"] = u.release;
  }
#if defined(__linux__)
  // The distribution's name from /etc/os-release (PRETTY_NAME), e.g. "Debian GNU/Linux 12 (bookworm)".
  try {
    const std::string rel = read_file_text("/etc/os-release");
    const size_t at = rel.find("PRETTY_NAME=");
    if (at != std::string::npos) {
      std::string v = rel.substr(at + 12, rel.find('\n', at) - at - 12);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      if (!v.empty()) h["os_version"] = v;
    }
  } catch (const Error&) {
  }
#endif
#if defined(__APPLE__)
  char ver[64] = {};
  size_t n = sizeof ver;
  if (sysctlbyname("kern.osproductversion", ver, &n, nullptr, 0) == 0) h["os_version"] = std::string(ver);
#endif
  return h;
}

// ---- workloads ------------------------------------------------------------------------------------
struct Workload {
  std::string name, shape;
  double flops = 0;  // per evaluation (per layer pass for the training layer)
  // Runs on `be`; fills outputs (concatenated fp32) and timings.
  std::function<void(rt::Backend& be, std::vector<float>& out, json& t)> run;
};

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Compile (timed), one warm-up evaluate, best of `repeats` timed evaluates; outputs of the last.
void run_program(rt::Backend& be, const mil::Program& p, const rt::Weights& w, int repeats, std::vector<float>& out,
                 json& t) {
  const auto t0 = Clock::now();
  auto k = be.compile(p, w);
  t["compile_ms"] = ms_since(t0);
  if (!k) fail("probe", be.name(), ": compile failed: ", k.status().message());
  auto ins = (*k)->make_inputs(0, be.profile());
  auto outs = (*k)->make_outputs(0, be.profile());
  for (size_t i = 0; i < ins.size(); ++i) {
    auto v = randn(static_cast<size_t>(ins[i].numel()), 1000 + static_cast<uint32_t>(i), 1.0f);
    ins[i].write(v.data());
  }
  std::vector<rt::Surface*> ip, op;
  for (auto& s : ins) ip.push_back(&s);
  for (auto& s : outs) op.push_back(&s);
  double best = 1e300;
  for (int r = 0; r <= repeats; ++r) {
    const auto t1 = Clock::now();
    if (Status s = be.evaluate(**k, 0, ip, op); !s) fail("probe", be.name(), ": evaluate failed: ", s.message());
    if (r > 0) best = std::min(best, ms_since(t1));  // r == 0: warm-up
  }
  t["eval_ms"] = best;
  out.clear();
  for (auto& s : outs) {
    std::vector<float> v(static_cast<size_t>(s.numel()));
    s.read(v.data());
    out.insert(out.end(), v.begin(), v.end());
  }
}

Workload conv_workload(int repeats) {
  const int64_t cin = 768, cout = 2048, S = 256;
  Workload w{"conv", "1x1 conv 768->2048, S=256, fp16", 2.0 * cin * cout * S, {}};
  w.run = [=](rt::Backend& be, std::vector<float>& out, json& t) {
    mil::ProgramBuilder pb;
    auto& b = pb.function("main");
    auto x = b.input("x", kern::act_type(cin, S));
    auto wt = b.const_blob(mil::tensor_type(mil::DType::kFp16, {cout, cin, 1, 1}), "@model_path/weights/w.bin", 64);
    b.output(b.conv(x, wt));
    mil::BlobWriter bw;
    bw.add_fp16(randn(static_cast<size_t>(cin * cout), 7, 1.0f / std::sqrt(float(cin))));
    rt::Weights weights{{"@model_path/weights/w.bin", std::make_shared<const std::vector<uint8_t>>(bw.take())}};
    run_program(be, pb.build(), weights, repeats, out, t);
  };
  return w;
}

Workload attention_workload(int repeats) {
  const int64_t D = 768, H = 12, S = 256;
  Workload w{"attention", "causal attention block D=768, 12 heads, S=256 (Wq/Wk/Wv/Wo + matmul/mask/softmax)",
             4 * 2.0 * D * D * S + 2 * 2.0 * S * S * D, {}};
  w.run = [=](rt::Backend& be, std::vector<float>& out, json& t) {
    mil::ProgramBuilder pb;
    auto& b = pb.function("main");
    kern::BlobSet blobs;
    auto x = b.input("x", kern::act_type(D, S));
    const float sc = 1.0f / std::sqrt(float(D));
    auto proj = [&](const char* stem, uint32_t seed, const mil::Value& v) {
      auto m = randn(static_cast<size_t>(D * D), seed, sc);
      return kern::linear(b, v, blobs.matrix(b, stem, m, D, D));
    };
    auto q = kern::split_heads(b, proj("wq", 11, x), H);
    auto k = kern::split_heads(b, proj("wk", 12, x), H);
    auto v = kern::split_heads(b, proj("wv", 13, x), H);
    auto mask = blobs.tensor(b, "mask", mil::tensor_type(mil::DType::kFp16, {1, 1, S, S}), kern::causal_mask(S));
    auto a = kern::causal_attention(b, q, k, v, mask, 1.0 / std::sqrt(double(D / H)));
    b.output(proj("wo", 14, kern::merge_heads(b, a)));
    run_program(be, pb.build(), blobs.weights(), repeats, out, t);
  };
  return w;
}

// One layer forward + backward through LayerRunner (dynamic weights: 9 kernels compiled once).
Workload layer_workload(int repeats) {
  kern::TrainShape s;
  s.dim = 64, s.hidden = 172, s.n_heads = 8, s.n_kv_heads = 4, s.head_dim = 8, s.seq = 32;
  const double D = double(s.dim), QD = double(s.q_dim()), KVD = double(s.kv_dim()), Hd = double(s.hidden),
               S = double(s.seq);
  const double fwd = 2 * S * (D * QD + 2 * D * KVD + QD * D + 3 * D * Hd) + 4 * S * S * QD;
  Workload w{"train_layer", "training layer fwd+bwd " + s.str() + " (dynamic weights)", 3 * fwd, {}};
  w.run = [=](rt::Backend& be, std::vector<float>& out, json& t) {
    std::vector<std::vector<float>> ws;
    auto mk = [&](int64_t n, uint32_t seed, float scale) -> std::span<const float> {
      ws.push_back(randn(static_cast<size_t>(n), seed, scale));
      return ws.back();
    };
    ws.reserve(16);
    const int64_t d = s.dim, qd = s.q_dim(), kvd = s.kv_dim(), h = s.hidden, sq = s.seq;
    kern::LayerWeights lw{mk(qd * d, 1, 0.125f), mk(kvd * d, 2, 0.125f), mk(kvd * d, 3, 0.125f), mk(d * qd, 4, 0.1f),
                          mk(h * d, 5, 0.125f), mk(h * d, 6, 0.125f), mk(d * h, 7, 0.07f), mk(d, 8, 0.1f),
                          mk(d, 9, 0.1f)};
    std::vector<float> rms1(lw.rms_att.begin(), lw.rms_att.end()), rms2(lw.rms_ffn.begin(), lw.rms_ffn.end());
    for (auto& v : rms1) v += 1.0f;
    for (auto& v : rms2) v += 1.0f;
    lw.rms_att = rms1;
    lw.rms_ffn = rms2;
    const auto x = randn(static_cast<size_t>(d * sq), 20, 1.0f), dy = randn(static_cast<size_t>(d * sq), 21, 1.0f);
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
      for (const auto* v : {&at.o, &ft.y, &fg.dh1, &sg.dq, &sg.dk, &sg.dv, &dx1}) out.insert(out.end(), v->begin(), v->end());
    };
    const auto t0 = Clock::now();
    r.set_weights(lw);
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

// ---- the command --------------------------------------------------------------------------------
struct AneSide {
  std::unique_ptr<ane::NativeBackend> backend;
  json info;
};

AneSide make_ane(const ProbeOptions& o) {
  AneSide a;
  std::string why;
  std::unique_ptr<ane::Shim> shim;
  if (o.shim == "fake") {
    ane::FakeShimOptions fo;
    fo.device = o.device;
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
  rt::BackendOptions bo;
  bo.device = o.device;
  bo.threads = o.threads;
  a.backend = std::make_unique<ane::NativeBackend>(std::move(shim), bo);
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
    w.run(*ane, ane_out, ta);
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
  if (!c["ane"].is_null()) {
    const json& a = c["ane"];
    std::printf("  %-12s ane       compile %8.1f ms  load %7.1f ms  eval %9.3f ms  %8.3f TFLOPS  max rel diff %.3g\n",
                "", num(a, "compile_ms"), num(a, "load_ms"), num(a, "eval_ms"), num(a, "tflops"),
                c["max_rel_diff"].get<double>());
  }
}

void run_probe(const ProbeOptions& o) {
  json report{{"schema", "anelab.probe/1"}, {"device_profile", o.device}};
  report["host"] = host_info();
  AneSide ane = make_ane(o);
  report["ane"] = ane.info;
  const json& h = report["host"];
  std::printf("anelab probe\n  host: %s %s (%s), OS version %s\n", h.value("os", "?").c_str(),
              h.value("kernel", "?").c_str(), h.value("machine", "?").c_str(), h.value("os_version", "?").c_str());
  std::printf("  ANE chip family: %s (profile %s)\n", ane.info["chip_family"].get<std::string>().c_str(), o.device.c_str());
  if (!ane.backend)
    std::printf("  ANE: not available: %s\n  running the emulator half only\n",
                ane.info["reason"].get<std::string>().c_str());
  else
    std::printf("  ANE: %s\n", ane.info["shim_describe"].get<std::string>().c_str());
  rt::BackendOptions eo;
  eo.device = o.device;
  eo.threads = o.threads;
  auto emu = rt::create_backend("emulator", eo);
  report["cases"] = json::array();
  for (const Workload& w : {conv_workload(o.repeats), attention_workload(o.repeats), layer_workload(o.repeats)}) {
    json c = run_case(w, *emu, ane.backend.get());
    print_case(c);
    report["cases"].push_back(std::move(c));
  }
  if (!o.out.empty()) {
    write_file_atomic(o.out, report.dump(2) + "\n");
    std::printf("  report: %s\n", o.out.c_str());
  }
}

}  // namespace

void add_probe_command(CLI::App& app) {
  auto o = std::make_shared<ProbeOptions>();
  auto* cmd = app.add_subcommand(
      "probe", "Report the host's ANE (chip, OS) and run conv / attention / training-layer probes on the ANE and the "
               "emulator (JSON with --out, to attach to an issue)");
  cmd->add_option("--out", o->out, "write the JSON report here");
  cmd->add_option("--shim", o->shim, "system: the real ANE (if any); fake: the FakeShim over the emulator (testing)")
      ->capture_default_str()
      ->check(CLI::IsMember({"system", "fake"}));
  cmd->add_option("--device", o->device, "device profile (m1..m5) for both halves")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "timed evaluations per workload (best reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "emulator threads (0 = all hardware threads)")->capture_default_str();
  cmd->callback([o] { run_probe(*o); });
}

}  // namespace anelab::cli
