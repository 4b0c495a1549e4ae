// anelab demo: the README's main job on an embedded default, the whole train -> generate -> export loop
// (cli/demo_loop.h).
// anelab demo kernel: builds the Stories110M attention-forward training kernel (RMSNorm, Q/K/V convs, RoPE, 12-head
// causal attention, Wo; six taps) with the typed MIL builder, prints its MIL size, compiles it on the chosen backend,
// runs it on seeded random weights and checks every tap against an independent float64 reference.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/demo_loop.h"
#include "cli/options.h"
#include "framework/backends/registry.h"
#include "framework/kernels/runner.h"
#include "framework/kernels/workloads.h"
#include "framework/mil/printer.h"

namespace anelab::cli {

namespace {

struct DemoOptions {
  std::string backend = "emulator";
  std::string device = rt::kDefaultDevice;
  int64_t seq = 256;
  int runs = 5;
  uint64_t seed = 42;
};

using Mat = std::vector<double>;  // row-major

// Float64 reference of the attention block, channel-first [C, S]; same maths as train.h's header.
struct Reference {
  Mat xnorm, q, k, v, attn, o;
};

Reference reference(const kern::TrainShape& sh, const std::vector<float>& x, const kern::LayerWeights& w) {
  const int64_t D = sh.dim, S = sh.seq, H = sh.n_heads, HD = sh.head_dim, KVD = sh.kv_dim(), QD = sh.q_dim();
  Reference r;
  r.xnorm.assign(D * S, 0);
  for (int64_t t = 0; t < S; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[d * S + t]) * x[d * S + t];
    double rr = 1.0 / std::sqrt(ss / D + sh.norm_eps);
    for (int64_t d = 0; d < D; ++d) r.xnorm[d * S + t] = x[d * S + t] * rr * w.norm("attn_norm")[d];
  }
  auto matmul = [&](const quant::Mat& wm, int64_t out, Mat& y) {  // y[out, S] = W[out, D] · xnorm
    const std::vector<float> W = kern::mat_values(wm);
    y.assign(out * S, 0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t d = 0; d < D; ++d) {
        double wv = W[o * D + d];
        for (int64_t t = 0; t < S; ++t) y[o * S + t] += wv * r.xnorm[d * S + t];
      }
  };
  matmul(w.wq, QD, r.q);
  matmul(w.wk, KVD, r.k);
  matmul(w.wv, KVD, r.v);
  auto rope = [&](Mat& m, int64_t heads) {  // adjacent pairs (llama2.c): (x0, x1) rotated by t*theta_i
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < HD / 2; ++i) {
        double freq = std::pow(sh.rope_theta, -2.0 * i / HD);
        for (int64_t t = 0; t < S; ++t) {
          double c = std::cos(t * freq), s = std::sin(t * freq);
          double& a = m[(h * HD + 2 * i) * S + t];
          double& b = m[(h * HD + 2 * i + 1) * S + t];
          double a0 = a, b0 = b;
          a = a0 * c - b0 * s;
          b = a0 * s + b0 * c;
        }
      }
  };
  rope(r.q, H);
  rope(r.k, sh.n_kv_heads);
  r.attn.assign(QD * S, 0);
  std::vector<double> p(S);
  for (int64_t h = 0; h < H; ++h) {
    int64_t kvh = h / sh.n_rep();
    for (int64_t t = 0; t < S; ++t) {
      double mx = -1e300;
      for (int64_t u = 0; u <= t; ++u) {
        double dot = 0;
        for (int64_t e = 0; e < HD; ++e) dot += r.q[(h * HD + e) * S + t] * r.k[(kvh * HD + e) * S + u];
        p[u] = dot * sh.attn_scale();
        mx = std::max(mx, p[u]);
      }
      double sum = 0;
      for (int64_t u = 0; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
      for (int64_t e = 0; e < HD; ++e) {
        double acc = 0;
        for (int64_t u = 0; u <= t; ++u) acc += p[u] * r.v[(kvh * HD + e) * S + u];
        r.attn[(h * HD + e) * S + t] = acc / sum;
      }
    }
  }
  r.o.assign(D * S, 0);
  const std::vector<float> wo = kern::mat_values(w.wo);  // [D, QD]
  for (int64_t o = 0; o < D; ++o)
    for (int64_t c = 0; c < QD; ++c) {
      double wv = wo[o * QD + c];
      for (int64_t t = 0; t < S; ++t) r.o[o * S + t] += wv * r.attn[c * S + t];
    }
  return r;
}

double nmse(const std::vector<float>& got, const Mat& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
  return den > 0 ? num / den : num;
}

void run_demo(const DemoOptions& o) {
  kern::TrainShape sh{768, 2048, 12, 12, 64, o.seq};
  sh.validate();
  const kern::RandomLayer layer(sh, static_cast<uint32_t>(o.seed));
  const kern::LayerWeights& w = layer.w;
  const int64_t D = sh.dim, S = sh.seq;
  const auto x = kern::random_normal(static_cast<size_t>(D * S), static_cast<uint32_t>(o.seed) * 16 + 10, 1.0f);

  std::printf(
      "anelab demo: Stories110M attention forward (dim %lld, %lld heads, seq %lld) on backend '%s', device %s\n",
      (long long)D, (long long)sh.n_heads, (long long)S, o.backend.c_str(), o.device.c_str());
  kern::KernelSpec spec = kern::build_kernel(kern::KernelKind::kAttnFwd, sh, kern::Strategy::kStatic, &w);
  std::string mil = mil::print(spec.program);
  size_t ops = spec.program.main().ops.size();
  std::printf("  MIL: %zu ops, %zu bytes of program text, %zu weight files; input %s, output %s\n", ops, mil.size(),
              spec.weights.size(), spec.in.type().str().c_str(), spec.out.type().str().c_str());

  rt::BackendOptions bo;
  bo.device = o.device;
  auto backend = rt::create_backend(o.backend, bo);
  auto t0 = std::chrono::steady_clock::now();
  auto compiled = backend->compile(spec.program, spec.weights);
  if (!compiled) compiled.status().throw_if_error();
  auto t1 = std::chrono::steady_clock::now();
  auto ins = (*compiled)->make_inputs(0, backend->profile());
  auto outs = (*compiled)->make_outputs(0, backend->profile());
  rt::stage_in(ins[0], spec.in, "x", x.data());
  rt::Surface* ip[] = {&ins[0]};
  rt::Surface* op[] = {&outs[0]};
  std::vector<double> ms;
  for (int i = 0; i < std::max(1, o.runs); ++i) {
    auto a = std::chrono::steady_clock::now();
    backend->evaluate(**compiled, 0, ip, op).throw_if_error();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(ms.begin(), ms.end());
  double flops = 2.0 * 4 * D * D * S + 2.0 * 2 * sh.n_heads * S * S * sh.head_dim;
  std::printf("  compile %.1f ms; evaluate median %.1f ms over %zu runs (%.1f GFLOP/s)\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(), ms[ms.size() / 2], ms.size(),
              flops / (ms[ms.size() / 2] * 1e6));

  Reference ref = reference(sh, x, w);
  const std::pair<const char*, const Mat*> taps[] = {{"o", &ref.o},      {"attn", &ref.attn}, {"q_rope", &ref.q},
                                                     {"k_rope", &ref.k}, {"v", &ref.v},       {"xnorm", &ref.xnorm}};
  // fp16 storage: ~10 dependent roundings of unit roundoff 2^-11 -> NMSE ~ (3u)^2 ~ 2e-6.
  const double limit = 1e-5;
  bool ok = true;
  for (const auto& [name, r] : taps) {
    std::vector<float> got(r->size());
    rt::stage_out(outs[0], spec.out, name, got.data());
    double e = nmse(got, *r);
    ok &= e < limit;
    std::printf("  tap %-7s NMSE vs float64 reference %.2e %s\n", name, e, e < limit ? "ok" : "TOO LARGE");
  }
  ANELAB_CHECK(ok, "demo", "kernel output differs from the float64 reference beyond fp16 tolerance (NMSE ", limit, ")");
  std::printf("  all taps within fp16 tolerance (NMSE < %.0e)\n", limit);
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto l = std::make_shared<DemoLoopOptions>();
  auto* d = app.add_subcommand(
      "demo",
      "Main job on an embedded default: train a tiny Llama from scratch on the ANE kernels (emulator, dynamic "
      "strategy) on data/tinytales, generate from the checkpoint, export it (`demo kernel`: one kernel vs float64)");
  d->require_subcommand(0, 1);
  d->add_option("--data", l->data,
                "directory with corpus.txt + tokenizer.json (default: the checkout's data/tinytales)");
  d->add_option("--out", l->out, "output directory (replaced when an earlier demo made it)")->capture_default_str();
  d->add_option("--preset", l->preset, "model preset trained from scratch")->capture_default_str();
  d->add_option("--strategy", l->strategy, "training strategy: dynamic, static or cpu")->capture_default_str();
  d->add_option("--backend", l->backend, "kernel backend: emulator or ane")->capture_default_str();
  d->add_option("--device", l->device, "device profile (m1..m5; default: the backend's)");
  d->add_option("--steps", l->steps, "optimizer steps")->capture_default_str();
  d->add_option("--batch-size", l->batch_size, "sequences per step")->capture_default_str();
  d->add_option("--seq-len", l->seq_len, "tokens per sequence")->capture_default_str();
  d->add_option("--lr", l->lr, "peak learning rate (cosine schedule)")->capture_default_str();
  d->add_option("--prompt", l->prompt, "prompt of the greedy sample")->capture_default_str();
  add_threads_option(d, l->threads);
  d->callback([d, l] {
    size_process_pool(*d, l->threads);
    if (d->get_subcommands().empty()) run_demo_loop(*l);
  });

  auto o = std::make_shared<DemoOptions>();
  auto* c = d->add_subcommand("kernel", "A Stories110M attention kernel: typed builder -> MIL -> backend vs float64");
  c->add_option("--backend", o->backend, "backend (emulator, ane)")->capture_default_str();
  c->add_option("--device", o->device, "device profile (m1..m5)")->capture_default_str();
  c->add_option("--seq", o->seq, "sequence length (a multiple of 32: the device's row-stride rule)")
      ->capture_default_str();
  c->add_option("--runs", o->runs, "timed evaluations")->capture_default_str();
  c->add_option("--seed", o->seed, "weights / input seed")->capture_default_str();
  c->callback([o] { run_demo(*o); });
}

}  // namespace anelab::cli
