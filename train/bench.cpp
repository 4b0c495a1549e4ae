#include "train/bench.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "models/presets.h"
#include "train/data.h"
#include "train/engine.h"
#include "train/optim.h"

namespace anelab::train {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string script_path() {
  namespace fs = std::filesystem;
  for (const char* root : {static_cast<const char*>(std::getenv("ANELAB_SOURCE_DIR")), static_cast<const char*>(ANELAB_TRAIN_SOURCE_DIR), "."}) {
    if (!root) continue;
    const fs::path p = fs::path(root) / "scripts" / "bench_train_torch.py";
    if (fs::exists(p)) return p.string();
  }
  fail("bench", "scripts/bench_train_torch.py not found (set ANELAB_SOURCE_DIR to the checkout)");
}

double torch_ms(const BenchOptions& o, int threads) {
  const std::string cmd = "/usr/bin/python3 " + script_path() + " --preset " + o.preset + " --batch " +
                          std::to_string(o.batch) + " --seq " + std::to_string(o.seq) + " --steps " +
                          std::to_string(o.steps) + " --threads " + std::to_string(threads) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) fail("bench", "cannot run ", cmd);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  const size_t brace = out.rfind('{');
  if (rc != 0 || brace == std::string::npos) fail("bench", "PyTorch side failed (", cmd, "): ", out);
  try {
    return nlohmann::json::parse(out.substr(brace)).at("ms_per_step").get<double>();
  } catch (const std::exception& e) {
    fail("bench", "PyTorch side printed no ms_per_step: ", out);
  }
}

}  // namespace

std::string load_average() {
  std::ifstream in("/proc/loadavg");  // procfs: size 0 in stat, read the line
  std::string s;
  std::getline(in, s);
  const size_t sp = s.find(' ', s.find(' ', s.find(' ') + 1) + 1);  // the 1, 5 and 15 minute averages
  return sp == std::string::npos ? s : s.substr(0, sp);
}

std::string bench_train(const BenchOptions& o) {
  TrainConfig c;
  c.strategy = o.strategy, c.seq_len = o.seq;
  if (c.strategy == "static") c.compile_budget = 1 << 30;  // every step recompiles 7 kernels per layer
  const ParamLayout layout(models::preset(o.preset));
  std::vector<float> w = init_random(layout, 1), g(w.size());
  const std::string load0 = load_average();
  auto engine = make_engine(c, layout);
  AdamW opt(layout, AdamWConfig{});
  Rng rng{7};
  Batch b{o.batch, o.seq, std::vector<int32_t>(size_t(o.batch * (o.seq + 1)))};
  for (auto& t : b.tokens) t = int32_t(rng.next() % uint64_t(layout.config().vocab_size));
  double best = 1e30, total = 0, compile_ms = 0, first_compile_ms = 0;
  int compiles = 0;
  StepTimes st;
  for (int i = 0; i <= o.steps; ++i) {
    const double t0 = now_ms();
    std::fill(g.begin(), g.end(), 0.0f);
    engine->forward_backward(w.data(), b, 1.0f, g.data(), i ? &st : nullptr);
    opt.update(w.data(), g.data(), 1e-4);
    engine->weights_updated();
    const double ms = now_ms() - t0;
    const auto [n, cms] = engine->take_compile_batch();
    if (i == 0) first_compile_ms = cms;
    if (i > 0) best = std::min(best, ms - cms), total += ms - cms, compile_ms += cms, compiles += n;  // step 0: warm-up
  }
  const double ours = total / o.steps;
  const int threads = omp_get_max_threads();
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "bench train: %s (%lld params), B=%d T=%d, %d timed steps, %d threads, load average %s\n"
                "  anelab  strategy %-7s %9.1f ms/step (best %.1f; fwd %.0f, cls %.0f, bwd %.0f; kernel eval %.0f, "
                "staging %.0f, dW not hidden %.0f ms avg)\n",
                o.preset.c_str(), (long long)layout.total(), o.batch, o.seq, o.steps, threads, load0.c_str(),
                o.strategy.c_str(), ours, best, st.fwd / o.steps, st.cls / o.steps, st.bwd / o.steps,
                st.kernel / o.steps, st.staging / o.steps, st.cpu_dw / o.steps);
  std::string r = buf;
  if (c.strategy != "cpu") {
    std::snprintf(buf, sizeof buf,
                  "          compile: %.0f ms before the first step; %s (not in ms/step above)\n", first_compile_ms,
                  compiles ? (std::to_string(compiles / o.steps) + " kernels, " +
                              std::to_string(int(compile_ms / o.steps)) + " ms per step after each update").c_str()
                           : "none after updates (weights restaged)");
    r += buf;
  }
  if (o.run_torch) {
    const double t = torch_ms(o, threads);
    std::snprintf(buf, sizeof buf, "  pytorch fp32 (same run) %9.1f ms/step\n  ratio anelab/pytorch: %.2fx (%s); load average now %s\n",
                  t, ours / t, ours < t ? "anelab faster" : "pytorch faster", load_average().c_str());
    r += buf;
  }
  return r;
}

}  // namespace anelab::train
