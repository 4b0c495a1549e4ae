#include "train/params.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "framework/core/error.h"
#include "models/presets.h"

namespace anelab::train {
namespace {
constexpr int kLayerFields = 13;  // LayerPtrs' fields
}  // namespace

namespace {
// "a, b, c" of the names whose flag is set.
std::string listed(std::initializer_list<std::pair<bool, const char*>> parts) {
  std::string out;
  for (const auto& [set, what] : parts)
    if (set) out += (out.empty() ? "" : ", ") + std::string(what);
  return out;
}
}  // namespace

void check_trainable(const models::ModelConfig& c) {
  models::validate_config(c, "train");
  const std::string lacks = listed({{c.norm != models::NormType::kRms, "LayerNorm"},
                                    {c.activation == models::Activation::kGeluTanh, "a GELU MLP"},
                                    {c.learned_pos || c.rope_style == models::RopeStyle::kNone, "learned positions"},
                                    {c.qkv_bias || c.attn_out_bias || c.mlp_bias, "bias tensors"},
                                    {c.head_dim % 2 != 0, "an odd head_dim (RoPE rotates pairs)"},
                                    {c.full_attention_interval > 0, "linear-attention (Gated DeltaNet) layers"}});
  if (!lacks.empty())
    fail(
        "train", "model '", c.arch, "': ", lacks,
        " not supported for training (trainable: Llama 2/3.x, Qwen2/2.5, Qwen3, Gemma 3; this model is inference-only, "
        "docs/training.md)");
}

void check_kernel_steps(const models::ModelDesc& d, const std::string& strategy) {
  const std::string executor = "the MIL training kernels (--strategy " + strategy + "; --strategy cpu has it)";
  const char* ex = executor.c_str();
  // The kernels implement pre-normed RMSNorm steps (weight w, no offset) and nothing after the step's op.
  auto norms = [&](int64_t l, const models::Step& s) {
    if (s.pre_norm && s.pre_norm->offset != 0.0f) models::unsupported("train", ex, l, s.kind, "a (1+w) RMSNorm");
    if (s.post_norm) models::unsupported("train", ex, l, s.kind, "a post-norm (sandwich norm)");
  };
  std::optional<float> rope_theta;  // the first attention step's: the kernels take one RoPE base
  for (size_t li = 0; li < d.layers.size(); ++li) {
    const auto l = static_cast<int64_t>(li);
    for (const models::Step& s : d.layers[li].steps) {
      switch (s.kind) {
        case models::StepKind::kAttention: {
          norms(l, s);
          const models::AttnDesc& a = s.attn;
          if ((a.q_norm && a.q_norm->offset != 0.0f) || (a.k_norm && a.k_norm->offset != 0.0f))
            models::unsupported("train", ex, l, s.kind, "a (1+w) q/k RMSNorm");
          if (a.window > 0)
            models::unsupported("train", ex, l, s.kind, "a sliding window (" + std::to_string(a.window) + " keys)");
          if (a.score_scale != 1.0f / std::sqrt(static_cast<float>(a.head_dim)))
            models::unsupported("train", ex, l, s.kind, "a score scale other than 1/sqrt(head_dim)");
          if (a.score_softcap > 0.0f) models::unsupported("train", ex, l, s.kind, "score soft-capping");
          if (!rope_theta) rope_theta = a.rope.theta;
          if (a.rope.theta != *rope_theta || a.rope.linear_factor != 1.0f)
            models::unsupported("train", ex, l, s.kind, "a per-layer RoPE base / linear RoPE scaling");
          break;
        }
        case models::StepKind::kFfn:
          norms(l, s);
          if (s.ffn.activation != models::Activation::kSilu)
            models::unsupported("train", ex, l, s.kind, "an MLP other than SwiGLU");
          break;
        case models::StepKind::kLinearAttention:
          models::unsupported("train", ex, l, s.kind, "a Gated DeltaNet mixer");
      }
    }
  }
  if (d.embed.scale != 1.0f) fail("train", "the embedding scale is not supported by ", executor);
  if (d.head.softcap > 0.0f) fail("train", "logit soft-capping is not supported by ", executor);
}

ParamLayout::ParamLayout(const models::ModelConfig& c) : config_(c) {
  check_trainable(c);
  for (const auto& s : models::canonical_tensors(c)) {
    ParamInfo p{s.name, s.shape, total_, s.numel(), s.shape.size() >= 2};
    total_ += p.numel;
    params_.push_back(std::move(p));
  }
  static const char* kFields[kLayerFields] = {
      "attn_norm",     "wq", "wk", "wv", "wo", "q_norm", "k_norm", "ffn_norm", "attn_post_norm",
      "ffn_post_norm", "w1", "w2", "w3"};
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (const char* f : kFields) {
      const std::string n = f;
      const bool absent = (!c.qk_norm && (n == "q_norm" || n == "k_norm")) ||
                          (!c.post_norms && (n == "attn_post_norm" || n == "ffn_post_norm"));
      layer_offsets_.push_back(absent ? -1 : find("layers." + std::to_string(l) + "." + f).offset);
    }
  emb_ = find("tok_embeddings").offset;
  norm_ = find("norm").offset;
  out_ = c.tied_embeddings ? emb_ : find("output").offset;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  fail("train", "no parameter '", name, "' in the ", config_.arch, " layout (", params_.size(), " tensors)");
}

LayerPtrs ParamLayout::layer(float* b, int64_t l) const {
  const int64_t* o = &layer_offsets_.at(static_cast<size_t>(l * kLayerFields));
  auto at = [&](int i) { return o[i] < 0 ? nullptr : b + o[i]; };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11), at(12)};
}

std::vector<float> init_random(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(layout.total()));
  const auto specs = models::canonical_tensors(layout.config());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& p = layout.params()[i];
    models::random_init(specs[i], seed, i, 0, p.numel, w.data() + p.offset);
  }
  return w;
}

std::vector<float> init_from_model(const ParamLayout& layout, const models::Model& m) {
  if (!(m.config == layout.config())) fail("train", "init model ", m.source_path, " has a different config");
  std::vector<float> w(static_cast<size_t>(layout.total()));
  for (const auto& p : layout.params()) {
    const models::Tensor& t = m.tensor(p.name);
    if (t.shape != p.shape)
      fail("train", "init model ", m.source_path, ": tensor ", p.name, " has shape ", t.shape_str(), ", expected ",
           models::shape_string(p.shape));
    t.to_f32(0, p.numel, w.data() + p.offset);
  }
  return w;
}

models::Model to_model(const ParamLayout& layout, const std::vector<float>& w) {
  models::Model m;
  m.config = layout.config();
  m.source_format = "anelab";
  for (const auto& p : layout.params()) {
    std::vector<uint8_t> bytes(static_cast<size_t>(p.numel) * 4);
    std::memcpy(bytes.data(), w.data() + p.offset, bytes.size());
    m.add_owned(p.name, models::DType::kF32, p.shape, std::move(bytes));
  }
  return m;
}

}  // namespace anelab::train
