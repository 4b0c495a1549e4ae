#include "train/params.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "framework/core/error.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/presets.h"

namespace anelab::train {
namespace {
constexpr int kLayerFields = 11;  // LayerPtrs' fields
}  // namespace

void check_trainable(const models::ModelConfig& c) {
  models::validate_config(c, "train");
  // Every part of the description that no training executor implements, once each, in the order met.
  const models::ModelDesc d = models::describe_model(c);
  std::vector<std::string> lacks;
  auto lack = [&](bool set, const char* what) {
    if (set && std::find(lacks.begin(), lacks.end(), what) == lacks.end()) lacks.emplace_back(what);
  };
  lack(!d.embed.positions.empty(), "learned positions");
  for (const models::LayerDesc& layer : d.layers)
    for (const models::Step& s : layer.steps) {
      for (const models::StepNorm& n : models::step_norms(s, d.dim))
        lack(n.norm->kind != models::NormType::kRms, "LayerNorm");
      switch (s.kind) {
        case models::StepKind::kAttention: {
          const models::AttnDesc& a = s.attn;
          lack(a.rope.style == models::RopeStyle::kNone && d.embed.positions.empty(), "attention without positions");
          lack(!a.bq.empty() || !a.bk.empty() || !a.bv.empty() || !a.bo.empty(), "bias tensors");
          lack(a.head_dim % 2 != 0, "an odd head_dim (RoPE rotates pairs)");
          break;
        }
        case models::StepKind::kFfn:
          lack(s.ffn.activation == models::Activation::kGeluTanh, "a GELU MLP");
          lack(!s.ffn.b_in.empty() || !s.ffn.b_out.empty(), "bias tensors");
          break;
        case models::StepKind::kLinearAttention:  // the CPU executor has it (train/cpu_deltanet_grad.h)
          break;
      }
    }
  if (lacks.empty()) return;
  std::string list;
  for (const std::string& w : lacks) list += (list.empty() ? "" : ", ") + w;
  fail("train", "model '", c.arch, "': ", list,
       " not supported for training (trainable: Llama 2/3.x, Qwen2/2.5, Qwen3, Qwen3.5, Gemma 3; this model is "
       "inference-only, "
       "docs/training.md)");
}

void check_kernel_steps(const models::ModelDesc& d, const std::string& strategy) {
  const std::string executor = "the MIL training kernels (--strategy " + strategy + "; --strategy cpu has it)";
  const char* ex = executor.c_str();
  // The kernels normalise a step's input and an attention's q and k (RMSNorm, weight w, no offset): any other norm
  // of a step (step_norms) is refused naming its weight.
  auto norms = [&](int64_t l, const models::Step& s) {
    for (const models::StepNorm& n : models::step_norms(s, d.dim)) {
      auto is = [&](const std::optional<models::NormDesc>& o) { return o && n.norm == &*o; };
      const bool qk = s.kind == models::StepKind::kAttention && (is(s.attn.q_norm) || is(s.attn.k_norm));
      if (!is(s.pre_norm) && !qk)
        models::unsupported("train", ex, l, s.kind, "the norm " + n.norm->weight + " (only input and q/k norms)");
      if (n.norm->offset != 0.0f)
        models::unsupported("train", ex, l, s.kind, "a (1+w) RMSNorm (" + n.norm->weight + ")");
    }
  };
  std::optional<float> rope_theta;  // the first attention step's: the kernels take one RoPE base
  for (size_t li = 0; li < d.layers.size(); ++li) {
    const auto l = static_cast<int64_t>(li);
    for (const models::Step& s : d.layers[li].steps) {
      switch (s.kind) {
        case models::StepKind::kAttention: {
          norms(l, s);
          const models::AttnDesc& a = s.attn;
          if (a.window > 0)
            models::unsupported("train", ex, l, s.kind, "a sliding window (" + std::to_string(a.window) + " keys)");
          if (a.score_scale != 1.0f / std::sqrt(static_cast<float>(a.head_dim)))
            models::unsupported("train", ex, l, s.kind, "a score scale other than 1/sqrt(head_dim)");
          if (a.score_softcap > 0.0f) models::unsupported("train", ex, l, s.kind, "score soft-capping");
          if (a.output_gate) models::unsupported("train", ex, l, s.kind, "an output gate");
          if (a.rope.dims != 0 && a.rope.dims != a.head_dim)
            models::unsupported("train", ex, l, s.kind, "partial RoPE");
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
  static const char* kFields[kLayerFields] = {"attn_norm", "wq",       "wk", "wv", "wo", "q_norm",
                                              "k_norm",    "ffn_norm", "w1", "w2", "w3"};
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (const char* f : kFields) {  // a tensor the architecture does not have: -1
      const ParamInfo* p = lookup("layers." + std::to_string(l) + "." + f);
      layer_offsets_.push_back(p ? p->offset : -1);
    }
  emb_ = find("tok_embeddings").offset;
  norm_ = find("norm").offset;
  out_ = c.tied_embeddings ? emb_ : find("output").offset;
}

const ParamInfo* ParamLayout::lookup(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  if (const ParamInfo* p = lookup(name)) return *p;
  fail("train", "no parameter '", name, "' in the ", config_.arch, " layout (", params_.size(), " tensors)");
}

LayerPtrs ParamLayout::layer(float* b, int64_t l) const {
  const int64_t* o = &layer_offsets_.at(static_cast<size_t>(l * kLayerFields));
  auto at = [&](int i) { return o[i] < 0 ? nullptr : b + o[i]; };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10)};
}

std::vector<float> init_random(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(layout.total()));
  const auto specs = models::canonical_tensors(layout.config());
  const std::vector<float> off = models::norm_offsets(layout.config());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& p = layout.params()[i];
    models::random_init(specs[i], off[i], seed, i, 0, p.numel, w.data() + p.offset);
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
