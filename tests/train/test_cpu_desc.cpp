// The CPU training executor walks the model description (train/cpu_model.h): a description edited the way a
// future architecture would (more steps per layer, shared weights, post norms, residual scales) trains with
// gradients that match its own loss, and what the executor lacks is refused in one line naming the layer, the
// step and the executor.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/model_desc.h"
#include "models/arch/arch.h"
#include "models/presets.h"
#include "train/cpu_model.h"

namespace anelab::train {
namespace {

models::ModelConfig small_qwen3() {
  models::ModelConfig c = models::preset("qwen3-0.6b");
  c.dim = 32, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 16, c.hidden_dim = 48;
  c.vocab_size = 64, c.max_seq_len = 16;
  return c;
}

std::string cpu_refusal(const ParamLayout& layout, const models::ModelDesc& d) {
  try {
    CpuModel m(layout, d);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(TrainCpuDesc, RefusesWhatItLacksNamingLayerStepAndExecutor) {
  const ParamLayout layout(small_qwen3());
  const models::ModelDesc base = models::describe_model(layout.config());
  EXPECT_EQ(cpu_refusal(layout, base), "(accepted)");
  const std::string ex = " is not supported by the CPU training executor (--strategy cpu)";
  models::ModelDesc d = base;
  d.layers[1].steps[0].attn.score_softcap = 50.0f;
  EXPECT_EQ(cpu_refusal(layout, d), "[train] layer 1 attention: score soft-capping" + ex);
  d = base;
  d.layers[1].steps[0].attn.q_norm->kind = models::NormType::kLayer;
  EXPECT_EQ(cpu_refusal(layout, d), "[train] layer 1 attention: a LayerNorm q-norm" + ex);
  d = base;
  d.layers[0].steps[1].ffn.activation = models::Activation::kGeluTanh;
  EXPECT_EQ(cpu_refusal(layout, d), "[train] layer 0 ffn: the gelu_tanh MLP" + ex);
  d = base;
  d.layers[1].steps[0].attn.rope.dims = 3;  // partial RoPE rotates pairs
  EXPECT_EQ(cpu_refusal(layout, d), "[train] layer 1 attention: RoPE on 3 dims (an even count up to head_dim)" + ex);
  d = base;
  d.layers[1].steps[0].attn.output_gate = true;  // Qwen3.5's gate needs wq's gate rows, which this layout lacks
  EXPECT_EQ(cpu_refusal(layout, d),
            "[train] layer 1 attention: layers.1.wq has 32 rows, the description 64 (with the output gate's)");
  d = base;
  d.layers[0].steps[1].kind = models::StepKind::kLinearAttention;
  d.layers[0].steps[1].deltanet.n_k_heads = 2, d.layers[0].steps[1].deltanet.n_v_heads = 3;
  EXPECT_EQ(cpu_refusal(layout, d),
            "[train] layer 0 linear attention: value heads (3) not a multiple of the key heads (2)" + ex);
  d = base;
  d.layers[0].steps[0].attn.bq = "layers.0.bq";  // a weight the layout lacks is refused too
  EXPECT_EQ(cpu_refusal(layout, d), "[train] layer 0 attention: q/k/v/o biases" + ex);
}

// Layer 0 becomes [attention, ffn with a post norm, the same ffn again at residual scale 0.5] (the third step
// shares the second's weights, so their gradients add). The gradient must be the derivative of the loss: the
// central difference of the loss along u = g / |g| equals |g|. Its error: the h² term of the difference and the
// loss's fp32 rounding (≈ 1e-6 relative of a loss ≈ ln 64) / h, both well under 1 % of |g| for h = 1e-2; a
// backward that dropped the residual scale, the post norm or the shared step's part misses by far more.
TEST(TrainCpuDesc, EditedDescriptionGradientsAreTheLossDerivative) {
  const ParamLayout layout(small_qwen3());
  models::ModelDesc d = models::describe_model(layout.config());
  models::Step ffn = d.layers[0].steps[1];
  ffn.post_norm = ffn.pre_norm;  // shares the pre-norm's weight
  d.layers[0].steps[1] = ffn;
  ffn.residual_scale = 0.5f;
  d.layers[0].steps.push_back(ffn);
  CpuModel m(layout, d);
  Batch b;
  b.B = 2, b.T = 8;
  for (int64_t i = 0; i < b.B * (b.T + 1); ++i) b.tokens.push_back(int32_t((i * 37 + 11) % 64));
  std::vector<float> w = init_random(layout, 5);
  std::vector<float> g(w.size(), 0.0f);
  m.forward_backward(w.data(), b, 1.0f, g.data());
  double norm = 0;
  for (float v : g) norm += double(v) * v;
  norm = std::sqrt(norm);
  ASSERT_GT(norm, 1e-3);
  const double h = 1e-2;
  auto loss_at = [&](double s) {
    std::vector<float> x(w);
    for (size_t i = 0; i < x.size(); ++i) x[i] += float(s * h * g[i] / norm);
    return m.loss(x.data(), b);
  };
  const double fd = (loss_at(1) - loss_at(-1)) / (2 * h);
  EXPECT_NEAR(fd, norm, 1e-2 * norm) << "central difference " << fd << " vs |g| " << norm;
  // The unedited description through the same constructor: a different model, so a different loss.
  CpuModel plain(layout, models::describe_model(layout.config()));
  EXPECT_NE(plain.loss(w.data(), b), m.loss(w.data(), b));
}

}  // namespace
}  // namespace anelab::train
