#include "framework/core/model_desc.h"

#include "framework/core/error.h"

namespace anelab::models {

const char* step_kind_name(StepKind k) {
  switch (k) {
    case StepKind::kAttention:
      return "attention";
    case StepKind::kFfn:
      return "ffn";
    case StepKind::kLinearAttention:
      return "linear attention";
  }
  return "?";
}

std::vector<StepNorm> step_norms(const Step& s, int64_t dim) {
  std::vector<StepNorm> out;
  auto add = [&](const std::optional<NormDesc>& n, int64_t width) {
    if (n) out.push_back({&*n, width});
  };
  add(s.pre_norm, dim);
  add(s.post_norm, dim);
  switch (s.kind) {
    case StepKind::kAttention:
      add(s.attn.q_norm, s.attn.head_dim);
      add(s.attn.k_norm, s.attn.head_dim);
      break;
    case StepKind::kFfn:
      break;
    case StepKind::kLinearAttention:
      out.push_back({&s.deltanet.norm, s.deltanet.v_dim});
      break;
  }
  return out;
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
// Appends a named weight ("" = absent) with its shape.
struct SpecList {
  std::vector<TensorSpec> v;
  void add(const std::string& name, std::vector<int64_t> shape) {
    if (!name.empty()) v.push_back({name, std::move(shape)});
  }
  void norm(const std::optional<NormDesc>& n, int64_t width) {
    if (!n) return;
    add(n->weight, {width});
    add(n->bias, {width});
  }
  void attention(const AttnDesc& a, int64_t dim) {
    const int64_t q = a.n_heads * a.head_dim, kv = a.n_kv_heads * a.head_dim;
    add(a.wq, {a.output_gate ? 2 * q : q, dim});
    add(a.wk, {kv, dim});
    add(a.wv, {kv, dim});
    add(a.wo, {dim, q});
    add(a.bq, {q});
    add(a.bk, {kv});
    add(a.bv, {kv});
    add(a.bo, {dim});
    norm(a.q_norm, a.head_dim);
    norm(a.k_norm, a.head_dim);
  }
  void deltanet(const DeltaNetDesc& n, int64_t dim) {
    const int64_t vd = n.n_v_heads * n.v_dim;
    add(n.w_qkv, {n.conv_dim(), dim});
    add(n.w_z, {vd, dim});
    add(n.w_b, {n.n_v_heads, dim});
    add(n.w_a, {n.n_v_heads, dim});
    add(n.conv, {n.conv_dim(), n.conv_kernel});
    add(n.a_log, {n.n_v_heads});
    add(n.dt_bias, {n.n_v_heads});
    norm(n.norm, n.v_dim);
    add(n.w_out, {dim, vd});
  }
  void ffn(const FfnDesc& f, int64_t dim) {
    add(f.w_in, {f.hidden, dim});
    add(f.b_in, {f.hidden});
    add(f.w_out, {dim, f.hidden});
    add(f.b_out, {dim});
    add(f.w_up, {f.hidden, dim});
  }
};
}  // namespace

std::vector<TensorSpec> desc_weights(const ModelDesc& d) {
  SpecList s;
  s.add(d.embed.tokens, {d.vocab_size, d.dim});
  s.add(d.embed.positions, {d.embed.n_positions, d.dim});
  for (const LayerDesc& layer : d.layers)
    for (const Step& st : layer.steps) {
      s.norm(st.pre_norm, d.dim);
      switch (st.kind) {
        case StepKind::kAttention:
          s.attention(st.attn, d.dim);
          break;
        case StepKind::kLinearAttention:
          s.deltanet(st.deltanet, d.dim);
          break;
        case StepKind::kFfn:
          s.ffn(st.ffn, d.dim);
          break;
      }
      s.norm(st.post_norm, d.dim);
    }
  s.norm(d.head.norm, d.dim);
  if (!d.head.tied) s.add(d.head.weight, {d.vocab_size, d.dim});
  return std::move(s.v);
}

void unsupported(const char* component, const char* executor, int64_t layer, StepKind step, const std::string& what) {
  fail(component, "layer ", layer, " ", step_kind_name(step), ": ", what, " is not supported by ", executor);
}

}  // namespace anelab::models
