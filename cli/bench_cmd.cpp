// anelab bench emulator: the machine's fp32 FMA peak (measured in-process on the same thread pool the
// emulator uses) and the emulator's speed on
//   conv       a 1x1 conv 768->2048 at S=256 (fp16 I/O),
//   attention  a 12-head causal attention block at S=256 (matmul QK^T, scale, additive mask const,
//              softmax, matmul V),
//   <kernel>   the framework/kernels training kernels (attn_fwd, ffn_fwd, ffn_bwd, wo_bwd, sdpa_bwd1,
//              sdpa_bwd2, qkv_bwd, rms_att_bwd, rms_ffn_bwd) at the Stories110M shape (D=768, H=2048,
//              12 heads, S=256) in the static and/or dynamic weight strategy.
// Per benchmark: median and best wall time of one evaluate(), process CPU time per evaluate (robust on
// a loaded machine when --threads 1), GFLOP/s from the median (GEMM flops only) and % of the peak.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>

#include "cli/commands.h"
#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/core/thread_pool.h"
#include "framework/kernels/train.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"
#include "framework/mil/printer.h"
#include "framework/runtime/backend.h"

namespace anelab::cli {
namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// fp32 FMA peak: kChains independent accumulator chains of one SIMD vector per thread (enough to hide
// the FMA latency on every FMA port: 12 on x86, 16 on Apple/Arm cores with 4 FMA pipes), 2 flops per lane
// per FMA; one chain set per pool worker.
double fma_peak_gflops(int threads) {
  namespace W = simd;
  constexpr int kChains = std::string_view(W::kName) == "neon" ? 16 : 12;
  constexpr int64_t kIters = 20'000'000;
  ThreadPool pool(threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
    const auto t0 = Clock::now();
    pool.run([&](int w) {
      W::F32 a[kChains];
      for (int i = 0; i < kChains; ++i) a[i] = W::set1(static_cast<float>(i) * 1e-3f);
      const W::F32 m = W::set1(0.999999f), c = W::set1(1e-7f);
      for (int64_t it = 0; it < kIters / 16; ++it)
        for (int u = 0; u < 16; ++u)
#pragma GCC unroll 16
          for (int i = 0; i < kChains; ++i) a[i] = W::fmadd(a[i], m, c);
      W::F32 s = a[0];
      for (int i = 1; i < kChains; ++i) s = W::add(s, a[i]);
      sink[static_cast<size_t>(w)] = W::reduce_add(s);
    });
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    float total = 0;
    for (float v : sink) total += v;
    if (total == 12345.0f) std::printf(" ");  // keep the loop alive
    best = std::max(best, static_cast<double>(threads) * (kIters / 16) * 16 * kChains * W::kWidth * 2 / sec / 1e9);
  }
  return best;
}

std::vector<float> random_fp16(size_t n, float scale, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_fp16(d(g));
  return v;
}

struct BenchResult {
  std::string name;
  double gflop = 0, median_ms = 0, best_ms = 0, cpu_ms = 0, gflops = 0;
};

BenchResult time_program(const std::string& name, const mil::Program& p, const rt::Weights& w, double gflop,
                         int threads, int runs) {
  rt::BackendOptions o;
  o.threads = threads;
  auto be = rt::create_backend("emulator", o);
  auto k = be->compile(p, w);
  k.status().throw_if_error();
  auto ins = (*k)->make_inputs(0, be->profile());
  auto outs = (*k)->make_outputs(0, be->profile());
  std::vector<rt::Surface*> ip, op;
  for (size_t i = 0; i < ins.size(); ++i) {
    auto v = random_fp16(static_cast<size_t>(ins[i].numel()), 1.0f, 100 + static_cast<uint32_t>(i));
    ins[i].write(v.data());
    ip.push_back(&ins[i]);
  }
  for (auto& s : outs) op.push_back(&s);
  for (int r = 0; r < 2; ++r) be->evaluate(**k, 0, ip, op).throw_if_error();  // warm-up
  std::vector<double> ms;
  const double c0 = cpu_seconds();
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    be->evaluate(**k, 0, ip, op).throw_if_error();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double cpu = (cpu_seconds() - c0) * 1e3 / runs;
  std::sort(ms.begin(), ms.end());
  BenchResult b{name, gflop, ms[ms.size() / 2], ms[0], cpu, 0};
  b.gflops = gflop > 0 ? gflop / (b.median_ms / 1e3) : 0;
  return b;
}

BenchResult bench_conv(int threads, int runs) {
  const int64_t cin = 768, cout = 2048, s = 256;
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  mil::BlobWriter blob;
  const uint64_t off = blob.add_fp16(random_fp16(static_cast<size_t>(cin * cout), 0.05f, 1));
  auto x = b.input("x", mil::tensor_type(mil::DType::kFp16, {1, cin, 1, s}));
  auto wt = b.const_blob(mil::tensor_type(mil::DType::kFp16, {cout, cin, 1, 1}), "@model_path/weights/w.bin", off);
  b.output(b.conv(x, wt));
  rt::Weights w{{"@model_path/weights/w.bin", std::make_shared<const std::vector<uint8_t>>(blob.take())}};
  return time_program("conv1x1_768x2048_s256", pb.build(), w, 2.0 * cin * cout * s / 1e9, threads, runs);
}

// q, k, v: [1, 12, 256, 64] fp16 inputs; mask [1, 1, S, S] const (0 on/below the diagonal, -65504 above).
BenchResult bench_attention(int threads, int runs) {
  const int64_t H = 12, S = 256, D = 64;
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  mil::BlobWriter blob;
  std::vector<float> mask(static_cast<size_t>(S * S));
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) mask[static_cast<size_t>(i * S + j)] = j <= i ? 0.0f : -65504.0f;
  const uint64_t off = blob.add_fp16(mask);
  const auto t = mil::tensor_type(mil::DType::kFp16, {1, H, S, D});
  auto q = b.input("q", t), k = b.input("k", t), v = b.input("v", t);
  auto m = b.const_blob(mil::tensor_type(mil::DType::kFp16, {1, 1, S, S}), "@model_path/weights/mask.bin", off);
  auto sc = b.add(b.mul(b.matmul(q, k, false, true), 0.125), m);
  b.output(b.matmul(b.softmax(sc, -1), v));
  rt::Weights w{{"@model_path/weights/mask.bin", std::make_shared<const std::vector<uint8_t>>(blob.take())}};
  return time_program("attention_12h_s256_causal", pb.build(), w, 2.0 * 2.0 * H * S * S * D / 1e9, threads, runs);
}

// GEMM flops of one training kernel (the elementwise work is not counted).
double kernel_gflop(kern::KernelKind k, const kern::TrainShape& s) {
  const double D = static_cast<double>(s.dim), H = static_cast<double>(s.hidden), S = static_cast<double>(s.seq);
  const double QD = static_cast<double>(s.q_dim()), KVD = static_cast<double>(s.kv_dim());
  switch (k) {
    case kern::KernelKind::kAttnFwd: return (2 * S * D * (2 * QD + 2 * KVD) + 4 * S * S * QD) / 1e9;
    case kern::KernelKind::kFfnFwd:
    case kern::KernelKind::kFfnBwd: return 2 * S * 3 * D * H / 1e9;
    case kern::KernelKind::kWoBwd: return 2 * S * D * QD / 1e9;
    case kern::KernelKind::kSdpaBwd1: return 6 * S * S * QD / 1e9;
    case kern::KernelKind::kSdpaBwd2: return 4 * S * S * QD / 1e9;
    case kern::KernelKind::kQkvBwd: return 2 * S * D * (QD + 2 * KVD) / 1e9;
    default: return 0;
  }
}

struct RandomLayer {
  std::vector<float> wq, wk, wv, wo, w1, w2, w3, ra, rf;
  kern::LayerWeights w;
  explicit RandomLayer(const kern::TrainShape& s) {
    auto r = [](int64_t n, float sc, uint32_t seed) { return random_fp16(static_cast<size_t>(n), sc, seed); };
    wq = r(s.q_dim() * s.dim, 0.05f, 1), wk = r(s.kv_dim() * s.dim, 0.05f, 2), wv = r(s.kv_dim() * s.dim, 0.05f, 3);
    wo = r(s.dim * s.q_dim(), 0.05f, 4), w1 = r(s.hidden * s.dim, 0.03f, 5), w2 = r(s.dim * s.hidden, 0.03f, 6);
    w3 = r(s.hidden * s.dim, 0.03f, 7), ra = r(s.dim, 1.0f, 8), rf = r(s.dim, 1.0f, 9);
    w = kern::train_weights(s, wq, wk, wv, wo, w1, w3, w2, ra, rf);
  }
};

BenchResult bench_kernel(kern::KernelKind kind, kern::Strategy st, int threads, int runs, bool print_mil) {
  kern::TrainShape s{768, 2048, 12, 12, 64, 256};
  RandomLayer layer(s);
  kern::KernelSpec spec = kern::build_kernel(kind, s, st, &layer.w);
  if (print_mil) std::printf("%s\n", mil::print(spec.program).c_str());
  return time_program(std::string(kern::kernel_name(kind)) + "_" + kern::strategy_name(st), spec.program,
                      spec.weights, kernel_gflop(kind, s), threads, runs);
}

struct Opts {
  int threads = 0, runs = 20;
  bool json = false, no_peak = false, print_mil = false;
  std::vector<std::string> kernels;  // empty: conv + attention
  std::string strategy = "both";
};

std::vector<BenchResult> run_selected(const Opts& o, int threads) {
  std::vector<std::string> names = o.kernels;
  if (names.empty()) names = {"conv", "attention"};
  if (std::find(names.begin(), names.end(), "all") != names.end()) {
    names = {"conv", "attention"};
    for (auto k : kern::kAllKernelKinds) names.push_back(kern::kernel_name(k));
  }
  std::vector<kern::Strategy> strategies;
  if (o.strategy != "dynamic") strategies.push_back(kern::Strategy::kStatic);
  if (o.strategy != "static") strategies.push_back(kern::Strategy::kDynamic);
  std::vector<BenchResult> rs;
  for (const auto& n : names) {
    if (n == "conv") {
      rs.push_back(bench_conv(threads, o.runs));
      continue;
    }
    if (n == "attention") {
      rs.push_back(bench_attention(threads, o.runs));
      continue;
    }
    bool found = false;
    for (auto k : kern::kAllKernelKinds) {
      if (n != kern::kernel_name(k)) continue;
      found = true;
      for (auto st : strategies) {
        if (st == kern::Strategy::kDynamic && !kern::kernel_has_weights(k) && strategies.size() == 2) continue;
        rs.push_back(bench_kernel(k, st, threads, o.runs, o.print_mil));
      }
    }
    if (!found)
      fail("bench", "--kernel '", n, "' is unknown (expected conv, attention, all, or a training kernel: attn_fwd, "
           "ffn_fwd, ffn_bwd, wo_bwd, sdpa_bwd1, sdpa_bwd2, qkv_bwd, rms_att_bwd, rms_ffn_bwd)");
  }
  return rs;
}

void run_bench(const Opts& o) {
  const int threads = o.threads > 0 ? o.threads : ThreadPool::global().size();
  const double peak = o.no_peak ? 0.0 : fma_peak_gflops(threads);
  const std::vector<BenchResult> rs = run_selected(o, threads);
  auto frac = [&](const BenchResult& r) { return peak > 0 ? r.gflops / peak : 0.0; };
  if (o.json) {
    nlohmann::json j{{"threads", threads}, {"runs", o.runs}, {"fma_peak_gflops", peak}, {"benches", nlohmann::json::array()}};
    for (const auto& r : rs)
      j["benches"].push_back({{"name", r.name}, {"gflop", r.gflop}, {"median_ms", r.median_ms}, {"best_ms", r.best_ms},
                              {"cpu_ms", r.cpu_ms}, {"gflops", r.gflops}, {"fraction_of_peak", frac(r)}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (peak > 0) std::printf("fp32 FMA peak (%d threads): %.1f GFLOP/s\n", threads, peak);
  // cpu_GF/s: GEMM flops per second of process CPU time (meaningful on a loaded machine with --threads 1).
  std::printf("%-28s %9s %9s %9s %8s %7s %9s\n", "bench", "median_ms", "best_ms", "cpu_ms", "GFLOP/s", "%peak",
              "cpu_GF/s");
  for (const auto& r : rs)
    std::printf("%-28s %9.3f %9.3f %9.3f %8.1f %6.1f%% %9.1f\n", r.name.c_str(), r.median_ms, r.best_ms, r.cpu_ms,
                r.gflops, 100.0 * frac(r), r.cpu_ms > 0 ? r.gflop / (r.cpu_ms / 1e3) : 0.0);
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* emu = bench->add_subcommand(
      "emulator", "Emulator speed (conv 768->2048 S=256; 12-head attention S=256; training kernels) vs the fp32 FMA peak");
  auto o = std::make_shared<Opts>();
  emu->add_option("--threads", o->threads, "threads (0 = all hardware threads)")->capture_default_str();
  emu->add_option("--runs", o->runs, "timed evaluate() calls per benchmark (median reported)")->capture_default_str()->check(CLI::PositiveNumber);
  emu->add_option("--kernel", o->kernels,
                  "benchmarks to run (repeatable): conv, attention, all, or a Stories110M training kernel "
                  "(attn_fwd ffn_fwd ffn_bwd wo_bwd sdpa_bwd1 sdpa_bwd2 qkv_bwd rms_att_bwd rms_ffn_bwd) [default: conv attention]");
  emu->add_option("--strategy", o->strategy, "weight strategy of the training kernels: static, dynamic or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"static", "dynamic", "both"}));
  emu->add_flag("--no-peak", o->no_peak, "skip the FMA peak measurement (no % of peak)");
  emu->add_flag("--json", o->json, "machine-readable output");
  emu->add_flag("--print-mil", o->print_mil, "print each training kernel's MIL program before timing it");
  emu->callback([o] { run_bench(*o); });
}

}  // namespace anelab::cli
