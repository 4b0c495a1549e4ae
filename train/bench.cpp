#include "train/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "framework/core/clock.h"
#include "framework/core/error.h"
#include "framework/core/platform.h"
#include "framework/core/thread_pool.h"
#include "models/presets.h"
#include "train/data.h"
#include "train/engine.h"
#include "train/optim.h"

namespace anelab::train {
namespace {

std::string script_path() {
  namespace fs = std::filesystem;
  for (const char* root : {static_cast<const char*>(std::getenv("ANELAB_SOURCE_DIR")),
                           static_cast<const char*>(ANELAB_TRAIN_SOURCE_DIR), "."}) {
    if (!root) continue;
    const fs::path p = fs::path(root) / "scripts" / "bench_train_torch.py";
    if (fs::exists(p)) return p.string();
  }
  fail("bench", "scripts/bench_train_torch.py not found (set ANELAB_SOURCE_DIR to the checkout)");
}

// The OpenMP build of OpenBLAS in Debian's multiarch layout (/usr/lib/<triplet>/openblas-openmp, whatever the
// architecture), or "" when it is not installed.
std::string openmp_openblas_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& d : fs::directory_iterator("/usr/lib", ec)) {
    const fs::path p = d.path() / "openblas-openmp";
    if (fs::is_directory(p, ec)) found.push_back(p.string());
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? "" : found.front();
}

double torch_ms(const BenchOptions& o, int threads) {
  // Debian's torch uses the system BLAS; libopenblas-dev makes the pthread OpenBLAS the default, which
  // fights torch's OpenMP threads (~2x slower). Prefer the OpenMP build when it is installed.
  const std::string omp_blas = openmp_openblas_dir();
  const std::string env = omp_blas.empty() ? "" : "LD_LIBRARY_PATH=" + omp_blas + " ";
  const std::string cmd = env + "/usr/bin/python3 " + script_path() + " --preset " + o.preset + " --batch " +
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

std::string load_average() { return platform::format_load(platform::load_average()); }

struct EngineResult {
  double ms = 0, best = 1e30, compile_ms = 0, first_compile_ms = 0;  // ms/step excludes compiles
  int compiles = 0;
  StepTimes st;
};

// One warm-up step (it compiles), then o.steps timed steps of forward + backward + AdamW.
EngineResult time_engine(const BenchOptions& o, const std::string& strategy, const ParamLayout& layout) {
  TrainConfig c;
  c.strategy = strategy, c.seq_len = o.seq;
  if (strategy == "static") c.compile_budget = 1 << 30;  // every step recompiles 7 kernels per layer
  std::vector<float> w = init_random(layout, 1), g(w.size());
  auto engine = make_engine(c, layout);
  AdamW opt(layout, AdamWConfig{});
  Rng rng{7};
  Batch b{o.batch, o.seq, std::vector<int32_t>(size_t(o.batch * (o.seq + 1)))};
  for (auto& t : b.tokens) t = int32_t(rng.next() % uint64_t(layout.config().vocab_size));
  EngineResult r;
  for (int i = 0; i <= o.steps; ++i) {
    const double t0 = now_ms();
    std::fill(g.begin(), g.end(), 0.0f);
    engine->forward_backward(w.data(), b, 1.0f, g.data(), i ? &r.st : nullptr);
    opt.update(w.data(), g.data(), 1e-4);
    engine->weights_updated();
    const double ms = now_ms() - t0;
    const auto [n, cms] = engine->take_compile_batch();
    if (i == 0) r.first_compile_ms = cms;
    if (i > 0) r.best = std::min(r.best, ms - cms), r.ms += (ms - cms) / o.steps, r.compile_ms += cms, r.compiles += n;
  }
  return r;
}

std::string engine_lines(const BenchOptions& o, const std::string& strategy, const EngineResult& e) {
  const double n = o.steps;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "  anelab  strategy %-7s %9.1f ms/step (best %.1f; fwd %.0f, cls %.0f, bwd %.0f; kernel eval %.0f, "
                "staging %.0f, dW not hidden %.0f ms avg; load %s)\n",
                strategy.c_str(), e.ms, e.best, e.st.fwd / n, e.st.cls / n, e.st.bwd / n, e.st.kernel / n,
                e.st.staging / n, e.st.cpu_dw / n, load_average().c_str());
  std::string r = buf;
  if (strategy == "cpu") return r;
  const std::string after = e.compiles ? std::to_string(int(e.compiles / n)) + " kernels, " +
                                             std::to_string(int(e.compile_ms / n)) + " ms after each update"
                                       : "none after updates (weights restaged)";
  std::snprintf(buf, sizeof buf, "          compile: %.0f ms before the first step; %s (not in ms/step)\n",
                e.first_compile_ms, after.c_str());
  return r + buf;
}

}  // namespace

std::string bench_train(const BenchOptions& o) {
  const ParamLayout layout(models::preset(o.preset));
  std::vector<std::string> strategies;  // "dynamic,static" measures both
  for (size_t p = 0; p <= o.strategy.size();) {
    const size_t e = std::min(o.strategy.find(',', p), o.strategy.size());
    strategies.push_back(o.strategy.substr(p, e - p));
    p = e + 1;
  }
  const int threads = ThreadPool::global().size();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "bench train: %s (%lld params), B=%d T=%d, %d timed steps, %d threads, load average %s\n",
                o.preset.c_str(), (long long)layout.total(), o.batch, o.seq, o.steps, threads, load_average().c_str());
  std::string r = buf;
  // The box may be shared and its speed drifts over minutes: PyTorch runs before and after our engines.
  const double t_before = o.run_torch ? torch_ms(o, threads) : 0;
  const std::string load_before = load_average();
  std::vector<double> ms;
  for (const auto& s : strategies) {
    const EngineResult e = time_engine(o, s, layout);
    ms.push_back(e.ms);
    r += engine_lines(o, s, e);
  }
  if (!o.run_torch) return r;
  const double t_after = torch_ms(o, threads), t = 0.5 * (t_before + t_after);
  std::snprintf(buf, sizeof buf, "  pytorch fp32 (same run) %9.1f ms/step before (load %s), %.1f after (load %s)\n",
                t_before, load_before.c_str(), t_after, load_average().c_str());
  r += buf;
  for (size_t i = 0; i < ms.size(); ++i) {
    std::snprintf(buf, sizeof buf, "  ratio anelab %s / pytorch (mean of both): %.2fx (%s)\n", strategies[i].c_str(),
                  ms[i] / t, ms[i] < t ? "anelab faster" : "pytorch faster");
    r += buf;
  }
  return r;
}

}  // namespace anelab::train
