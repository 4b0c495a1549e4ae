// Before/after check of the generated MIL (scripts/mil_identity/run.sh): writes every training kernel (every
// trainable preset but those with post norms, both RoPE styles, both strategies, S = 64), the LoRA training kernels of
// the small presets (rank 4, every target, without and with dropout) and every prefill layer kernel (every preset,
// S = 64 and 128) as MIL text (<name>.mil) with a hash of its weights and of the emulator's output bytes for
// deterministic inputs and weights (<name>.hash). Built in each tree as the CMake target mil_identity_dump
// (tests/acceptance/CMakeLists.txt, not part of `all`). A kernel that fails to build, compile or evaluate is one line
// on stderr naming it, and the exit status is 1.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <list>

#include "framework/backends/registry.h"
#include "framework/kernels/train.h"
#include "framework/mil/printer.h"
#include "framework/runtime/backend.h"
#include "infer/engine.h"
#include "infer/prefill_mil.h"
#include "models/arch/arch.h"
#include "models/presets.h"
#include "train/params.h"
using namespace anelab;
static uint32_t st = 1;
static float rnd(float sc) {
  st = st * 1664525u + 1013904223u;
  return sc * ((st >> 8) / 16777216.0f * 2 - 1);
}
static std::vector<float> rv(int64_t n, float sc, float off = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = off + rnd(sc);
  return v;
}
static uint64_t fnv(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  auto* b = (const uint8_t*)p;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
static uint64_t whash(const rt::Weights& w) {
  uint64_t h = 1469598103934665603ull;
  for (auto& [k, v] : w) {
    h = fnv(k.data(), k.size(), h);
    h = fnv(v->data(), v->size(), h);
  }
  return h;
}
static std::unique_ptr<rt::Backend> be;
static uint64_t run(const mil::Program& p, const rt::Weights& w) {
  auto k = be->compile(p, w);
  if (!k) fail("mil_identity", "emulator compile: ", k.status().message());
  auto in = k.value()->make_inputs(0, be->profile());
  auto out = k.value()->make_outputs(0, be->profile());
  st = 7;
  auto x = rv(in[0].numel(), 0.5f);
  in[0].write(x.data());
  rt::Surface* ip[1] = {&in[0]};
  rt::Surface* op[1] = {&out[0]};
  be->evaluate(*k.value(), 0, ip, op).throw_if_error();
  return fnv(out[0].data(), out[0].bytes());
}
static void emit(const std::string& dir, const std::string& name, const mil::Program& p, const rt::Weights& w,
                 bool eval) {
  std::ofstream(dir + "/" + name + ".mil") << mil::print(p, mil::Dialect::kIos18);
  char buf[128];
  std::snprintf(buf, sizeof buf, "weights %016llx\noutput %016llx\n", (unsigned long long)whash(w),
                (unsigned long long)(eval ? run(p, w) : 0));
  std::ofstream(dir + "/" + name + ".hash") << buf;
}
static int failures = 0;
// Runs one kernel's build-and-emit; an exception is reported with the kernel's name and counted.
template <class F>
static void guarded(const std::string& what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[mil_identity] %s: %s\n", what.c_str(), e.what());
    ++failures;
  }
}
static void dump_all(const std::string& dir) {
  for (const std::string& name : models::preset_names()) {
    const models::ModelConfig& c = models::preset(name);
    const bool small = c.dim <= 288;
    // prefill (an architecture whose layers it refuses, Qwen3.5's linear attention, has no kernels to dump)
    if (c.full_attention_interval > 0) continue;
    const models::ModelDesc md = models::describe_model(c);
    const models::LayerDesc& layer0 = md.layers[0];
    for (int64_t S : {int64_t{64}, int64_t{128}})  // the default profile (m4) takes S = 64k
      guarded("prefill_" + name + "_s" + std::to_string(S), [&] {
        st = 3;
        const int64_t D = c.dim, QD = c.q_dim(), KVD = c.kv_dim(), H = c.hidden_dim;
        std::list<std::vector<float>> keep;
        auto mat = [&](int64_t r, int64_t cc) {
          keep.push_back(rv(r * cc, 1.0f / std::sqrt(float(cc))));
          infer::Mat m;
          m.type = infer::WType::kF32;
          m.rows = r;
          m.cols = cc;
          m.data = keep.back().data();
          return m;
        };
        auto vec = [&](int64_t n, float off) {
          keep.push_back(rv(n, 0.2f, off));
          return std::span<const float>(keep.back());
        };
        infer::LayerWeights L;
        L.wq = mat(QD, D), L.wk = mat(KVD, D), L.wv = mat(KVD, D), L.wo = mat(D, QD), L.w1 = mat(H, D),
        L.w2 = mat(D, H);
        if (gated_mlp(c.activation)) L.w3 = mat(H, D);
        const models::Step& at = layer0.steps[0];  // the norms by the description's names, in the dump's order
        const models::Step& ff = layer0.steps[1];
        L.set_norm(at.pre_norm->weight, vec(D, 1)), L.set_norm(ff.pre_norm->weight, vec(D, 1));
        if (!at.pre_norm->bias.empty())
          L.set_norm(at.pre_norm->bias, vec(D, 0)), L.set_norm(ff.pre_norm->bias, vec(D, 0));
        if (c.qkv_bias) L.bq = vec(QD, 0), L.bk = vec(KVD, 0), L.bv = vec(KVD, 0);
        if (c.attn_out_bias) L.bo = vec(D, 0);
        if (c.mlp_bias) L.b1 = vec(H, 0), L.b2 = vec(D, 0);
        if (at.attn.q_norm)
          L.set_norm(at.attn.q_norm->weight, vec(c.head_dim, 1)),
              L.set_norm(at.attn.k_norm->weight, vec(c.head_dim, 1));
        if (at.post_norm) L.set_norm(at.post_norm->weight, vec(D, 1)), L.set_norm(ff.post_norm->weight, vec(D, 1));
        auto src = infer::build_layer_kernel(c, L, S, mil::Dialect::kIos18);
        emit(dir, "prefill_" + name + "_s" + std::to_string(S), src.program, src.weights, true);
      });
    try {
      train::check_trainable(c);
    } catch (const Error&) {
      continue;
    }
    if (layer0.steps[0].post_norm)
      continue;  // TrainShape has no post norms (gemma3): its training kernels are not dumped
    kern::TrainShape s;
    s.dim = c.dim, s.hidden = c.hidden_dim, s.n_heads = c.n_heads, s.n_kv_heads = c.n_kv_heads;
    s.head_dim = c.head_dim, s.seq = 64, s.rope_theta = c.rope_theta, s.norm_eps = c.norm_eps;
    if (layer0.steps[0].attn.q_norm) s.q_norm = s.k_norm = models::NormDesc{NormType::kRms, c.norm_eps};
    for (auto rs : {kern::RopeStyle::kAdjacentPairs, kern::RopeStyle::kRotateHalf}) {
      s.rope = rs;
      st = 5;
      const int64_t D = s.dim, QD = s.q_dim(), KVD = s.kv_dim(), H = s.hidden;
      auto wq = rv(QD * D, 0.1f), wk = rv(KVD * D, 0.1f), wv = rv(KVD * D, 0.1f), wo = rv(D * QD, 0.1f);
      auto w1 = rv(H * D, 0.1f), w3 = rv(H * D, 0.1f), w2 = rv(D * H, 0.1f), ra = rv(D, 0.2f, 1), rf = rv(D, 0.2f, 1);
      std::vector<float> qn, kn;  // [HD] (q/k norms only)
      if (s.q_norm) qn = rv(s.head_dim, 0.2f, 1), kn = rv(s.head_dim, 0.2f, 1);
      kern::LayerWeights w = kern::train_weights(s, wq, wk, wv, wo, w1, w3, w2, ra, rf, qn, kn);
      for (auto strat : {kern::Strategy::kStatic, kern::Strategy::kDynamic})
        for (auto k : kern::kAllKernelKinds) {
          const std::string base = "train_" + name + "_" + kern::rope_style_name(rs) + "_" + kern::strategy_name(strat);
          guarded(base + "_kind" + std::to_string(int(k)), [&] {
            auto ks = kern::build_kernel(k, s, strat, &w);
            emit(dir, base + "_" + ks.name, ks.program, ks.weights, small);
          });
        }
      if (!small) continue;
      kern::TrainShape ls = s;  // LoRA (rank 4 on every target): the adapters' bands of the weight-bearing kernels
      ls.lora_rank = 4, ls.lora_scale = 2, ls.lora_targets = {"wq", "wk", "wv", "wo", "w1", "w3", "w2"};
      kern::TrainShape lds = ls;  // and with dropout: the masks' bands
      lds.lora_dropout = 0.1;
      for (const kern::TrainShape* sh : {&ls, &lds})
        for (auto strat : {kern::Strategy::kStatic, kern::Strategy::kDynamic})
          for (auto k : kern::kAllKernelKinds) {
            if (!kern::kernel_has_weights(k)) continue;
            const std::string base = std::string(sh == &ls ? "lora_" : "lora_dropout_") + name + "_" +
                                     kern::rope_style_name(rs) + "_" + kern::strategy_name(strat);
            guarded(base + "_kind" + std::to_string(int(k)), [&] {
              auto ks = kern::build_kernel(k, *sh, strat, &w);
              emit(dir, base + "_" + ks.name, ks.program, ks.weights, true);
            });
          }
    }
  }
}
int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  rt::BackendOptions o;
  o.compile_budget = 1 << 30;  // every kernel of every preset in one process
  be = rt::create_backend("emulator", o);
  dump_all(argv[1]);
  if (failures) std::fprintf(stderr, "[mil_identity] %d kernel(s) failed\n", failures);
  return failures ? 1 : 0;
}
