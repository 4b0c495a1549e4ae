// Training kernel generators (see train.h for the kernel table and the two weight strategies).
#include "framework/kernels/train.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "framework/core/error.h"

namespace anelab::kern {

using mil::DType;
using mil::IOLayout;

// ---- shapes -------------------------------------------------------------------------------------

double TrainShape::attn_scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

void TrainShape::validate() const {
  ANELAB_CHECK(dim > 0 && hidden > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && seq > 0, "kernels",
               "train shape ", str(), ": every size must be positive");
  ANELAB_CHECK(n_heads % n_kv_heads == 0, "kernels", "train shape ", str(), ": n_heads ", n_heads,
               " is not a multiple of n_kv_heads ", n_kv_heads);
  ANELAB_CHECK(head_dim % 2 == 0, "kernels", "train shape ", str(), ": head_dim ", head_dim, " must be even for RoPE");
  ANELAB_CHECK(q_norm.has_value() == k_norm.has_value(), "kernels", "train shape ", str(),
               ": a q norm without a k norm or back (the kernels take both or neither)");
  for (const auto& n : {q_norm, k_norm})
    ANELAB_CHECK(!n || n->kind == NormType::kRms, "kernels", "train shape ", str(),
                 ": a q/k norm other than RMSNorm (the backward kernels are RMSNorm's)");
  ANELAB_CHECK(lora_dropout >= 0 && lora_dropout < 1, "kernels", "train shape ", str(), ": lora_dropout ", lora_dropout,
               " is not in [0, 1)");
  ANELAB_CHECK(seq >= 32, "kernels", "train shape ", str(), ": seq ", seq,
               " < 32 (fp16 I/O needs S >= 32, digest §4.3); pad the sequence");
  const int64_t m = rt::dense_width_multiple(mil::DType::kFp16);
  ANELAB_CHECK(seq % m == 0, "kernels", "train shape ", str(), ": seq ", seq, " is not a multiple of ", m,
               " (the ANE starts I/O rows every ", m * 2, " bytes: the row-stride rule of the device profiles); use ",
               (seq + m - 1) / m * m);
  // sdpa_bwd1 returns dv, probs and dp in one output [1, KVD + 2*heads*S, 1, S]: its channels must fit one dimension.
  const int64_t channels = kv_dim() + 2 * n_heads * seq, cap = rt::max_dim_all_profiles();
  ANELAB_CHECK(channels <= cap, "kernels", "train shape ", str(), ": sdpa_bwd1's output has ", channels,
               " channels (kv_dim + 2 x heads x seq), over the ANE's largest dimension ", cap,
               "; use a sequence length of at most ", (cap - kv_dim()) / (2 * n_heads) / m * m);
}

std::string TrainShape::str() const {
  std::ostringstream o;
  o << "D=" << dim << " H=" << hidden << " heads=" << n_heads << "/" << n_kv_heads << " hd=" << head_dim
    << " S=" << seq;
  if (q_norm || k_norm) o << " q/k norms";
  if (lora_rank > 0) {
    o << " lora r=" << lora_rank << " (";
    for (size_t i = 0; i < lora_targets.size(); ++i) o << (i ? "," : "") << lora_targets[i];
    o << ")";
    if (lora_dropout > 0) o << " dropout " << lora_dropout;
  }
  return o.str();
}

bool TrainShape::lora_on(const std::string& weight) const {
  return lora_rank > 0 && std::find(lora_targets.begin(), lora_targets.end(), weight) != lora_targets.end();
}

const char* strategy_name(Strategy s) { return s == Strategy::kStatic ? "static" : "dynamic"; }

const char* kernel_name(KernelKind k) {
  switch (k) {
    case KernelKind::kAttnFwd:
      return "attn_fwd";
    case KernelKind::kFfnFwd:
      return "ffn_fwd";
    case KernelKind::kFfnBwd:
      return "ffn_bwd";
    case KernelKind::kWoBwd:
      return "wo_bwd";
    case KernelKind::kSdpaBwd1:
      return "sdpa_bwd1";
    case KernelKind::kSdpaBwd2:
      return "sdpa_bwd2";
    case KernelKind::kQkvBwd:
      return "qkv_bwd";
    case KernelKind::kRmsAttBwd:
      return "rms_att_bwd";
    case KernelKind::kRmsFfnBwd:
      return "rms_ffn_bwd";
  }
  return "?";
}

bool kernel_has_weights(KernelKind k) { return k != KernelKind::kSdpaBwd1 && k != KernelKind::kSdpaBwd2; }

namespace {

// [out, in] of each named weight (vectors: [D, 1]).
std::pair<int64_t, int64_t> weight_dims(const std::string& n, const TrainShape& s) {
  if (n == "wq") return {s.q_dim(), s.dim};
  if (n == "wk" || n == "wv") return {s.kv_dim(), s.dim};
  if (n == "wo") return {s.dim, s.q_dim()};
  if (n == "w1" || n == "w3") return {s.hidden, s.dim};
  if (n == "w2") return {s.dim, s.hidden};
  if (n == "rms_att" || n == "rms_ffn") return {s.dim, 1};
  if (n == "q_norm" || n == "k_norm") return {s.head_dim, 1};
  fail("kernels", "unknown layer weight '", n, "' (known: wq wk wv wo w1 w2 w3 rms_att rms_ffn q_norm k_norm)");
}

}  // namespace

namespace {

// The fp32 values of a training weight by its kernel name (rms_att / rms_ffn are the norm weights).
std::span<const float> train_weight(const LayerWeights& w, const std::string& n) {
  if (n == "rms_att") return w.norm("attn_norm");
  if (n == "rms_ffn") return w.norm("ffn_norm");
  if (n == "q_norm" || n == "k_norm") return w.norm(n);
  const quant::Mat& m = w.matrix(n);
  ANELAB_CHECK(m.type == quant::WType::kF32, "kernels", "layer weight ", n,
               " is fp16; training kernels take fp32 weights");
  return {m.f32(), static_cast<size_t>(m.rows * m.cols)};
}

}  // namespace

models::LayerDesc layer_steps(const TrainShape& s) {
  auto rms = [&](const char* weight) {
    return models::NormDesc{NormType::kRms, static_cast<float>(s.norm_eps), 0.0f, weight, ""};
  };
  models::LayerDesc l;
  models::Step& at = l.steps.emplace_back();
  at.kind = models::StepKind::kAttention;
  at.pre_norm = rms("attn_norm");
  models::AttnDesc& a = at.attn;
  a.n_heads = s.n_heads, a.n_kv_heads = s.n_kv_heads, a.head_dim = s.head_dim;
  a.q_norm = s.q_norm, a.k_norm = s.k_norm;
  if (a.q_norm) a.q_norm->weight = "q_norm";
  if (a.k_norm) a.k_norm->weight = "k_norm";
  a.rope.style = s.rope;
  models::Step& ff = l.steps.emplace_back();
  ff.kind = models::StepKind::kFfn;
  ff.pre_norm = rms("ffn_norm");
  ff.ffn.hidden = s.hidden;
  ff.ffn.activation = Activation::kSilu;
  return l;
}

LayerWeights train_weights(const TrainShape& s, std::span<const float> wq, std::span<const float> wk,
                           std::span<const float> wv, std::span<const float> wo, std::span<const float> w1,
                           std::span<const float> w3, std::span<const float> w2, std::span<const float> rms_att,
                           std::span<const float> rms_ffn, std::span<const float> q_norm,
                           std::span<const float> k_norm) {
  LayerWeights w;
  using quant::Mat;
  w.wq = Mat::f32(wq, s.q_dim(), s.dim), w.wk = Mat::f32(wk, s.kv_dim(), s.dim), w.wv = Mat::f32(wv, s.kv_dim(), s.dim);
  w.wo = Mat::f32(wo, s.dim, s.q_dim());
  w.w1 = Mat::f32(w1, s.hidden, s.dim), w.w3 = Mat::f32(w3, s.hidden, s.dim), w.w2 = Mat::f32(w2, s.dim, s.hidden);
  w.set_norm("attn_norm", rms_att), w.set_norm("ffn_norm", rms_ffn);
  if (!q_norm.empty()) w.set_norm("q_norm", q_norm);
  if (!k_norm.empty()) w.set_norm("k_norm", k_norm);
  return w;
}

void validate_train_weights(const LayerWeights& w, const TrainShape& s) {
  for (const char* n : {"wq", "wk", "wv", "wo", "w1", "w2", "w3", "rms_att", "rms_ffn", "q_norm", "k_norm"}) {
    const bool head_norm = std::string(n) == "q_norm" || std::string(n) == "k_norm";
    if (head_norm && !(n[0] == 'q' ? s.q_norm : s.k_norm)) continue;
    auto [o, i] = weight_dims(n, s);
    if (n[0] == 'w') {
      const quant::Mat& m = w.matrix(n);
      ANELAB_CHECK(m.rows == o && m.cols == i, "kernels", "layer weight ", n, " is [", m.rows, ", ", m.cols,
                   "], shape ", s.str(), " needs [", o, ", ", i, "]");
    }
    const std::span<const float> v = train_weight(w, n);
    ANELAB_CHECK(static_cast<int64_t>(v.size()) == o * i, "kernels", "layer weight ", n, " has ", v.size(),
                 " values, shape ", s.str(), " needs [", o, ", ", i, "] = ", o * i);
  }
}

std::string lora_mask_slot(const std::string& weight) { return weight + ".lora_m"; }

std::string lora_slot_weight(const WeightSlot& ws) {
  for (const char* suffix : {".lora_a", ".lora_bt"}) {
    const std::string sf(suffix);
    if (ws.weight.size() > sf.size() && ws.weight.compare(ws.weight.size() - sf.size(), sf.size(), sf) == 0)
      return ws.weight.substr(0, ws.weight.size() - sf.size());
  }
  return "";
}

bool lora_slot_values(const WeightSlot& ws, std::span<const float> a, std::span<const float> b, const TrainShape& s,
                      std::vector<float>& out) {
  const std::string w = lora_slot_weight(ws);
  if (w.empty()) return false;
  auto [o, i] = weight_dims(w, s);
  const int64_t r = s.lora_rank;
  ANELAB_CHECK(static_cast<int64_t>(a.size()) == r * i && static_cast<int64_t>(b.size()) == o * r, "kernels",
               "adapter of ", w, ": A has ", a.size(), " values, B ", b.size(), "; rank ", r, " needs ", r * i, " and ",
               o * r);
  const bool is_a = ws.weight.back() == 'a';
  const std::span<const float> src = is_a ? a : b;  // A [r, in] or B [out, r]
  if (is_a == ws.transposed) {                      // Aᵀ [in, r] or Bᵀ [r, out]: src transposed
    const int64_t rows = is_a ? r : o, cols = is_a ? i : r;
    out.resize(src.size());
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t c = 0; c < cols; ++c)
        out[static_cast<size_t>(c * rows + row)] = src[static_cast<size_t>(row * cols + c)];
    return true;
  }
  out.assign(src.begin(), src.end());  // A [r, in] or B [out, r] as it is
  return true;
}

void weight_slot_values(const WeightSlot& ws, const LayerWeights& w, const TrainShape& s, std::vector<float>& out) {
  std::span<const float> src = train_weight(w, ws.weight);
  auto [o, i] = weight_dims(ws.weight, s);
  ANELAB_CHECK(static_cast<int64_t>(src.size()) == o * i, "kernels", "weight ", ws.weight, ": ", src.size(),
               " values, need ", o * i);
  out.resize(src.size());
  if (!ws.transposed) {
    std::copy(src.begin(), src.end(), out.begin());
    return;
  }
  constexpr int64_t kTile = 32;  // blocked transpose: both sides stay in cache (restaged after every update)
  for (int64_t r0 = 0; r0 < o; r0 += kTile)
    for (int64_t c0 = 0; c0 < i; c0 += kTile)
      for (int64_t c = c0; c < std::min(i, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(o, r0 + kTile); ++r)
          out[static_cast<size_t>(c * o + r)] = src[static_cast<size_t>(r * i + c)];
}

namespace {

// ---- the generator --------------------------------------------------------------------------------
// Phase 1 declares input activations and weights (act / mat / vec); begin() fixes the input layout and
// creates the input; phase 2 builds the body (in / apply / vec_value / tables); finish() packs outputs.
class KernelGen : public LayerSource {
 public:
  KernelGen(KernelKind kind, const TrainShape& s, Strategy st, const LayerWeights* w)
      : kind_(kind),
        s_(s),
        dyn_(st == Strategy::kDynamic && kernel_has_weights(kind)),
        lora_(kernel_has_weights(kind) && s.lora_rank > 0),
        w_(w),
        b_(pb_.function("main")) {
    s.validate();
    if (st == Strategy::kStatic && kernel_has_weights(kind)) {
      ANELAB_CHECK(w != nullptr, "kernels", kernel_name(kind), ": static strategy needs the layer weights");
      validate_train_weights(*w, s);
    }
  }
  mil::FunctionBuilder& b() { return b_; }
  const TrainShape& s() const { return s_; }

  void act(const std::string& slot, int64_t channels) { acts_.push_back({slot, channels}); }
  // Declares the product y = W x (or y = Wᵀ x when tprod) for layer weight `weight`.
  void mat(const std::string& weight, bool tprod) {
    mats_[weight] = {tprod, false};
    order_.push_back(weight);
  }
  void vec(const std::string& weight) { vecs_.push_back(weight); }

  void begin();
  Value in(const std::string& slot) { return b_.slice_slot(x_, in_, slot); }
  Value apply(const std::string& weight, const Value& x);
  Value vec_value(const std::string& weight);
  Value mask(int64_t window) override;                  // training kernels: window 0 (TrainShape has none)
  Value rope_table(const std::string& which) override;  // "cos" | "sin" | "nsin"
  // LayerSource (the forward kernels' layer generator): norms are rms_att / rms_ffn, no biases.
  Value input(const std::string& slot) override { return in(slot); }
  Value project(const std::string& weight, const Value& x) override { return apply(weight, x); }
  Value norm_weight(const std::string& norm, const models::NormDesc&) override {  // attn / ffn: rms_att / rms_ffn
    return vec_value(norm == "attn_norm" ? "rms_att" : norm == "ffn_norm" ? "rms_ffn" : norm);
  }
  std::optional<Value> norm_bias(const std::string&, const models::NormDesc&) override { return std::nullopt; }
  KernelSpec finish(const Taps& outputs);

 private:
  struct Mat {
    bool tprod = false;     // y = Wᵀ x
    bool holds_mt = false;  // dynamic: slot holds Mᵀ ([IC, OC]) rather than M ([OC, IC]), M = W or Wᵀ
  };
  struct LoraBands {   // a targeted projection's LoRA slots (their WeightSlot::transposed)
    bool a_t = false;  // "W.lora_a" holds Aᵀ [in, r] (else A [r, in])
    bool b = false;    // "W.lora_bt" holds B [out, r] (else Bᵀ [r, out])
  };
  KernelKind kind_;
  TrainShape s_;
  bool dyn_;
  bool lora_;  // adapters: the adapters' bands (and the activations) are spatial bands of the input
  const LayerWeights* w_;
  mil::ProgramBuilder pb_;
  mil::FunctionBuilder& b_;
  BlobSet blobs_;
  std::vector<std::pair<std::string, int64_t>> acts_;
  std::map<std::string, Mat> mats_;
  std::map<std::string, LoraBands> lora_bands_;
  std::vector<std::string> order_, vecs_;
  std::vector<WeightSlot> slots_;
  std::vector<WeightSlot> masks_;  // LoRA dropout: the mask bands (KernelSpec::lora_masks)
  IOLayout in_;
  Value x_;
  std::optional<Value> mask_;
  int64_t mask_window_ = 0;
  std::map<std::string, Value> tables_;
};

void KernelGen::begin() {
  in_ = IOLayout(std::string(kernel_name(kind_)) + "_in");
  int64_t c_act = 0;
  for (const auto& [slot, ch] : acts_) c_act = std::max(c_act, ch);
  for (const auto& [slot, ch] : acts_) {
    if (dyn_ || lora_)
      in_.add_spatial(slot, ch, s_.seq);
    else
      in_.add_channels(slot, ch, s_.seq);
  }
  if (dyn_) {
    for (const auto& name : order_) {
      Mat& m = mats_[name];
      auto [o, i] = weight_dims(name, s_);
      const int64_t ic = m.tprod ? o : i, oc = m.tprod ? i : o;  // M = W or Wᵀ is [OC, IC]
      if (ic == c_act)
        m.holds_mt = true;
      else if (oc == c_act)
        m.holds_mt = false;
      else if (ic <= c_act)
        m.holds_mt = true;
      else if (oc <= c_act)
        m.holds_mt = false;
      else
        m.holds_mt = ic <= oc;
      const int64_t rows = m.holds_mt ? ic : oc, cols = m.holds_mt ? oc : ic;
      in_.add_spatial(name, rows, cols);
      // slot content: Mᵀ = (tprod ? W : Wᵀ), M = (tprod ? Wᵀ : W)
      slots_.push_back({name, name, m.holds_mt ? !m.tprod : m.tprod});
    }
    for (const auto& name : vecs_) {
      in_.add_spatial(name, weight_dims(name, s_).first, 1);
      slots_.push_back({name, name, false});
    }
  }
  if (lora_) {  // A and B of every targeted projection (after the weights' bands when dynamic), r columns wide
    const int64_t c = in_.channels(), r = s_.lora_rank;  // (Aᵀ [in, r], B [out, r]) where in / out fit the channels
    for (const auto& name : order_) {
      if (!s_.lora_on(name)) continue;
      auto [o, i] = weight_dims(name, s_);
      LoraBands& lb = lora_bands_[name];
      lb.a_t = i <= c, lb.b = o <= c;
      in_.add_spatial(name + ".lora_a", lb.a_t ? i : r, lb.a_t ? r : i);
      in_.add_spatial(name + ".lora_bt", lb.b ? o : r, lb.b ? r : o);
      slots_.push_back({name + ".lora_a", name + ".lora_a", lb.a_t});
      slots_.push_back({name + ".lora_bt", name + ".lora_bt", lb.b});
    }
    for (const auto& name : order_)  // dropout: the 0 / 1 mask of each targeted projection's input, m01 or m01ᵀ
      if (s_.lora_dropout > 0 && s_.lora_on(name)) {
        const int64_t i = weight_dims(name, s_).second, S = s_.seq;
        const bool t = i > c && S < i;  // [S, in]: `in` over the channels (KernelSpec::lora_masks)
        in_.add_spatial(lora_mask_slot(name), t ? S : i, t ? i : S);
        masks_.push_back({lora_mask_slot(name), name, t});
      }
  }
  if (dyn_ || lora_) in_.pad_spatial(rt::dense_width_multiple(in_.dtype()));  // dense device rows (row-stride rule)
  x_ = b_.input("x", in_.type());
}

Value KernelGen::apply(const std::string& weight, const Value& x) {
  auto it = mats_.find(weight);
  ANELAB_CHECK(it != mats_.end(), "kernels", kernel_name(kind_), ": weight '", weight, "' was not declared");
  const Mat& m = it->second;
  auto [o, i] = weight_dims(weight, s_);
  Value y;  // W x (or Wᵀ x): from the weight's band (dynamic) or its baked blob (static)
  if (dyn_) {
    Value band = in(weight);
    y = m.holds_mt ? linear_runtime_t(b_, x, band) : linear_runtime(b_, x, band);
  } else {
    y = linear(b_, x, blobs_.matrix(b_, m.tprod ? weight + "_t" : weight, train_weight(*w_, weight), o, i, m.tprod));
  }
  if (!lora_ || !s_.lora_on(weight)) return y;
  const LoraBands& lb = lora_bands_.at(weight);
  Value a = in(weight + ".lora_a"), bt = in(weight + ".lora_bt");  // A or Aᵀ, Bᵀ or B (LoraBands)
  // v times the matrix M that `band` holds as M (holds_m) or as Mᵀ
  auto mul = [&](const Value& v, const Value& band, bool holds_m) {
    return holds_m ? linear_runtime(b_, v, band) : linear_runtime_t(b_, v, band);
  };
  if (s_.lora_dropout <= 0) {  // W x + s B (A x); Wᵀ x + s Aᵀ (Bᵀ x)
    Value d = m.tprod ? mul(mul(x, bt, !lb.b), a, lb.a_t) : mul(mul(x, a, !lb.a_t), bt, lb.b);
    return b_.add(y, b_.mul(d, s_.lora_scale));
  }
  // dropout: W x + s' B (A (x ⊙ m01)); Wᵀ x + s' m01 ⊙ (Aᵀ (Bᵀ x)), s' = s / (1 - p) (TrainShape::lora_dropout)
  const auto mw = std::find_if(masks_.begin(), masks_.end(), [&](const WeightSlot& ws) { return ws.weight == weight; });
  Value m01 = in(mw->slot);  // [1, in, 1, S], or [1, S, 1, in] to transpose
  if (mw->transposed) {      // reshape + transpose [0, 1, 3, 2] + reshape, as the dynamic matmuls (digest §5.4)
    const int64_t S = s_.seq, i = m01.dim(3);
    m01 = b_.reshape(b_.transpose(b_.reshape(m01, {1, 1, S, i}), {0, 1, 3, 2}), {1, i, 1, S});
  }
  Value d = m.tprod ? b_.mul(mul(mul(x, bt, !lb.b), a, lb.a_t), m01) : mul(mul(b_.mul(x, m01), a, !lb.a_t), bt, lb.b);
  return b_.add(y, b_.mul(d, s_.lora_scale / (1.0 - s_.lora_dropout)));
}

Value KernelGen::vec_value(const std::string& weight) {
  if (dyn_) return b_.reshape(in(weight), {1, weight_dims(weight, s_).first, 1, 1});
  return blobs_.vector(b_, weight, train_weight(*w_, weight));
}

Value KernelGen::mask(int64_t window) {
  ANELAB_CHECK(!mask_ || window == mask_window_, "kernels", kernel_name(kind_), ": masks of windows ", mask_window_,
               " and ", window, " in one kernel");
  if (!mask_)
    mask_ =
        blobs_.tensor(b_, "mask", mil::tensor_type(DType::kFp16, {1, 1, s_.seq, s_.seq}), causal_mask(s_.seq, window));
  mask_window_ = window;
  return *mask_;
}

Value KernelGen::rope_table(const std::string& which) {
  auto it = tables_.find(which);
  if (it != tables_.end()) return it->second;
  RopeTables t = rope_tables(s_.seq, s_.head_dim, s_.rope_theta, s_.rope, 0, s_.rope_scaling);
  std::vector<float>& v = which == "cos" ? t.cos : t.sin;
  if (which == "nsin")
    for (float& f : v) f = -f;
  Value r = blobs_.tensor(b_, "rope_" + which, mil::tensor_type(DType::kFp16, {1, 1, s_.seq, s_.head_dim}), v);
  tables_[which] = r;
  return r;
}

KernelSpec KernelGen::finish(const Taps& outputs) {
  KernelSpec k;
  k.name = kernel_name(kind_);
  k.out = IOLayout(k.name + "_out");
  std::vector<Value> vals;
  for (const auto& [slot, v] : outputs) {
    ANELAB_CHECK(v.rank() == 4 && v.dim(0) == 1 && v.dim(2) == 1 && v.dim(3) == s_.seq, "kernels", k.name, ": output '",
                 slot, "' is ", mil::shape_str(v.shape()), ", not [1, C, 1, ", s_.seq, "]");
    k.out.add_channels(slot, v.dim(1), s_.seq);
    vals.push_back(v);
  }
  b_.output(b_.named("out").concat_slots(k.out, vals));
  k.program = pb_.build(mil::Dialect::kIos18);
  k.weights = blobs_.weights();
  k.in = in_;
  k.weight_slots = slots_;
  k.lora_masks = masks_;
  return k;
}

// ---- kernel bodies --------------------------------------------------------------------------------

KernelSpec gen_attn_fwd(KernelGen& g) {
  const TrainShape& s = g.s();
  g.act("x", s.dim);
  g.vec("rms_att");
  if (s.q_norm) g.vec("q_norm");
  if (s.k_norm) g.vec("k_norm");
  for (const char* w : {"wq", "wk", "wv", "wo"}) g.mat(w, false);
  g.begin();
  std::vector<std::string> taps = {"o", "attn", "q_rope", "k_rope", "v", "xnorm"};
  if (s.q_norm) taps.push_back("q");
  if (s.k_norm) taps.push_back("k");
  return g.finish(build_attention(g.b(), layer_steps(s).steps[0], g, taps));
}

KernelSpec gen_ffn_fwd(KernelGen& g) {
  const TrainShape& s = g.s();
  g.act("x", s.dim);
  g.vec("rms_ffn");
  for (const char* w : {"w1", "w3", "w2"}) g.mat(w, false);
  g.begin();
  return g.finish(build_ffn(g.b(), layer_steps(s).steps[1], g, {"y", "h1", "h3", "gate", "xnorm"}));
}

KernelSpec gen_ffn_bwd(KernelGen& g) {
  const TrainShape& s = g.s();
  auto& b = g.b();
  g.act("dy", s.dim);
  g.act("h1", s.hidden);
  g.act("h3", s.hidden);
  for (const char* w : {"w2", "w1", "w3"}) g.mat(w, true);
  g.begin();
  Value h1 = g.in("h1"), h3 = g.in("h3");
  Value dg = g.apply("w2", g.in("dy"));  // d gate = W2ᵀ dy
  Value sig = b.sigmoid(h1);
  Value dh3 = b.mul(dg, b.mul(h1, sig));  // gate = silu(h1) * h3
  // d silu(h1)/d h1 = sig * (1 + h1 * (1 - sig))
  Value dsilu = b.mul(sig, b.add(b.mul(h1, b.sub(1.0, sig)), 1.0));
  Value dh1 = b.mul(b.mul(dg, h3), dsilu);
  Value dx = b.add(g.apply("w1", dh1), g.apply("w3", dh3));
  return g.finish({{"dx", dx}, {"dh1", dh1}, {"dh3", dh3}});
}

KernelSpec gen_wo_bwd(KernelGen& g) {
  g.act("dy", g.s().dim);
  g.mat("wo", true);
  g.begin();
  return g.finish({{"da", g.apply("wo", g.in("dy"))}});
}

KernelSpec gen_sdpa_bwd1(KernelGen& g) {
  const TrainShape& s = g.s();
  auto& b = g.b();
  g.act("q_rope", s.q_dim());
  g.act("k_rope", s.kv_dim());
  g.act("v", s.kv_dim());
  g.act("da", s.q_dim());
  g.begin();
  const int64_t H = s.n_heads, S = s.seq;
  Value q = split_heads(b, g.in("q_rope"), H);
  Value k = gqa_expand(b, split_heads(b, g.in("k_rope"), s.n_kv_heads), s.n_rep());
  Value v = gqa_expand(b, split_heads(b, g.in("v"), s.n_kv_heads), s.n_rep());
  Value da = split_heads(b, g.in("da"), H);
  Value p = attention_probs(b, q, k, g.mask(0), s.attn_scale());  // [1, H, S, S]
  Value dv = gqa_reduce(b, b.matmul(p, da, true, false), s.n_rep());
  Value dp = b.matmul(da, v, false, true);
  return g.finish(
      {{"dv", merge_heads(b, dv)}, {"probs", b.reshape(p, {1, H * S, 1, S})}, {"dp", b.reshape(dp, {1, H * S, 1, S})}});
}

KernelSpec gen_sdpa_bwd2(KernelGen& g) {
  const TrainShape& s = g.s();
  auto& b = g.b();
  const int64_t H = s.n_heads, S = s.seq;
  g.act("probs", H * S);
  g.act("dp", H * S);
  g.act("q_rope", s.q_dim());
  g.act("k_rope", s.kv_dim());
  g.begin();
  Value p = b.reshape(g.in("probs"), {1, H, S, S});
  Value dp = b.reshape(g.in("dp"), {1, H, S, S});
  Value q = split_heads(b, g.in("q_rope"), H);
  Value k = gqa_expand(b, split_heads(b, g.in("k_rope"), s.n_kv_heads), s.n_rep());
  Value rs = b.reduce_sum(b.mul(p, dp), {3}, true);
  Value ds = b.mul(b.mul(p, b.sub(dp, rs)), s.attn_scale());
  Value dq = b.matmul(ds, k);
  Value dk = gqa_reduce(b, b.matmul(ds, q, true, false), s.n_rep());
  Value c = g.rope_table("cos"), ns = g.rope_table("nsin");
  dq = rope(b, dq, c, ns, s.rope);  // inverse rotation: gradient w.r.t. pre-RoPE q / k
  dk = rope(b, dk, c, ns, s.rope);
  return g.finish({{"dq", merge_heads(b, dq)}, {"dk", merge_heads(b, dk)}});
}

// RMSNorm backward over the channels C of x [N, C, 1, S]: y = x r w, r = (mean_C(x²) + eps)^-½ (rms_rrms)
//   =>  dx = r (gw − x r² mean_C(gw x)), gw = dy w.
Value rms_norm_backward(FunctionBuilder& b, const Value& x, const Value& r, const Value& gw) {
  Value m = b.mul(b.reduce_sum(b.mul(gw, x), {1}, true), 1.0 / static_cast<double>(x.dim(1)));
  return b.mul(r, b.sub(gw, b.mul(x, b.mul(m, b.mul(r, r)))));
}

// The backward of the per-head RMSNorm n (q_norm / k_norm): dy, x [1, heads*HD, 1, S] as [heads, HD, 1, S], normed
// over HD.
Value head_norm_backward(KernelGen& g, const models::NormDesc& n, const Value& dy, const Value& x, const char* weight,
                         int64_t heads) {
  auto& b = g.b();
  const TrainShape& s = g.s();
  const std::vector<int64_t> split = {heads, s.head_dim, 1, s.seq}, merged = {1, heads * s.head_dim, 1, s.seq};
  Value xh = b.reshape(x, split);
  Value r = rms_rrms(b, xh, n.eps);
  Value w = g.vec_value(weight);
  Value dyh = b.reshape(dy, split);
  Value gw = b.mul(dyh, w);
  return b.reshape(rms_norm_backward(b, xh, r, gw), merged);
}

KernelSpec gen_qkv_bwd(KernelGen& g) {
  const TrainShape& s = g.s();
  auto& b = g.b();
  g.act("dq", s.q_dim());
  g.act("dk", s.kv_dim());
  g.act("dv", s.kv_dim());
  if (s.q_norm) {  // with k_norm (TrainShape::validate)
    g.act("q", s.q_dim());
    g.act("k", s.kv_dim());
    g.vec("q_norm"), g.vec("k_norm");
  }
  for (const char* w : {"wq", "wk", "wv"}) g.mat(w, true);
  g.begin();
  if (!s.q_norm) {
    Value dx = b.add(b.add(g.apply("wq", g.in("dq")), g.apply("wk", g.in("dk"))), g.apply("wv", g.in("dv")));
    return g.finish({{"dx", dx}});
  }
  Value dq_in = g.in("dq");
  Value q = g.in("q");
  Value dq = head_norm_backward(g, *s.q_norm, dq_in, q, "q_norm", s.n_heads);
  Value dk_in = g.in("dk");
  Value k = g.in("k");
  Value dk = head_norm_backward(g, *s.k_norm, dk_in, k, "k_norm", s.n_kv_heads);
  Value dxq = g.apply("wq", dq);
  Value dxk = g.apply("wk", dk);
  Value dxv = g.apply("wv", g.in("dv"));
  return g.finish({{"dx", b.add(b.add(dxq, dxk), dxv)}, {"dq_proj", dq}, {"dk_proj", dk}});
}

KernelSpec gen_rms_bwd(KernelGen& g, const char* weight) {
  const TrainShape& s = g.s();
  g.act("dy", s.dim);
  g.act("x", s.dim);
  g.vec(weight);
  g.begin();
  auto& b = g.b();
  Value x = g.in("x");
  Value r = rms_rrms(b, x, s.norm_eps);
  Value gw = b.mul(g.in("dy"), g.vec_value(weight));
  return g.finish({{"dx", rms_norm_backward(b, x, r, gw)}});
}

}  // namespace

KernelSpec build_kernel(KernelKind kind, const TrainShape& shape, Strategy strategy, const LayerWeights* w) {
  KernelGen g(kind, shape, strategy, w);
  switch (kind) {
    case KernelKind::kAttnFwd:
      return gen_attn_fwd(g);
    case KernelKind::kFfnFwd:
      return gen_ffn_fwd(g);
    case KernelKind::kFfnBwd:
      return gen_ffn_bwd(g);
    case KernelKind::kWoBwd:
      return gen_wo_bwd(g);
    case KernelKind::kSdpaBwd1:
      return gen_sdpa_bwd1(g);
    case KernelKind::kSdpaBwd2:
      return gen_sdpa_bwd2(g);
    case KernelKind::kQkvBwd:
      return gen_qkv_bwd(g);
    case KernelKind::kRmsAttBwd:
      return gen_rms_bwd(g, "rms_att");
    case KernelKind::kRmsFfnBwd:
      return gen_rms_bwd(g, "rms_ffn");
  }
  fail("kernels", "unknown kernel kind");
}

KernelSpec& LayerKernels::get(KernelKind k) {
  switch (k) {
    case KernelKind::kAttnFwd:
      return attn_fwd;
    case KernelKind::kFfnFwd:
      return ffn_fwd;
    case KernelKind::kFfnBwd:
      return ffn_bwd;
    case KernelKind::kWoBwd:
      return wo_bwd;
    case KernelKind::kSdpaBwd1:
      return sdpa_bwd1;
    case KernelKind::kSdpaBwd2:
      return sdpa_bwd2;
    case KernelKind::kQkvBwd:
      return qkv_bwd;
    case KernelKind::kRmsAttBwd:
      return rms_att_bwd;
    case KernelKind::kRmsFfnBwd:
      return rms_ffn_bwd;
  }
  fail("kernels", "unknown kernel kind");
}

LayerKernels build_layer_kernels(const TrainShape& shape, Strategy strategy, const LayerWeights* w) {
  LayerKernels lk;
  for (KernelKind k : kAllKernelKinds) lk.get(k) = build_kernel(k, shape, strategy, w);
  return lk;
}

}  // namespace anelab::kern
