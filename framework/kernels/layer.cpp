// The transformer layer as MIL (see layer.h). Ops are emitted in a fixed statement order (never inside
// one call's argument list), so the printed program is the same with every compiler.
#include "framework/kernels/layer.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "framework/core/error.h"

namespace anelab::kern {

std::vector<float> mat_values(const quant::Mat& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  if (quant::is_quantized(m.type)) {  // the MIL kernels take fp16/fp32 weights: dequantized here
    ANELAB_CHECK(quant::takes(quant::block_type(m.type), quant::kExecMilFp16), "kernels", quant::wtype_name(m.type),
                 " weights: the MIL kernels do not take this type (quant/types.h)");
    for (int64_t r = 0; r < m.rows; ++r) m.row_values(r, out.data() + r * m.cols);
  } else if (m.type == quant::WType::kF16) {
    half_to_float(m.f16(), out.data(), out.size());
  } else if (!out.empty()) {
    std::memcpy(out.data(), m.f32(), out.size() * sizeof(float));
  }
  return out;
}

const quant::Mat& LayerWeights::matrix(const std::string& n) const {
  if (n == "wq") return wq;
  if (n == "wk") return wk;
  if (n == "wv") return wv;
  if (n == "wo") return wo;
  if (n == "w1") return w1;
  if (n == "w2") return w2;
  if (n == "w3") return w3;
  fail("kernels", "unknown layer matrix '", n, "' (known: wq wk wv wo w1 w2 w3)");
}

const quant::Palette* LayerWeights::palette(const std::string& name) const {
  const auto it = palettes.find(name);
  return it == palettes.end() ? nullptr : it->second.get();
}

std::span<const float> LayerWeights::norm(const std::string& name) const {
  if (name.empty()) return {};
  for (const auto& [n, v] : norms)
    if (n == name) return v;
  return {};
}

void LayerWeights::set_norm(const std::string& name, std::span<const float> v) {
  for (auto& [n, w] : norms)
    if (n == name) {
      w = v;
      return;
    }
  norms.emplace_back(name, v);
}

LayerSteps check_layer(const models::LayerDesc& ld, int64_t layer, const char* component, const char* executor) {
  const auto& steps = ld.steps;
  const models::StepKind order[2] = {models::StepKind::kAttention, models::StepKind::kFfn};
  for (size_t i = 0; i < steps.size(); ++i) {
    const models::Step& s = steps[i];
    auto refuse = [&](const std::string& what) { models::unsupported(component, executor, layer, s.kind, what); };
    if (i >= 2 || s.kind != order[i]) refuse(cat("step ", i, " of the layer (the kernel is attention then ffn)"));
    if (!s.pre_norm) refuse("a step without a pre-norm");
    if (s.post_norm && !s.post_norm->bias.empty()) refuse("a post-norm with a bias");
    if (s.residual_scale != 1.0f) refuse(cat("residual scale ", s.residual_scale));
    if (s.kind == models::StepKind::kLinearAttention)
      refuse("a Gated DeltaNet mixer in the transformer layer kernel (the prefill's is kern::build_deltanet)");
    if (s.kind == models::StepKind::kAttention) {
      if (s.attn.rope.dims < 0 || s.attn.rope.dims > s.attn.head_dim || s.attn.rope.dims % 2)
        refuse(cat("RoPE on ", s.attn.rope.dims, " of ", s.attn.head_dim, " dims"));
      if (s.attn.score_softcap > 0.0f) refuse(cat("score soft-capping (cap ", s.attn.score_softcap, ")"));
      for (const auto& n : {s.attn.q_norm, s.attn.k_norm})
        if (n && n->kind != NormType::kRms) refuse("a q/k norm other than RMSNorm");
    }
  }
  ANELAB_CHECK(steps.size() == 2, component, "layer ", layer, ": ", steps.size(), " steps are not supported by ",
               executor, " (attention then ffn)");
  return {steps[0], steps[1]};
}

namespace {

// The tap `name` of a block: `make` emits it when asked (merges of heads happen only for taps wanted).
using TapFn = std::function<Value()>;
Taps pick(const char* block, const std::vector<std::pair<std::string, TapFn>>& known,
          const std::vector<std::string>& want) {
  Taps out;
  for (const std::string& w : want) {
    const TapFn* f = nullptr;
    std::string names;
    for (const auto& [n, fn] : known) {
      if (n == w) f = &fn;
      names += (names.empty() ? "" : " ") + n;
    }
    ANELAB_CHECK(f != nullptr, "kernels", block, ": unknown tap '", w, "' (known: ", names, ")");
    out.emplace_back(w, (*f)());
  }
  return out;
}

// The norm `which` of x (its kind and eps from n), its weights fetched before x (the order every generator has used).
Value norm(FunctionBuilder& b, const models::NormDesc& n, LayerSource& p, const std::string& which,
           const std::function<Value()>& x) {
  Value g = p.norm_weight(which, n);
  std::optional<Value> beta = n.kind == NormType::kLayer ? p.norm_bias(which, n) : std::nullopt;
  Value xv = x();
  switch (n.kind) {
    case NormType::kRms:
      return rms_norm(b, xv, g, n.eps);
    case NormType::kLayer:
      return layer_norm(b, xv, g, beta, n.eps);
  }
  fail("kernels", "norm '", which, "': unknown norm kind ", static_cast<int>(n.kind));
}

// The norm `which` of each head of x [1, heads*HD, 1, S]: the heads as the batch [heads, HD, 1, S], normed over HD.
Value head_norm(FunctionBuilder& b, const models::NormDesc& n, LayerSource& p, const std::string& which, const Value& x,
                int64_t heads, int64_t head_dim) {
  Value y = norm(b, n, p, which, [&] { return b.reshape(x, {heads, head_dim, 1, x.dim(3)}); });
  return b.reshape(y, {1, heads * head_dim, 1, x.dim(3)});
}

struct Attention {
  // q / k the projections [1, QD|KVD, 1, S]; qh / kh after RoPE: heads [1, H, S, HD]; v the projection [1, KVD, 1, S]
  Value xn, q, k, v, qh, kh, attn, o;
};

// The scores' scale: the description's, or 1 / sqrt(HD) computed in double when it leaves it 0 (training's shape).
double score_scale(const models::AttnDesc& d) {
  return d.score_scale > 0.0f ? d.score_scale : 1.0 / std::sqrt(static_cast<double>(d.head_dim));
}

// The RoPE of the tables (LayerSource::rope_table), or none.
std::optional<RopeStyle> rope_style(const models::RopeDesc& r) {
  if (r.style == RopeStyle::kNone) return std::nullopt;
  return r.style;
}

// RoPE on the first `dims` of each head of h [1, H, S, HD] (all of them when dims is 0 or HD; tables [1, 1, S, dims]),
// the rest passed through (HF's partial_rotary_factor).
Value partial_rope(FunctionBuilder& b, const Value& h, const Value& cs, const Value& sn, RopeStyle style,
                   int64_t dims) {
  const int64_t HD = h.dim(3);
  if (dims == 0 || dims == HD) return rope(b, h, cs, sn, style);
  Value rot = b.slice_by_size(h, {0, 0, 0, 0}, {h.dim(0), h.dim(1), h.dim(2), dims});
  Value pass = b.slice_by_size(h, {0, 0, 0, dims}, {h.dim(0), h.dim(1), h.dim(2), HD - dims});
  Value r = rope(b, rot, cs, sn, style);
  return b.concat({r, pass}, 3);
}

Attention attention(FunctionBuilder& b, const models::Step& s, LayerSource& p, const std::function<Value()>& x) {
  const models::AttnDesc& d = s.attn;
  const int64_t n_rep = d.n_heads / d.n_kv_heads;
  Attention a;
  a.xn = norm(b, *s.pre_norm, p, "attn_norm", x);
  Value q = p.project("wq", a.xn);
  std::optional<Value> gate;
  if (d.output_gate) {  // wq's rows per head [q | gate]: the heads as the batch [H, 2 HD, 1, S], each half sliced
    const int64_t S = q.dim(3);
    Value qg = b.reshape(q, {d.n_heads, 2 * d.head_dim, 1, S});
    Value qs = b.slice_by_size(qg, {0, 0, 0, 0}, {d.n_heads, d.head_dim, 1, S});
    Value gs = b.slice_by_size(qg, {0, d.head_dim, 0, 0}, {d.n_heads, d.head_dim, 1, S});
    q = b.reshape(qs, {1, d.n_heads * d.head_dim, 1, S});
    gate = b.reshape(gs, {1, d.n_heads * d.head_dim, 1, S});
  }
  a.q = q;
  Value k = a.k = p.project("wk", a.xn);
  if (d.q_norm) q = head_norm(b, *d.q_norm, p, "q_norm", q, d.n_heads, d.head_dim);
  if (d.k_norm) k = head_norm(b, *d.k_norm, p, "k_norm", k, d.n_kv_heads, d.head_dim);
  a.qh = split_heads(b, q, d.n_heads);
  a.kh = split_heads(b, k, d.n_kv_heads);
  a.v = p.project("wv", a.xn);
  Value vh = split_heads(b, a.v, d.n_kv_heads);
  if (const std::optional<RopeStyle> style = rope_style(d.rope)) {
    Value sn = p.rope_table("sin");
    Value cs = p.rope_table("cos");
    a.qh = partial_rope(b, a.qh, cs, sn, *style, d.rope.dims);
    a.kh = partial_rope(b, a.kh, cs, sn, *style, d.rope.dims);
  }
  Value mask = p.mask(d.window);
  Value ve = gqa_expand(b, vh, n_rep);
  Value ke = gqa_expand(b, a.kh, n_rep);
  a.attn = merge_heads(b, causal_attention(b, a.qh, ke, ve, mask, score_scale(d)));
  if (gate) {  // the output gate: attn * sigmoid(gate) before wo
    Value sg = b.sigmoid(*gate);
    a.attn = b.mul(a.attn, sg);
  }
  a.o = p.project("wo", a.attn);
  if (s.post_norm) a.o = norm(b, *s.post_norm, p, "attn_post_norm", [&] { return a.o; });
  return a;
}

Taps attention_taps(FunctionBuilder& b, const Attention& a, const std::vector<std::string>& want) {
  return pick("build_attention",
              {{"o", [&] { return a.o; }},
               {"attn", [&] { return a.attn; }},
               {"q_rope", [&] { return merge_heads(b, a.qh); }},
               {"k_rope", [&] { return merge_heads(b, a.kh); }},
               {"q", [&] { return a.q; }},
               {"k", [&] { return a.k; }},
               {"v", [&] { return a.v; }},
               {"xnorm", [&] { return a.xn; }}},
              want);
}

struct Ffn {
  Value xn, h1, h3, gate, y;
};

Ffn ffn(FunctionBuilder& b, const models::Step& s, LayerSource& p, const std::function<Value()>& x) {
  const models::FfnDesc& d = s.ffn;
  Ffn f;
  f.xn = norm(b, *s.pre_norm, p, "ffn_norm", x);
  f.h1 = p.project("w1", f.xn);
  switch (d.activation) {
    case Activation::kGeluTanh:
      f.gate = gelu_tanh(b, f.h1);
      break;
    case Activation::kGeluTanhGated:
      f.h3 = p.project("w3", f.xn);
      f.gate = b.mul(gelu_tanh(b, f.h1), f.h3);
      break;
    case Activation::kSilu:
      f.h3 = p.project("w3", f.xn);
      f.gate = b.mul(silu(b, f.h1), f.h3);
      break;
  }
  f.y = p.project("w2", f.gate);
  if (s.post_norm) f.y = norm(b, *s.post_norm, p, "ffn_post_norm", [&] { return f.y; });
  return f;
}

}  // namespace

Taps build_attention(FunctionBuilder& b, const models::Step& s, LayerSource& p, const std::vector<std::string>& taps) {
  const Attention a = attention(b, s, p, [&] { return p.input("x"); });
  return attention_taps(b, a, taps);
}

Taps build_ffn(FunctionBuilder& b, const models::Step& s, LayerSource& p, const std::vector<std::string>& taps) {
  const Ffn f = ffn(b, s, p, [&] { return p.input("x"); });
  std::vector<std::pair<std::string, TapFn>> known = {{"y", [&] { return f.y; }},
                                                      {"h1", [&] { return f.h1; }},
                                                      {"gate", [&] { return f.gate; }},
                                                      {"xnorm", [&] { return f.xn; }}};
  if (gated_mlp(s.ffn.activation)) known.insert(known.begin() + 2, {"h3", [&] { return f.h3; }});
  return pick("build_ffn", known, taps);
}

Taps build_layer(FunctionBuilder& b, const LayerSteps& l, LayerSource& p, const std::vector<std::string>& attn_taps) {
  Value x;
  const Attention a = attention(b, l.attn, p, [&] { return x = p.input("x"); });
  Taps out = attention_taps(b, a, attn_taps);
  Value x2 = b.add(x, a.o);
  const Ffn f = ffn(b, l.ffn, p, [&] { return x2; });
  out.insert(out.begin(), {"out", b.add(x2, f.y)});
  return out;
}

}  // namespace anelab::kern
