// anelab bench emulator: the machine's fp32 FMA peak (measured in-process on all threads) and the
// emulator's GFLOP/s on (a) a 1x1 conv 768->2048 at S=256 and (b) a 12-head causal attention block
// at S=256 (matmul QK^T, scale, additive mask const, softmax, matmul V), both fp16 I/O.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "framework/cli/commands.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"
#include "framework/runtime/backend.h"

namespace anelab::cli {
namespace {

using Clock = std::chrono::steady_clock;

// fp32 FMA peak: 12 independent accumulator chains of 16 lanes per thread (hides the 4-cycle FMA
// latency on 2 ports), 2 flops per lane per FMA.
double fma_peak_gflops(int threads) {
  constexpr int64_t kIters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      __m512 a[12];
      for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
      const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
      for (int64_t it = 0; it < kIters / 16; ++it)
        for (int u = 0; u < 16; ++u)
          for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
      __m512 s = a[0];
      for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
      sink += _mm512_reduce_add_ps(s);
    }
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (sink == 12345.0f) std::printf(" ");  // keep the loop alive
    best = std::max(best, static_cast<double>(threads) * (kIters / 16) * 16 * 12 * 16 * 2 / sec / 1e9);
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
  double gflop = 0, median_ms = 0, gflops = 0;
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
  std::vector<double> ms;
  for (int r = 0; r < runs + 2; ++r) {
    const auto t0 = Clock::now();
    be->evaluate(**k, 0, ip, op).throw_if_error();
    if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  BenchResult b{name, gflop, ms[ms.size() / 2], 0};
  b.gflops = gflop / (b.median_ms / 1e3);
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

void run_bench(int threads, int runs, bool json) {
  if (threads <= 0) threads = omp_get_max_threads();
  const double peak = fma_peak_gflops(threads);
  std::vector<BenchResult> rs{bench_conv(threads, runs), bench_attention(threads, runs)};
  if (json) {
    nlohmann::json j{{"threads", threads}, {"runs", runs}, {"fma_peak_gflops", peak}, {"benches", nlohmann::json::array()}};
    for (const auto& r : rs)
      j["benches"].push_back({{"name", r.name}, {"gflop", r.gflop}, {"median_ms", r.median_ms}, {"gflops", r.gflops},
                              {"fraction_of_peak", r.gflops / peak}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("fp32 FMA peak (%d threads): %.1f GFLOP/s\n", threads, peak);
  for (const auto& r : rs)
    std::printf("%-28s %8.3f ms  %7.1f GFLOP/s  %5.1f%% of peak\n", r.name.c_str(), r.median_ms, r.gflops,
                100.0 * r.gflops / peak);
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* emu = bench->add_subcommand("emulator", "Emulator GFLOP/s (conv 768->2048 S=256; 12-head attention S=256) vs the fp32 FMA peak");
  struct Opts {
    int threads = 0, runs = 20;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  emu->add_option("--threads", o->threads, "threads (0 = all hardware threads)")->capture_default_str();
  emu->add_option("--runs", o->runs, "timed evaluate() calls per benchmark (median reported)")->capture_default_str()->check(CLI::PositiveNumber);
  emu->add_flag("--json", o->json, "machine-readable output");
  emu->callback([o] { run_bench(o->threads, o->runs, o->json); });
}

}  // namespace anelab::cli
