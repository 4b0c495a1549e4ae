// The transformer layer as MIL (see layer.h). Ops are emitted in a fixed statement order (never inside
// one call's argument list), so the printed program is the same with every compiler.
#include "framework/kernels/layer.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "framework/core/error.h"
#include "framework/quant/qdot.h"

namespace anelab::kern {

Mat Mat::f32(std::span<const float> v, int64_t rows, int64_t cols) {
  ANELAB_CHECK(static_cast<int64_t>(v.size()) == rows * cols, "kernels", "matrix of ", v.size(), " values is not [",
               rows, ", ", cols, "]");
  Mat m;
  m.type = WType::kF32;
  m.rows = rows, m.cols = cols, m.data = v.data();
  return m;
}

std::optional<quant::BlockType> block_type_of(WType t) {
  switch (t) {
    case WType::kF32:
    case WType::kF16:
      return std::nullopt;
    case WType::kQ8_0:
      return quant::BlockType::kQ8_0;
    case WType::kQ4_0:
      return quant::BlockType::kQ4_0;
    case WType::kQ5_0:
      return quant::BlockType::kQ5_0;
    case WType::kQ5_1:
      return quant::BlockType::kQ5_1;
    case WType::kQ4_K:
      return quant::BlockType::kQ4_K;
    case WType::kQ5_K:
      return quant::BlockType::kQ5_K;
    case WType::kQ6_K:
      return quant::BlockType::kQ6_K;
  }
  fail("kernels", "weight type ", int(t), " is not a WType");
}

WType wtype_of(quant::BlockType t) {
  switch (t) {
    case quant::BlockType::kQ8_0:
      return WType::kQ8_0;
    case quant::BlockType::kQ4_0:
      return WType::kQ4_0;
    case quant::BlockType::kQ5_0:
      return WType::kQ5_0;
    case quant::BlockType::kQ5_1:
      return WType::kQ5_1;
    case quant::BlockType::kQ4_K:
      return WType::kQ4_K;
    case quant::BlockType::kQ5_K:
      return WType::kQ5_K;
    case quant::BlockType::kQ6_K:
      return WType::kQ6_K;
  }
  fail("kernels", "block type ", int(t), " is not a quant::BlockType");
}

bool is_quantized(WType t) { return block_type_of(t).has_value(); }

quant::BlockType block_type(WType t) {
  const std::optional<quant::BlockType> b = block_type_of(t);
  ANELAB_CHECK(b.has_value(), "kernels", "weight type ", wtype_name(t), " is not a block type");
  return *b;
}

const char* wtype_name(WType t) {
  if (t == WType::kF32) return "fp32";
  if (t == WType::kF16) return "fp16";
  return quant::traits(block_type(t)).name;
}

const uint8_t* Mat::row_blocks(int64_t r) const {
  ANELAB_CHECK(r >= tiled_rows, "kernels", "row ", r, " of a matrix is inside its row tiles (rows < ", tiled_rows,
               "): read it with row_values or tile()");
  const quant::BlockInfo b = quant::block_info(block_type(type));
  return static_cast<const uint8_t*>(data) + r * (cols / b.values * b.bytes);
}

const uint8_t* Mat::tile(int64_t t) const {
  ANELAB_CHECK(t >= 0 && quant::kTileRows * (t + 1) <= tiled_rows, "kernels", "tile ", t, " past the ", tiled_rows,
               " tiled rows");
  const quant::BlockInfo b = quant::block_info(block_type(type));
  return static_cast<const uint8_t*>(data) + t * quant::kTileRows * (cols / b.values * b.bytes);
}

void Mat::row_values(int64_t r, float* out) const {
  if (r < tiled_rows) {
    const quant::BlockType bt = block_type(type);
    thread_local std::vector<uint8_t> blocks;
    blocks.resize(static_cast<size_t>(cols / quant::block_info(bt).values * quant::block_info(bt).bytes));
    quant::tile_row(bt, tile(r / quant::kTileRows), cols, static_cast<int>(r % quant::kTileRows), blocks.data());
    quant::dequantize(bt, blocks.data(), out, cols);
  } else if (is_quantized(type)) {
    quant::dequantize(block_type(type), row_blocks(r), out, cols);
  } else if (type == WType::kF16) {
    half_to_float(f16() + r * cols, out, static_cast<size_t>(cols));
  } else {
    std::memcpy(out, f32() + r * cols, static_cast<size_t>(cols) * sizeof(float));
  }
}

int64_t Mat::nbytes() const {
  if (!is_quantized(type)) return rows * cols * (type == WType::kF16 ? 2 : 4);
  const quant::BlockInfo b = quant::block_info(block_type(type));
  return rows * (cols / b.values * b.bytes);
}

std::vector<float> mat_values(const Mat& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  if (is_quantized(m.type)) {  // the MIL kernels take fp16/fp32 weights: dequantized here
    ANELAB_CHECK(quant::takes(block_type(m.type), quant::kExecMilFp16), "kernels", wtype_name(m.type),
                 " weights: the MIL kernels do not take this type (quant/types.h)");
    for (int64_t r = 0; r < m.rows; ++r) m.row_values(r, out.data() + r * m.cols);
  } else if (m.type == WType::kF16) {
    half_to_float(m.f16(), out.data(), out.size());
  } else if (!out.empty()) {
    std::memcpy(out.data(), m.f32(), out.size() * sizeof(float));
  }
  return out;
}

const Mat& LayerWeights::matrix(const std::string& n) const {
  if (n == "wq") return wq;
  if (n == "wk") return wk;
  if (n == "wv") return wv;
  if (n == "wo") return wo;
  if (n == "w1") return w1;
  if (n == "w2") return w2;
  if (n == "w3") return w3;
  fail("kernels", "unknown layer matrix '", n, "' (known: wq wk wv wo w1 w2 w3)");
}

double LayerDesc::attn_scale() const {
  return score_scale > 0.0 ? score_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
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

// norm(x) with the norm's weights fetched before x (the order every generator has used).
Value norm(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::string& which,
           const std::function<Value()>& x) {
  Value g = p.norm_weight(which);
  std::optional<Value> beta = d.layer_norm ? p.norm_bias(which) : std::nullopt;
  Value xv = x();
  return d.layer_norm ? layer_norm(b, xv, g, beta, d.norm_eps) : rms_norm(b, xv, g, d.norm_eps);
}

// RMSNorm of each head of x [1, heads*HD, 1, S]: the heads as the batch [heads, HD, 1, S], normed over HD.
Value head_norm(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::string& which, const Value& x,
                int64_t heads) {
  Value g = p.norm_weight(which);
  Value xh = b.reshape(x, {heads, d.head_dim, 1, x.dim(3)});
  return b.reshape(rms_norm(b, xh, g, d.norm_eps), {1, heads * d.head_dim, 1, x.dim(3)});
}

struct Attention {
  // q / k the projections [1, QD|KVD, 1, S]; qh / kh after RoPE: heads [1, H, S, HD]; v the projection [1, KVD, 1, S]
  Value xn, q, k, v, qh, kh, attn, o;
};

Attention attention(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::function<Value()>& x) {
  Attention a;
  a.xn = norm(b, d, p, "attn_norm", x);
  Value q = a.q = p.project("wq", a.xn);
  Value k = a.k = p.project("wk", a.xn);
  if (d.qk_norm) {
    q = head_norm(b, d, p, "q_norm", q, d.n_heads);
    k = head_norm(b, d, p, "k_norm", k, d.n_kv_heads);
  }
  a.qh = split_heads(b, q, d.n_heads);
  a.kh = split_heads(b, k, d.n_kv_heads);
  a.v = p.project("wv", a.xn);
  Value vh = split_heads(b, a.v, d.n_kv_heads);
  if (d.rope) {
    Value sn = p.rope_table("sin");
    Value cs = p.rope_table("cos");
    a.qh = rope(b, a.qh, cs, sn, *d.rope);
    a.kh = rope(b, a.kh, cs, sn, *d.rope);
  }
  Value mask = p.mask();
  Value ve = gqa_expand(b, vh, d.n_rep());
  Value ke = gqa_expand(b, a.kh, d.n_rep());
  a.attn = merge_heads(b, causal_attention(b, a.qh, ke, ve, mask, d.attn_scale()));
  a.o = p.project("wo", a.attn);
  if (d.post_norms) a.o = norm(b, d, p, "attn_post_norm", [&] { return a.o; });
  return a;
}

Taps attention_taps(FunctionBuilder& b, const Attention& a, const std::vector<std::string>& want) {
  return pick("attention_block",
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

Ffn ffn(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::function<Value()>& x) {
  Ffn f;
  f.xn = norm(b, d, p, "ffn_norm", x);
  f.h1 = p.project("w1", f.xn);
  if (d.gelu) {
    f.gate = gelu_tanh(b, f.h1);
  } else if (d.geglu) {
    f.h3 = p.project("w3", f.xn);
    f.gate = b.mul(gelu_tanh(b, f.h1), f.h3);
  } else {
    f.h3 = p.project("w3", f.xn);
    f.gate = b.mul(silu(b, f.h1), f.h3);
  }
  f.y = p.project("w2", f.gate);
  if (d.post_norms) f.y = norm(b, d, p, "ffn_post_norm", [&] { return f.y; });
  return f;
}

}  // namespace

Taps attention_block(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::vector<std::string>& taps) {
  const Attention a = attention(b, d, p, [&] { return p.input("x"); });
  return attention_taps(b, a, taps);
}

Taps ffn_block(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::vector<std::string>& taps) {
  const Ffn f = ffn(b, d, p, [&] { return p.input("x"); });
  std::vector<std::pair<std::string, TapFn>> known = {{"y", [&] { return f.y; }},
                                                      {"h1", [&] { return f.h1; }},
                                                      {"gate", [&] { return f.gate; }},
                                                      {"xnorm", [&] { return f.xn; }}};
  if (!d.gelu) known.insert(known.begin() + 2, {"h3", [&] { return f.h3; }});
  return pick("ffn_block", known, taps);
}

Taps layer_block(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::vector<std::string>& attn_taps) {
  Value x;
  const Attention a = attention(b, d, p, [&] { return x = p.input("x"); });
  Taps out = attention_taps(b, a, attn_taps);
  Value x2 = b.add(x, a.o);
  const Ffn f = ffn(b, d, p, [&] { return x2; });
  out.insert(out.begin(), {"out", b.add(x2, f.y)});
  return out;
}

}  // namespace anelab::kern
