// Per-head q/k RMSNorm before RoPE (Qwen3, ModelConfig::qk_norm) in the CPU engine. RMSNorm removes any
// scale of its input, so scaling wq or wk by 4 (exact in fp32) must leave the logits unchanged up to the
// eps term and fp32 rounding; without the norm, the attention scores change by that factor. The norm
// weights themselves must act (scaling q_norm changes the logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "infer/engine.h"
#include "models/presets.h"

namespace anelab::infer {
namespace {

models::ModelConfig tiny_qwen3() {
  models::ModelConfig c = models::preset("qwen3-0.6b");
  c.dim = 64, c.hidden_dim = 128, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32;
  c.vocab_size = 96, c.max_seq_len = 32;
  c.norm_eps = 1e-9f;  // eps / mean(q^2) ~ 1e-7: below fp32 rounding, so the invariance is exact to rounding
  return c;
}

// m with every tensor whose name ends in `leaf` multiplied by s.
models::Model scaled(const models::Model& m, const std::string& leaf, float s) {
  models::Model out;
  out.config = m.config;
  for (const models::Tensor& t : m.tensors()) {
    std::vector<float> v = t.to_f32();
    if (t.name.ends_with("." + leaf))
      for (float& x : v) x *= s;
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    out.add_owned(t.name, models::DType::kF32, t.shape, std::move(b));
  }
  return out;
}

// Teacher-forced logits [T, vocab] of a fixed prompt (CPU prefill, fp32 weights).
std::vector<float> logits(models::Model m) {
  EngineOptions o;
  o.backend = "cpu", o.dtype = WType::kF32, o.quiet = true;
  Engine e(std::move(m), o);
  const std::vector<int32_t> ids = {3, 17, 42, 5, 88, 1, 60, 23, 9, 77, 31, 50};
  std::vector<float> all;
  e.prefill(ids, 0, &all);
  return all;
}

// max |a - b| / (max(a) - min(a)).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
  return d / (*hi - *lo);
}

TEST(InferQkNorm, ScalingWqOrWkLeavesLogitsUnchanged) {
  const models::Model m = models::random_model(tiny_qwen3(), 11);
  const std::vector<float> ref = logits(scaled(m, "wq", 1.0f));
  // fp32 rounding through 2 layers of 64-wide dot products: ~1e-6 relative; 1e-5 of the range leaves margin.
  const double dq = rel_diff(ref, logits(scaled(m, "wq", 4.0f))), dk = rel_diff(ref, logits(scaled(m, "wk", 4.0f)));
  // The norm weights act: doubling q_norm doubles every attention score.
  const double dn = rel_diff(ref, logits(scaled(m, "q_norm", 2.0f)));
  std::printf("max |dlogit| / range: wq x4 %.2e, wk x4 %.2e, q_norm x2 %.2e\n", dq, dk, dn);
  EXPECT_LT(dq, 1e-5);
  EXPECT_LT(dk, 1e-5);
  EXPECT_GT(dn, 1e-3);
}

}  // namespace
}  // namespace anelab::infer
