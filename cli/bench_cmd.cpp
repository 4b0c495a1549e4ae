// anelab bench memory: the machine's read bandwidth (GB/s) at N threads, the limit a decode GEMV streams
// its weights against (scripts/bench_quant_peers.sh prints tok/s next to it).
// anelab bench emulator: the machine's fp32 FMA peak (measured in-process on the same thread pool the
// emulator uses) and the emulator's speed on these workloads (framework/kernels/workloads.h):
//   conv       a 1x1 conv 768->2048 at S=256 (fp16 I/O),
//   attention  a 12-head causal attention block at S=256 (matmul QK^T, scale, additive mask const,
//              softmax, matmul V),
//   <kernel>   the framework/kernels training kernels (attn_fwd, ffn_fwd, ffn_bwd, wo_bwd, sdpa_bwd1,
//              sdpa_bwd2, qkv_bwd, rms_att_bwd, rms_ffn_bwd) at the Stories110M shape (D=768, H=2048,
//              12 heads, S=256) in the static and/or dynamic weight strategy.
// Per benchmark: median and best wall time of one evaluate(), process CPU time per evaluate (robust on
// a loaded machine when --threads 1), GFLOP/s from the median (GEMM flops only) and % of the peak.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "cli/commands.h"
#include "cli/options.h"
#include "framework/backends/registry.h"
#include "framework/core/error.h"
#include "framework/core/platform.h"
#include "framework/core/thread_pool.h"
#include "framework/kernels/workloads.h"
#include "framework/mil/printer.h"
#include "framework/runtime/backend.h"

namespace anelab::cli {
namespace {

using Clock = std::chrono::steady_clock;

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

// Read bandwidth: a buffer of `bytes` (far larger than the last-level cache) in the memory model weights get
// when read (platform::map_anonymous with huge pages advised, as FileAccess::kRead), each pool worker
// first-touches and then sums its own contiguous slice with 4 vector accumulators per pass; best of `passes`
// passes. `pages` receives the huge-page state of the buffer.
double read_bandwidth_gbs(int threads, int64_t bytes, int passes, std::string* pages) {
  namespace W = simd;
  ThreadPool pool(threads);
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float)) / (4 * W::kWidth * threads) * (4 * W::kWidth * threads);
  auto region = platform::map_anonymous(static_cast<size_t>(n) * sizeof(float), /*huge_pages=*/true);
  if (!region) fail("bench", "memory: ", region.reason);
  struct Unmap {
    platform::AnonRegion& r;
    ~Unmap() { platform::unmap_anonymous(r); }
  } unmap{*region.value};
  float* const buf = static_cast<float*>(region->data);
  const int64_t per = n / threads;
  pool.run([&](int w) { std::fill(buf + w * per, buf + (w + 1) * per, 1e-9f); });
  const auto huge = platform::anon_huge_pages_mb();
  if (!region->huge_pages)
    *pages = "no huge pages: " + region->huge_pages.reason;
  else
    *pages = *region->huge_pages.value + ", " +
             (huge ? std::to_string(std::lround(*huge)) + " MiB in huge pages" : huge.reason);
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  double best = 0;
  for (int rep = 0; rep < passes; ++rep) {
    const auto t0 = Clock::now();
    pool.run([&](int w) {
      const float* p = buf + w * per;
      W::F32 a0 = W::set1(0), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i < per; i += 4 * W::kWidth) {
        a0 = W::add(a0, W::load(p + i));
        a1 = W::add(a1, W::load(p + i + W::kWidth));
        a2 = W::add(a2, W::load(p + i + 2 * W::kWidth));
        a3 = W::add(a3, W::load(p + i + 3 * W::kWidth));
      }
      sink[static_cast<size_t>(w)] += W::reduce_add(W::add(W::add(a0, a1), W::add(a2, a3)));
    });
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n) * sizeof(float) / sec / 1e9);
  }
  float total = 0;
  for (float v : sink) total += v;
  if (total == 12345.0f) std::printf(" ");  // keep the loop alive
  return best;
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
  kern::fill_random_inputs(ins);
  std::vector<rt::Surface*> ip, op;
  for (auto& s : ins) ip.push_back(&s);
  for (auto& s : outs) op.push_back(&s);
  for (int r = 0; r < 2; ++r) be->evaluate(**k, 0, ip, op).throw_if_error();  // warm-up
  std::vector<double> ms;
  const double c0 = platform::process_cpu_ms() / 1e3;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    be->evaluate(**k, 0, ip, op).throw_if_error();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double cpu = (platform::process_cpu_ms() / 1e3 - c0) * 1e3 / runs;
  std::sort(ms.begin(), ms.end());
  BenchResult b{name, gflop, ms[ms.size() / 2], ms[0], cpu, 0};
  b.gflops = gflop > 0 ? gflop / (b.median_ms / 1e3) : 0;
  return b;
}

BenchResult bench_workload(const std::string& name, const kern::Workload& w, int threads, int runs) {
  return time_program(name, w.program, w.weights, w.flops / 1e9, threads, runs);
}

BenchResult bench_kernel(kern::KernelKind kind, kern::Strategy st, int threads, int runs, bool print_mil) {
  kern::TrainShape s{768, 2048, 12, 12, 64, 256};
  kern::RandomLayer layer(s);
  kern::KernelSpec spec = kern::build_kernel(kind, s, st, &layer.w);
  if (print_mil) std::printf("%s\n", mil::print(spec.program).c_str());
  return time_program(std::string(kern::kernel_name(kind)) + "_" + kern::strategy_name(st), spec.program, spec.weights,
                      kern::kernel_flops(kind, s) / 1e9, threads, runs);
}

struct Opts {
  int threads = kDefaultThreads, runs = 20;
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
      rs.push_back(bench_workload("conv1x1_768x2048_s256", kern::conv1x1_workload(768, 2048, 256), threads, o.runs));
      continue;
    }
    if (n == "attention") {
      rs.push_back(
          bench_workload("attention_12h_s256_causal", kern::attention_core_workload(12, 256, 64), threads, o.runs));
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
      fail("bench", "--kernel '", n,
           "' is unknown (expected conv, attention, all, or a training kernel: attn_fwd, "
           "ffn_fwd, ffn_bwd, wo_bwd, sdpa_bwd1, sdpa_bwd2, qkv_bwd, rms_att_bwd, rms_ffn_bwd)");
  }
  return rs;
}

void run_bench(const Opts& o) {
  const int threads = o.threads;
  const double peak = o.no_peak ? 0.0 : fma_peak_gflops(threads);
  const std::vector<BenchResult> rs = run_selected(o, threads);
  auto frac = [&](const BenchResult& r) { return peak > 0 ? r.gflops / peak : 0.0; };
  if (o.json) {
    nlohmann::json j{
        {"threads", threads}, {"runs", o.runs}, {"fma_peak_gflops", peak}, {"benches", nlohmann::json::array()}};
    for (const auto& r : rs)
      j["benches"].push_back({{"name", r.name},
                              {"gflop", r.gflop},
                              {"median_ms", r.median_ms},
                              {"best_ms", r.best_ms},
                              {"cpu_ms", r.cpu_ms},
                              {"gflops", r.gflops},
                              {"fraction_of_peak", frac(r)}});
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
      "emulator",
      "Emulator speed (conv 768->2048 S=256; 12-head attention S=256; training kernels) vs the fp32 FMA peak");
  auto o = std::make_shared<Opts>();
  add_threads_option(emu, o->threads);
  emu->add_option("--runs", o->runs, "timed evaluate() calls per benchmark (median reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  emu->add_option("--kernel", o->kernels,
                  "benchmarks to run (repeatable): conv, attention, all, or a Stories110M training kernel "
                  "(attn_fwd ffn_fwd ffn_bwd wo_bwd sdpa_bwd1 sdpa_bwd2 qkv_bwd rms_att_bwd rms_ffn_bwd) [default: "
                  "conv attention]");
  emu->add_option("--strategy", o->strategy, "weight strategy of the training kernels: static, dynamic or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"static", "dynamic", "both"}));
  emu->add_flag("--no-peak", o->no_peak, "skip the FMA peak measurement (no % of peak)");
  emu->add_flag("--json", o->json, "machine-readable output");
  emu->add_flag("--print-mil", o->print_mil, "print each training kernel's MIL program before timing it");
  emu->callback([o] { run_bench(*o); });

  auto* mem =
      bench->add_subcommand("memory", "Read bandwidth of main memory (GB/s) at N threads: the bound of a decode GEMV");
  struct MemOpts {
    int threads = kDefaultThreads, passes = 5;
    int64_t mib = 2048;
    bool json = false;
  };
  auto m = std::make_shared<MemOpts>();
  add_threads_option(mem, m->threads);
  mem->add_option("--mib", m->mib, "buffer size in MiB (well above the last-level cache)")
      ->capture_default_str()
      ->check(CLI::Range(64, 1 << 20));
  mem->add_option("--passes", m->passes, "timed passes (best reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  mem->add_flag("--json", m->json, "machine-readable output");
  mem->callback([m] {
    const int threads = m->threads;
    std::string pages;
    const double gbs = read_bandwidth_gbs(threads, m->mib << 20, m->passes, &pages);
    if (m->json)
      std::printf(
          "%s\n",
          nlohmann::json{{"threads", threads}, {"mib", m->mib}, {"read_gbs", gbs}, {"pages", pages}}.dump().c_str());
    else
      std::printf("read bandwidth (%d threads, %lld MiB, best of %d; %s): %.1f GB/s\n", threads,
                  static_cast<long long>(m->mib), m->passes, pages.c_str(), gbs);
  });
}

}  // namespace anelab::cli
