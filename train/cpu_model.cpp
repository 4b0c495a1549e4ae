// The math of each step (the model is its description, framework/core/model_desc.h, walked step by step; one forward
// and one backward per step kind). A step reads the residual
// stream x [N, D] and adds to it (eps, offset, RoPE, window and scales from the step's descriptors):
//   xn = rmsnorm(x) * (offset + pre_norm);   b = op(xn);   b = rmsnorm(b) * (offset + post_norm) when present;
//   x' = x + residual_scale * b
// attention: q = xn Wqᵀ, k = xn Wkᵀ, v = xn Wvᵀ; q/k norms per head (when present) over hd; RoPE(q, k) at
//   position t = row % T with the step's RopeDesc (llama3 / linear scaling via kern::cpu::rope_half_tables);
//   head h attends with kv head h / G (llama2.c, HF); a = softmax(q kᵀ * score_scale + causal, keys within the
//   step's window when it has one) v;  b = a Woᵀ.  Partial RoPE (rope.dims < hd): the first dims of each head rotate.
//   With an output gate (Qwen3.5) Wq's rows are per head [q | gate] and b = (a ⊙ sigmoid(gate)) Woᵀ.
// ffn: b = (act(xn W_inᵀ) ⊙ xn W_upᵀ) W_outᵀ with act = silu (SwiGLU) or gelu_tanh (GeGLU)
// linear attention (Qwen3.5's Gated DeltaNet): train/cpu_deltanet_grad.h, its forward and backward through time (its
//   five projections adapted through DeltaNetAdapters: lora_forward / lora_backward as project() does).
// x0 = embedding * embed.scale;  logits = rmsnorm(x_L) * (offset + norm) · Woutᵀ, soft-capped (cap * tanh(z / cap))
// when the head says so;  loss = mean over tokens of −log softmax(logits)[target].
// What the description holds and this executor lacks (LayerNorm, biases, a plain GELU MLP, learned positions,
// score soft-capping) is refused when the model is built, in one line naming the layer, the
// step and the executor (models::unsupported).
#include "train/cpu_model.h"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "framework/core/clock.h"
#include "framework/core/error.h"
#include "framework/kernels/cpu_ops.h"
#include "models/arch/arch.h"
#include "train/bf16_linalg.h"
#include "train/cpu_linalg.h"
#include "train/frozen_base.h"
#include "train/lora.h"
#include "train/parallel.h"

namespace anelab::train {
namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<MatR>;
using CMapR = Eigen::Map<const MatR>;
using SMapR = Eigen::Map<MatR, 0, Eigen::OuterStride<>>;  // strided view (one head of [N, H*hd])
using CSMapR = Eigen::Map<const MatR, 0, Eigen::OuterStride<>>;

// Eigen parallelises its products only in OpenMP builds; the products here are split over the thread pool
// instead, so Eigen gets one thread even where OpenMP is compiled in.
void eigen_single_thread() {
  static const bool once = [] {
    Eigen::setNbThreads(1);
    return true;
  }();
  (void)once;
}

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// tanh-GELU (Gemma's gelu_pytorch_tanh) and its derivative.
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
inline float gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(kGeluC * (x + 0.044715f * x * x * x))); }
inline float gelu_tanh_grad(float x) {
  const float t = std::tanh(kGeluC * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * x * x);
}

void add_into(float* y, const float* a, const float* b, int64_t n) {
  parallel_rows(n, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
  });
}

}  // namespace

// The weights a norm multiplies by: w itself, or (offset + w) in fp32 (Gemma: 1 + w) kept in the caller's buffer.
// The weight gradient is the same for both (d(offset + w)/dw = 1).
const float* CpuModel::norm_w(const models::NormDesc& n, const float* w, int64_t len, std::vector<float>& buf) const {
  if (n.offset == 0.0f) return w;
  buf.resize(size_t(len));
  for (int64_t i = 0; i < len; ++i) buf[size_t(i)] = n.offset + w[i];
  return buf.data();
}

DeltaNetWeights CpuModel::deltanet_weights(const StepPlan& sp, const float* w, std::vector<float>& nb) const {
  const models::DeltaNetDesc& n = sp.s->deltanet;
  return {w + sp.qkv,  w + sp.z,     w + sp.b,       w + sp.a,
          w + sp.conv, w + sp.a_log, w + sp.dt_bias, norm_w(n.norm, w + sp.gnorm, n.v_dim, nb),
          w + sp.sout};
}

DeltaNetGrads CpuModel::deltanet_grads(const StepPlan& sp, float* g) const {
  if (!g) return {};
  return {g + sp.qkv,   g + sp.z,       g + sp.b,     g + sp.a,   g + sp.conv,
          g + sp.a_log, g + sp.dt_bias, g + sp.gnorm, g + sp.sout};
}

const float* CpuModel::wp(const float* w, int64_t off) const { return base_ ? base_->f32(off) : w + off; }

void CpuModel::base_wt(const float* w, int64_t off, const float* x, float* y, int64_t N, int64_t in,
                       int64_t out) const {
  const models::Tensor* t = base_ ? base_->typed(off) : nullptr;
  if (base_bf16_)  // --lora-compute bf16 (train/bf16_linalg.h)
    t ? matmul_wt_bf16(x, *t, y, N, in, out) : matmul_wt_bf16(x, wp(w, off), y, N, in, out);
  else if (t)
    matmul_wt(x, *t, y, N, in, out);
  else
    matmul_wt(x, wp(w, off), y, N, in, out);
}

void CpuModel::base_dx(const float* w, int64_t off, const float* dy, float* dx, int64_t N, int64_t in, int64_t out,
                       bool add) const {
  const models::Tensor* t = base_ ? base_->typed(off) : nullptr;
  if (base_bf16_)
    t ? matmul_dx_bf16(dy, *t, dx, N, in, out, add) : matmul_dx_bf16(dy, wp(w, off), dx, N, in, out, add);
  else if (t)
    matmul_dx(dy, *t, dx, N, in, out, add);
  else
    matmul_dx(dy, wp(w, off), dx, N, in, out, add);
}

void CpuModel::set_base(const FrozenBase* b) {
  if (b && b->dense_data()) fail("train", "CpuModel::set_base: a dense base is passed as w");
  if (b && !(b->layout().config() == layout_.config())) fail("train", "CpuModel::set_base: the base has another model");
  base_ = b;
}

namespace {
LoraTarget deltanet_lora_target(DeltaNetProj p) {
  switch (p) {
    case DeltaNetProj::kQkv:
      return LoraTarget::kLinQkv;
    case DeltaNetProj::kZ:
      return LoraTarget::kLinZ;
    case DeltaNetProj::kB:
      return LoraTarget::kLinB;
    case DeltaNetProj::kA:
      return LoraTarget::kLinA;
    case DeltaNetProj::kOut:
      return LoraTarget::kLinOut;
  }
  return LoraTarget::kLinQkv;
}
}  // namespace

DeltaNetAdapters CpuModel::deltanet_adapters(const StepPlan& sp, StepActs& a, int64_t N, double* tdw) {
  return {[this, &sp, &a, N](DeltaNetProj p, const float* x, float* y, int64_t in, int64_t out) {
            lora_forward(sp, a, deltanet_lora_target(p), x, y, N, in, out);
          },
          [this, &sp, &a, N, tdw](DeltaNetProj p, const float* dy, const float* x, float* dx, int64_t in, int64_t out) {
            lora_backward(sp, a, deltanet_lora_target(p), dy, x, dx, N, in, out, tdw);
          }};
}

void CpuModel::project(const StepPlan& sp, StepActs& a, LoraTarget t, const float* x, const float* w, int64_t w_off,
                       float* y, int64_t N, int64_t in, int64_t out) {
  base_wt(w, w_off, x, y, N, in, out);
  lora_forward(sp, a, t, x, y, N, in, out);
}

void CpuModel::lora_forward(const StepPlan& sp, StepActs& a, LoraTarget t, const float* x, float* y, int64_t N,
                            int64_t in, int64_t out) {
  const int64_t si = lora_ ? lora_->layout->slot(sp.layer, t) : -1;
  if (si < 0) return;
  const LoraSlot& s = lora_->layout->slots()[size_t(si)];
  const LoraConfig& lc = lora_->layout->lora();
  const int64_t r = lc.rank, ti = int64_t(t);
  const float* xd = x;
  if (lora_->train && lc.dropout > 0) {  // PEFT: lora_B(lora_A(dropout(x))); inverted dropout, 1/(1-p) kept
    std::vector<float>&mask = a.lmask[size_t(ti)], &xm = a.lx[size_t(ti)];  // [N, in] (prepare_lora)
    const float keep = lora_dropout_scale(lc.dropout);
    const uint64_t stream = lora_dropout_stream(lora_->seed, lora_->micro_batch, si);
    parallel_rows(N, N * in, [&](int64_t n0, int64_t n1) {
      for (int64_t i = n0 * in; i < n1 * in; ++i) {
        mask[size_t(i)] = lora_dropout_kept(stream, uint64_t(i), lc.dropout) ? keep : 0.0f;
        xm[size_t(i)] = x[i] * mask[size_t(i)];
      }
    });
    xd = xm.data();
  }
  std::vector<float>& lt = a.lt[size_t(ti)];  // [N, r] (prepare_lora)
  // t = xd Aᵀ [N, r], y += s t Bᵀ: split over rows (the r-wide products have too few output columns for
  // matmul_wt's column blocks: one block, one thread), no [N, out] temporary.
  const float scale = float(lc.scale());
  const CMapR A(lora_->w + s.a, r, in), B(lora_->w + s.b, out, r);
  parallel_rows(N, N * (in + out) * r, [&](int64_t n0, int64_t n1) {
    MapR t(lt.data() + n0 * r, n1 - n0, r);
    t.noalias() = CMapR(xd + n0 * in, n1 - n0, in) * A.transpose();
    MapR(y + n0 * out, n1 - n0, out).noalias() += scale * (t * B.transpose());
  });
}

void CpuModel::project_backward(const StepPlan& sp, StepActs& a, LoraTarget t, const float* dy, const float* x,
                                const float* w, float* g, int64_t w_off, float* dx, int64_t N, int64_t in, int64_t out,
                                bool add, double* tdw) {
  if (float* gw = base_grad(g, w_off)) {
    const double t0 = now_ms();
    matmul_dw(dy, x, gw, N, in, out);
    *tdw += now_ms() - t0;
  }
  if (dx) base_dx(w, w_off, dy, dx, N, in, out, add);
  lora_backward(sp, a, t, dy, x, dx, N, in, out, tdw);
}

void CpuModel::lora_backward(const StepPlan& sp, StepActs& a, LoraTarget t, const float* dy, const float* x, float* dx,
                             int64_t N, int64_t in, int64_t out, double* tdw) {
  const int64_t si = lora_ ? lora_->layout->slot(sp.layer, t) : -1;
  if (si < 0 || !lora_->g) return;
  const LoraSlot& s = lora_->layout->slots()[size_t(si)];
  const LoraConfig& lc = lora_->layout->lora();
  const int64_t r = lc.rank, ti = int64_t(t);
  const bool drop = lora_->train && lc.dropout > 0;
  const float* xd = drop ? a.lx[size_t(ti)].data() : x;
  const float scale = float(lc.scale());
  // The r-wide products split over rows (dt, dx) or over the long side of the gradient (dB rows, dA columns): the
  // column blocks of matmul_* would give them one block, one thread.
  std::vector<float> dt(size_t(N * r));
  const CMapR A(lora_->w + s.a, r, in), B(lora_->w + s.b, out, r), T(a.lt[size_t(ti)].data(), N, r);
  const float* mask = drop ? a.lmask[size_t(ti)].data() : nullptr;
  parallel_rows(N, N * (in + out) * r, [&](int64_t n0, int64_t n1) {
    MapR d(dt.data() + n0 * r, n1 - n0, r);
    d.noalias() = scale * (CMapR(dy + n0 * out, n1 - n0, out) * B);  // dt = s dy B
    if (!dx) return;
    MapR dxr(dx + n0 * in, n1 - n0, in);
    if (!mask) {
      dxr.noalias() += d * A;  // d(xd) = dt A, xd = x
      return;
    }
    MatR dxd = d * A;  // d(xd), then through the dropout mask
    dxr.array() += dxd.array() * CMapR(mask + n0 * in, n1 - n0, in).array();
  });
  const double t0 = now_ms();
  parallel_blocks(out, N * out * r, [&](int64_t r0, int64_t r1) {  // dB += s dyᵀ t
    MapR(lora_->g + s.b + r0 * r, r1 - r0, r).noalias() +=
        scale * (CSMapR(dy + r0, N, r1 - r0, Eigen::OuterStride<>(out)).transpose() * T);
  });
  parallel_blocks(in, N * in * r, [&](int64_t c0, int64_t c1) {  // dA += dtᵀ xd
    SMapR(lora_->g + s.a + c0, r, c1 - c0, Eigen::OuterStride<>(in)).noalias() +=
        CMapR(dt.data(), N, r).transpose() * CSMapR(xd + c0, N, c1 - c0, Eigen::OuterStride<>(in));
  });
  *tdw += now_ms() - t0;
}

CpuModel::CpuModel(const ParamLayout& layout) : CpuModel(layout, models::describe_model(layout.config())) {}

CpuModel::CpuModel(const ParamLayout& layout, models::ModelDesc d) : layout_(layout), d_(std::move(d)) {
  eigen_single_thread();
  plan();
  emb_off_ = layout_.find(d_.embed.tokens).offset, norm_off_ = layout_.find(d_.head.norm.weight).offset;
  out_off_ = layout_.find(d_.head.weight).offset;
}

// Walks the description once: every step's weights as offsets, the distinct RoPEs, and a one-line refusal
// (models::unsupported) of the first thing this executor does not implement.
void CpuModel::plan() {
  static const char* kEx = "the CPU training executor (--strategy cpu)";
  auto off = [&](const std::string& name) { return name.empty() ? int64_t(-1) : layout_.find(name).offset; };
  auto rms = [&](int64_t l, const models::Step& s, const std::optional<models::NormDesc>& n, const char* which) {
    if (n && n->kind != models::NormType::kRms)
      models::unsupported("train", kEx, l, s.kind, std::string("a LayerNorm ") + which);
    if (n && !n->bias.empty()) models::unsupported("train", kEx, l, s.kind, std::string("a ") + which + " bias");
    return n ? off(n->weight) : int64_t(-1);
  };
  if (!d_.embed.positions.empty()) fail("train", "learned positions are not supported by ", kEx);
  if (d_.head.norm.kind != models::NormType::kRms) fail("train", "a LayerNorm head norm is not supported by ", kEx);
  for (size_t li = 0; li < d_.layers.size(); ++li) {
    const auto l = static_cast<int64_t>(li);
    layer_first_.push_back(int64_t(steps_.size()));
    int64_t first = std::numeric_limits<int64_t>::max();
    for (const models::Step& s : d_.layers[li].steps) {
      StepPlan sp;
      sp.s = &s;
      sp.layer = l;
      sp.pre = rms(l, s, s.pre_norm, "pre-norm");
      sp.post = rms(l, s, s.post_norm, "post-norm");
      switch (s.kind) {
        case models::StepKind::kAttention: {
          const models::AttnDesc& at = s.attn;
          if (!at.bq.empty() || !at.bk.empty() || !at.bv.empty() || !at.bo.empty())
            models::unsupported("train", kEx, l, s.kind, "q/k/v/o biases");
          if (at.score_softcap > 0.0f) models::unsupported("train", kEx, l, s.kind, "score soft-capping");
          if (at.rope.dims < 0 || at.rope.dims > at.head_dim || at.rope.dims % 2 != 0)
            models::unsupported("train", kEx, l, s.kind,
                                "RoPE on " + std::to_string(at.rope.dims) + " dims (an even count up to head_dim)");
          if (at.rope.style != models::RopeStyle::kNone && at.head_dim % 2 != 0)
            models::unsupported("train", kEx, l, s.kind, "RoPE of an odd head_dim");
          sp.qn = rms(l, s, at.q_norm, "q-norm");
          sp.kn = rms(l, s, at.k_norm, "k-norm");
          sp.wq = off(at.wq), sp.wk = off(at.wk), sp.wv = off(at.wv), sp.wo = off(at.wo);
          if (const int64_t rows = at.n_heads * at.head_dim * (at.output_gate ? 2 : 1);
              layout_.find(at.wq).shape.at(0) != rows)  // (an output gate's rows are in wq)
            fail("train", "layer ", l, " attention: ", at.wq, " has ", layout_.find(at.wq).shape.at(0),
                 " rows, the description ", rows, at.output_gate ? " (with the output gate's)" : "");
          if (at.rope.style != models::RopeStyle::kNone) {
            size_t r = 0;
            while (r < ropes_.size() && !(ropes_[r].desc == at.rope && ropes_[r].head_dim == at.head_dim)) ++r;
            if (r == ropes_.size()) ropes_.push_back({at.rope, at.head_dim, at.rope.dims ? at.rope.dims : at.head_dim});
            sp.rope = int(r);
          }
          break;
        }
        case models::StepKind::kFfn: {
          const models::FfnDesc& f = s.ffn;
          if (f.activation != models::Activation::kSilu && f.activation != models::Activation::kGeluTanhGated)
            models::unsupported("train", kEx, l, s.kind, std::string("the ") + activation_name(f.activation) + " MLP");
          if (!f.b_in.empty() || !f.b_out.empty()) models::unsupported("train", kEx, l, s.kind, "MLP biases");
          sp.w_in = off(f.w_in), sp.w_up = off(f.w_up), sp.w_out = off(f.w_out);
          break;
        }
        case models::StepKind::kLinearAttention: {
          const models::DeltaNetDesc& n = s.deltanet;
          if (n.n_k_heads <= 0 || n.n_v_heads % n.n_k_heads != 0)
            models::unsupported("train", kEx, l, s.kind,
                                "value heads (" + std::to_string(n.n_v_heads) + ") not a multiple of the key heads (" +
                                    std::to_string(n.n_k_heads) + ")");
          sp.gnorm = rms(l, s, n.norm, "gated norm");
          sp.qkv = off(n.w_qkv), sp.z = off(n.w_z), sp.b = off(n.w_b), sp.a = off(n.w_a), sp.conv = off(n.conv);
          sp.a_log = off(n.a_log), sp.dt_bias = off(n.dt_bias), sp.sout = off(n.w_out);
          break;
        }
      }
      for (int64_t o : {sp.pre,   sp.post, sp.wq, sp.wk, sp.wv, sp.wo,   sp.qn,    sp.kn,      sp.w_in,  sp.w_up,
                        sp.w_out, sp.qkv,  sp.z,  sp.b,  sp.a,  sp.conv, sp.a_log, sp.dt_bias, sp.gnorm, sp.sout})
        if (o >= 0) first = std::min(first, o);
      steps_.push_back(sp);
    }
    layer_grads_.push_back(first);
  }
  acts_.resize(steps_.size());
}

double CpuModel::step_flops(const models::ModelConfig& c, int64_t B, int64_t T) {
  const double N = double(B) * double(T), D = double(c.dim), F = double(c.hidden_dim);
  const double q_rows = double(c.q_dim()) * (c.attn_output_gate ? 2 : 1);  // wq with the gate's rows
  const double lin = 2.0 * N * (D * q_rows + D * c.q_dim() + D * c.kv_dim() * 2 + 3 * D * F);
  const double attn = 2.0 * 2.0 * double(B) * double(c.n_heads) * double(T) * double(T) * double(c.head_dim);
  // A Gated DeltaNet layer: its five projections and the MLP; the delta rule's three [dk, dv] products per token
  // and value head (S'ᵀk, k uᵀ, Sᵀq).
  const double Cd = double(c.linear_conv_dim()), Vd = double(c.linear_value_dim()), Hv = double(c.linear_v_heads);
  const double delta_lin = 2.0 * N * (D * (Cd + Vd + 2 * Hv) + Vd * D + 3 * D * F);
  const double delta = 2.0 * 3.0 * N * Hv * double(c.linear_k_dim) * double(c.linear_v_dim);
  double layers = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) layers += c.linear_layer(l) ? delta_lin + delta : lin + attn;
  const double cls = 2.0 * N * D * double(c.vocab_size);
  return 3.0 * (layers + cls);
}

void CpuModel::prepare_head(int64_t B, int64_t T) {
  if (B == head_B_ && T == head_T_) return;
  head_B_ = B;
  head_T_ = T;
  const size_t N = size_t(B * T), D = size_t(d_.dim);
  xL_.resize(N * D), rrmsf_.resize(N), xf_.resize(N * D), logits_.resize(N * size_t(d_.vocab_size));
  dxf_.resize(N * D);
  if (d_.head.softcap > 0.0f) capped_.resize(logits_.size());
  inputs_.resize(N);
}

void CpuModel::prepare(int64_t B, int64_t T) {
  prepare_head(B, T);
  if (lora_) prepare_lora(B * T);
  if (B == B_ && T == T_) return;
  B_ = B;
  T_ = T;
  const size_t N = size_t(B * T), D = size_t(d_.dim);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const models::Step& s = *steps_[i].s;
    StepActs& a = acts_[i];
    a.x.resize(N * D), a.rrms.resize(N), a.xn.resize(N * D);
    if (s.post_norm) a.o.resize(N * D), a.rrmso.resize(N);
    switch (s.kind) {
      case models::StepKind::kAttention: {
        const models::AttnDesc& at = s.attn;
        const size_t QD = size_t(at.n_heads * at.head_dim), KD = size_t(at.n_kv_heads * at.head_dim);
        a.q.resize(N * QD), a.k.resize(N * KD), a.v.resize(N * KD), a.att.resize(N * QD);
        a.p.resize(size_t(B * at.n_heads) * size_t(T * T));
        if (at.q_norm) a.qp.resize(N * QD), a.rrmsq.resize(N * size_t(at.n_heads));
        if (at.k_norm) a.kp.resize(N * KD), a.rrmsk.resize(N * size_t(at.n_kv_heads));
        if (at.output_gate) a.gate.resize(N * QD), a.gated.resize(N * QD);
        break;
      }
      case models::StepKind::kFfn: {
        const size_t F = size_t(s.ffn.hidden);
        a.h1.resize(N * F), a.h3.resize(N * F), a.g.resize(N * F);
        break;
      }
      case models::StepKind::kLinearAttention:  // DeltaNetStep sizes its own
        break;
    }
  }
  for (RopeTable& r : ropes_) {
    const int64_t half = r.dims / 2;
    r.cos.resize(size_t(T * half)), r.sin.resize(size_t(T * half));
    kern::cpu::rope_half_tables(T, r.dims, r.desc.theta, 0, kern::cpu::Numerics::kReference, r.cos.data(), r.sin.data(),
                                r.desc.scaling, r.desc.linear_factor);
  }
}

// Each adapted projection of step i: t [N, r]; with dropout in training its mask and x ⊙ mask [N, in].
void CpuModel::prepare_lora(int64_t N) {
  const LoraLayout& l = *lora_->layout;
  const bool drop = lora_->train && l.lora().dropout > 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    StepActs& a = acts_[i];
    for (int ti = 0; ti < kLoraTargets; ++ti) {
      const int64_t si = l.slot(steps_[i].layer, LoraTarget(ti));
      if (si < 0 || !step_has_target(*steps_[i].s, LoraTarget(ti))) continue;
      if (a.lt.empty()) a.lt.resize(kLoraTargets), a.lmask.resize(kLoraTargets), a.lx.resize(kLoraTargets);
      a.lt[size_t(ti)].resize(size_t(N * l.lora().rank));
      if (drop) {
        const size_t in = size_t(N * l.slots()[size_t(si)].in);
        a.lmask[size_t(ti)].resize(in), a.lx[size_t(ti)].resize(in);
      }
    }
  }
}

int64_t CpuModel::activation_bytes(int64_t B, int64_t T) {
  prepare(B, T);
  auto held = [](const auto& v) {
    return int64_t(v.capacity() * sizeof(typename std::decay_t<decltype(v)>::value_type));
  };
  int64_t n = 0;
  for (const StepActs& a : acts_) {
    for (const std::vector<float>* v : {&a.x, &a.rrms, &a.xn, &a.o, &a.rrmso, &a.q, &a.k, &a.v, &a.p, &a.att, &a.qp,
                                        &a.kp, &a.rrmsq, &a.rrmsk, &a.gate, &a.gated, &a.h1, &a.h3, &a.g})
      n += held(*v);
    for (const std::vector<std::vector<float>>* vv : {&a.lt, &a.lmask, &a.lx}) {
      n += held(*vv);
      for (const std::vector<float>& v : *vv) n += held(v);
    }
    n += a.dn.held_bytes();
  }
  for (const std::vector<float>* v : {&xL_, &rrmsf_, &xf_, &logits_, &capped_, &dxf_}) n += held(*v);
  n += held(inputs_);
  for (const RopeTable& r : ropes_) n += held(r.cos) + held(r.sin);
  return n;
}

// Rotates every head of x [rows, heads*hd] by +angle (sign = 1) or -angle (sign = -1, the backward) with the
// step's RoPE; nothing without one. Partial RoPE (dims < hd): the first dims of each head rotate as a head of
// dims would (frequencies theta^(-2i/dims), HF's partial_rotary_factor), the rest pass through.
void CpuModel::rope(const StepPlan& sp, float* x, int64_t rows, int64_t heads, int64_t T, float sign) const {
  if (sp.rope < 0) return;
  const RopeTable& r = ropes_[size_t(sp.rope)];
  const int64_t hd = r.head_dim, rd = r.dims, half = rd / 2;
  const auto style = r.desc.style == models::RopeStyle::kAdjacentPairs ? kern::RopeStyle::kAdjacentPairs
                                                                       : kern::RopeStyle::kRotateHalf;
  parallel_rows(rows, rows * heads * hd, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* c = r.cos.data() + (n % T) * half;
      const float* s = r.sin.data() + (n % T) * half;
      if (rd == hd)
        kern::cpu::rope_row(x + n * heads * hd, heads, hd, style, c, s, kern::cpu::Numerics::kReference, sign);
      else
        for (int64_t h = 0; h < heads; ++h)
          kern::cpu::rope_row(x + (n * heads + h) * hd, 1, rd, style, c, s, kern::cpu::Numerics::kReference, sign);
    }
  });
}

// Query i sees keys [j0, i]: j0 = 0, or i - window + 1 when the step has a window.
void CpuModel::scores_forward(const models::AttnDesc& at, StepActs& a, int64_t B, int64_t T) {
  const int64_t H = at.n_heads, G = at.n_heads / at.n_kv_heads, hd = at.head_dim;
  const int64_t QD = H * hd, KD = at.n_kv_heads * hd;
  const int64_t W = at.window > 0 ? at.window : T;
  const float scale = at.score_scale;
  parallel_rows(B * H, B * H * T * T * hd, [&](int64_t bh0, int64_t bh1) {
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / H, h = bh % H, kvh = h / G;
      CSMapR q(a.q.data() + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD));
      CSMapR k(a.k.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      CSMapR v(a.v.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      MapR p(a.p.data() + bh * T * T, T, T);
      p.noalias() = q * k.transpose();
      for (int64_t i = 0; i < T; ++i) {
        float* row = p.data() + i * T;
        const int64_t j0 = std::max<int64_t>(0, i - W + 1);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = j0; j <= i; ++j) mx = std::max(mx, row[j] * scale);
        double sum = 0;
        for (int64_t j = j0; j <= i; ++j) {
          row[j] = std::exp(row[j] * scale - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < j0; ++j) row[j] = 0.0f;
        for (int64_t j = j0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      SMapR(a.att.data() + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD)).noalias() = p * v;
    }
  });
}

void CpuModel::scores_backward(const models::AttnDesc& at, StepActs& a, int64_t B, int64_t T, const float* datt,
                               float* dq, float* dk, float* dv) {
  const int64_t H = at.n_heads, KVH = at.n_kv_heads, G = H / KVH, hd = at.head_dim;
  const int64_t QD = H * hd, KD = KVH * hd;
  const float scale = at.score_scale;  // P is 0 outside each query's window, so are its gradients
  // One task per (b, kv head): the G query heads sharing it accumulate dK/dV in a fixed order.
  parallel_rows(B * KVH, B * H * T * T * hd, [&](int64_t bk0, int64_t bk1) {
    for (int64_t bk = bk0; bk < bk1; ++bk) {
      const int64_t b = bk / KVH, kvh = bk % KVH;
      CSMapR k(a.k.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      CSMapR v(a.v.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      SMapR dkm(dk + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      SMapR dvm(dv + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      dkm.setZero();
      dvm.setZero();
      MatR dp(T, T);
      for (int64_t r = 0; r < G; ++r) {
        const int64_t h = kvh * G + r;
        CSMapR q(a.q.data() + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD));
        CSMapR da(datt + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD));
        CMapR p(a.p.data() + (b * H + h) * T * T, T, T);
        dvm.noalias() += p.transpose() * da;
        dp.noalias() = da * v.transpose();
        for (int64_t i = 0; i < T; ++i) {
          const float* pr = p.data() + i * T;
          float* dr = dp.data() + i * T;
          double dot = 0;
          for (int64_t j = 0; j <= i; ++j) dot += double(pr[j]) * dr[j];
          const float d = static_cast<float>(dot);
          for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - d) * scale;
          for (int64_t j = i + 1; j < T; ++j) dr[j] = 0.0f;
        }
        SMapR(dq + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD)).noalias() = dp * k;
        dkm.noalias() += dp.transpose() * q;
      }
    }
  });
}

// x [N, D] of step i (acts_[i].x) -> out [N, D] (the next step's x, or xL_).
void CpuModel::step_forward(const float* w, size_t i, int64_t B, int64_t T, float* out) {
  const StepPlan& sp = steps_[i];
  const models::Step& s = *sp.s;
  StepActs& a = acts_[i];
  const int64_t N = B * T, D = d_.dim;
  std::vector<float> nb;  // (offset + w) of the norm at hand
  const float* in = a.x.data();
  if (s.pre_norm) {
    rmsnorm(a.x.data(), norm_w(*s.pre_norm, wp(w, sp.pre), D, nb), a.xn.data(), a.rrms.data(), N, D, s.pre_norm->eps);
    in = a.xn.data();
  }
  float* branch = s.post_norm ? a.o.data() : out;
  switch (s.kind) {
    case models::StepKind::kAttention:
      attention_forward(sp, a, w, in, B, T, branch);
      break;
    case models::StepKind::kFfn:
      ffn_forward(sp, a, w, in, N, branch);
      break;
    case models::StepKind::kLinearAttention: {
      std::vector<float> gb;
      const DeltaNetAdapters ad = deltanet_adapters(sp, a, N, nullptr);
      a.dn.forward(s.deltanet, deltanet_weights(sp, w, gb), in, B, T, D, branch, lora_ ? &ad : nullptr);
      break;
    }
  }
  if (s.post_norm)
    rmsnorm(a.o.data(), norm_w(*s.post_norm, wp(w, sp.post), D, nb), out, a.rrmso.data(), N, D, s.post_norm->eps);
  if (s.residual_scale == 1.0f)
    add_into(out, out, a.x.data(), N * D);
  else
    parallel_rows(N * D, N * D, [&](int64_t i0, int64_t i1) {
      for (int64_t j = i0; j < i1; ++j) out[j] = a.x[size_t(j)] + s.residual_scale * out[j];
    });
}

// in [N, D] -> out [N, D] = attention(in) · Woᵀ; q/k/v, the q/k norms' inputs and the probabilities kept in a.
void CpuModel::attention_forward(const StepPlan& sp, StepActs& a, const float* w, const float* in, int64_t B, int64_t T,
                                 float* out) {
  const models::AttnDesc& at = sp.s->attn;
  const int64_t N = B * T, D = d_.dim, hd = at.head_dim, QD = at.n_heads * hd, KD = at.n_kv_heads * hd;
  if (at.output_gate) {  // wq's rows per head [q | gate]: split into a.q and a.gate
    std::vector<float> qg(size_t(N * 2 * QD));
    project(sp, a, LoraTarget::kQ, in, w, sp.wq, qg.data(), N, D, 2 * QD);
    for (int64_t r = 0; r < N * at.n_heads; ++r) {
      std::memcpy(a.q.data() + r * hd, qg.data() + 2 * r * hd, size_t(hd) * 4);
      std::memcpy(a.gate.data() + r * hd, qg.data() + (2 * r + 1) * hd, size_t(hd) * 4);
    }
  } else {
    project(sp, a, LoraTarget::kQ, in, w, sp.wq, a.q.data(), N, D, QD);
  }
  project(sp, a, LoraTarget::kK, in, w, sp.wk, a.k.data(), N, D, KD);
  project(sp, a, LoraTarget::kV, in, w, sp.wv, a.v.data(), N, D, KD);
  std::vector<float> nb;
  if (at.q_norm) {  // every head row [hd] of the projection (a.qp) normed back into a.q
    a.qp.swap(a.q);
    rmsnorm(a.qp.data(), norm_w(*at.q_norm, wp(w, sp.qn), hd, nb), a.q.data(), a.rrmsq.data(), N * at.n_heads, hd,
            at.q_norm->eps);
  }
  if (at.k_norm) {
    a.kp.swap(a.k);
    rmsnorm(a.kp.data(), norm_w(*at.k_norm, wp(w, sp.kn), hd, nb), a.k.data(), a.rrmsk.data(), N * at.n_kv_heads, hd,
            at.k_norm->eps);
  }
  rope(sp, a.q.data(), N, at.n_heads, T, 1.0f);
  rope(sp, a.k.data(), N, at.n_kv_heads, T, 1.0f);
  scores_forward(at, a, B, T);
  if (at.output_gate)  // o = att * sigmoid(gate)
    parallel_rows(N * QD, N * QD, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) a.gated[size_t(i)] = a.att[size_t(i)] * sigmoidf(a.gate[size_t(i)]);
    });
  project(sp, a, LoraTarget::kO, at.output_gate ? a.gated.data() : a.att.data(), w, sp.wo, out, N, QD, D);
}

// in [N, D] -> out [N, D] = (act(in W_inᵀ) ⊙ in W_upᵀ) W_outᵀ.
void CpuModel::ffn_forward(const StepPlan& sp, StepActs& a, const float* w, const float* in, int64_t N, float* out) {
  const int64_t D = d_.dim, F = sp.s->ffn.hidden;
  const bool geglu = sp.s->ffn.activation == models::Activation::kGeluTanhGated;
  project(sp, a, LoraTarget::kGate, in, w, sp.w_in, a.h1.data(), N, D, F);
  project(sp, a, LoraTarget::kUp, in, w, sp.w_up, a.h3.data(), N, D, F);
  parallel_rows(N * F, N * F, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float h1 = a.h1[size_t(i)];
      a.g[size_t(i)] = (geglu ? gelu_tanh(h1) : h1 * sigmoidf(h1)) * a.h3[size_t(i)];
    }
  });
  project(sp, a, LoraTarget::kDown, a.g.data(), w, sp.w_out, out, N, F, D);
}

void CpuModel::forward(const float* w, const int32_t* tokens, int64_t B, int64_t T, int64_t row_stride) {
  prepare(B, T);
  const int64_t D = d_.dim, V = d_.vocab_size;
  const models::Tensor* typed_emb = base_ ? base_->typed(emb_off_) : nullptr;
  const float* emb = typed_emb ? nullptr : wp(w, emb_off_);
  const float scale = d_.embed.scale;
  float* x0 = steps_.empty() ? xL_.data() : acts_[0].x.data();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = tokens[b * row_stride + t];
      if (id < 0 || id >= V) fail("train", "token id ", id, " out of range for vocab_size ", V);
      inputs_[size_t(b * T + t)] = id;
      float* x = x0 + (b * T + t) * D;
      if (typed_emb)
        typed_emb->to_f32(int64_t(id) * D, D, x);  // one row: whole blocks of its type
      else
        std::memcpy(x, emb + int64_t(id) * D, size_t(D) * 4);
      if (scale != 1.0f)
        for (int64_t i = 0; i < D; ++i) x[i] *= scale;
    }
  for (size_t i = 0; i < steps_.size(); ++i)
    step_forward(w, i, B, T, i + 1 < steps_.size() ? acts_[i + 1].x.data() : xL_.data());
  head_forward(w, xL_.data(), B * T);
}

void CpuModel::head_forward(const float* w, const float* xL, int64_t N) {
  const int64_t D = d_.dim, V = d_.vocab_size;
  std::vector<float> nb;
  rmsnorm(xL, norm_w(d_.head.norm, wp(w, norm_off_), D, nb), xf_.data(), rrmsf_.data(), N, D, d_.head.norm.eps);
  base_wt(w, out_off_, xf_.data(), logits_.data(), N, D, V);
  const float cap = d_.head.softcap;
  if (cap > 0.0f)  // logits = cap * tanh(z / cap); capped_ keeps tanh(z / cap) for the backward
    parallel_rows(N * V, N * V, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        capped_[size_t(i)] = std::tanh(logits_[size_t(i)] / cap);
        logits_[size_t(i)] = cap * capped_[size_t(i)];
      }
    });
}

// logits_ holds dlogits; dxL = final-norm backward of dlogits · Wout (final norm grads += ...).
void CpuModel::head_backward(const float* w, const float* xL, float* gr, float* dxL, int64_t N) {
  const int64_t D = d_.dim, V = d_.vocab_size;
  base_dx(w, out_off_, logits_.data(), dxf_.data(), N, D, V, false);
  std::vector<float> nb;
  rmsnorm_backward(xL, norm_w(d_.head.norm, wp(w, norm_off_), D, nb), rrmsf_.data(), dxf_.data(), dxL,
                   base_grad(gr, norm_off_), N, D, false);
}

double CpuModel::head_forward_backward(const float* w, const Batch& b, const float* xL, float grad_scale, float* grads,
                                       float* dxL) {
  if (b.B <= 0 || b.T <= 0 || int64_t(b.tokens.size()) != b.B * (b.T + 1))
    fail("train", "batch of ", b.tokens.size(), " tokens does not hold B=", b.B, " x (T+1)=", b.T + 1);
  prepare_head(b.B, b.T);
  head_forward(w, xL, b.B * b.T);
  const double loss = cross_entropy(b, grad_scale, true);
  head_backward(w, xL, grads, dxL, b.B * b.T);
  return loss;
}

void CpuModel::head_classifier_dw(float* grads) {
  if (lora_) return;  // the base is frozen
  matmul_dw(logits_.data(), xf_.data(), layout_.output(grads), head_B_ * head_T_, d_.dim, d_.vocab_size);
}

double CpuModel::cross_entropy(const Batch& b, float grad_scale, bool want_grad) {
  const int32_t* tokens = b.tokens.data();
  const int64_t B = b.B, T = b.T, N = B * T, V = d_.vocab_size;
  const uint8_t* mask = b.mask.empty() ? nullptr : b.mask.data();
  if (mask && int64_t(b.mask.size()) != N) fail("train", "batch mask of ", b.mask.size(), " targets for B*T = ", N);
  int64_t counted = N;
  if (mask) counted = std::count_if(b.mask.begin(), b.mask.end(), [](uint8_t m) { return m != 0; });
  std::vector<double> row_loss(static_cast<size_t>(N));
  const float gs = grad_scale / float(std::max<int64_t>(counted, 1));
  parallel_rows(N, N * V, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int32_t tgt = tokens[(n / T) * (T + 1) + (n % T) + 1];
      float* row = logits_.data() + n * V;
      if (mask && !mask[n]) {  // not a target: no loss, no gradient
        row_loss[size_t(n)] = 0;
        if (want_grad) std::fill(row, row + V, 0.0f);
        continue;
      }
      float mx = row[0];
      for (int64_t j = 1; j < V; ++j) mx = std::max(mx, row[j]);
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j] - mx));
      const double tl = (tgt >= 0 && tgt < V) ? double(row[tgt]) : 0.0;
      row_loss[size_t(n)] = std::log(sum) + mx - tl;
      if (want_grad) {
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < V; ++j) row[j] = std::exp(row[j] - mx) * inv * gs;
        if (tgt >= 0 && tgt < V) row[tgt] -= gs;
        if (d_.head.softcap > 0.0f)  // d(cap tanh(z / cap))/dz = 1 - tanh²
          for (int64_t j = 0; j < V; ++j) row[j] *= 1.0f - capped_[size_t(n * V + j)] * capped_[size_t(n * V + j)];
      }
    }
  });
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tgt = tokens[(n / T) * (T + 1) + (n % T) + 1];
    if (tgt < 0 || tgt >= V) fail("train", "target token id ", tgt, " out of range for vocab_size ", V);
  }
  double total = 0;
  for (double v : row_loss) total += v;
  return counted > 0 ? total / double(counted) : 0.0;
}

double CpuModel::loss(const float* w, const Batch& b) {
  forward(w, b.tokens.data(), b.B, b.T, b.T + 1);
  return cross_entropy(b, 0.0f, false);
}

void CpuModel::last_logits(const float* w, const int32_t* tokens, int64_t n, std::vector<float>* out) {
  forward(w, tokens, 1, n, n);
  const int64_t V = d_.vocab_size;
  out->assign(logits_.begin() + (n - 1) * V, logits_.begin() + n * V);
}

// dout [N, D] = d(loss)/d(the ffn's output) -> din [N, D] = d(loss)/d(in) (overwritten); dW into g.
void CpuModel::ffn_backward(const StepPlan& sp, StepActs& a, const float* w, float* g, const float* dout,
                            const float* in, int64_t N, float* din, double* tdw) {
  const int64_t D = d_.dim, F = sp.s->ffn.hidden;
  const bool geglu = sp.s->ffn.activation == models::Activation::kGeluTanhGated;
  std::vector<float> dg(size_t(N * F)), dh3(size_t(N * F));
  project_backward(sp, a, LoraTarget::kDown, dout, a.g.data(), w, g, sp.w_out, dg.data(), N, F, D, false, tdw);
  parallel_rows(N * F, N * F, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float h1 = a.h1[size_t(i)], d = dg[size_t(i)];
      if (geglu) {  // gate = gelu(h1) * h3
        dh3[size_t(i)] = d * gelu_tanh(h1);
        dg[size_t(i)] = d * a.h3[size_t(i)] * gelu_tanh_grad(h1);  // dh1
        continue;
      }
      const float s = sigmoidf(h1);  // gate = silu(h1) * h3
      dh3[size_t(i)] = d * h1 * s;
      dg[size_t(i)] = d * a.h3[size_t(i)] * s * (1.0f + h1 * (1.0f - s));  // dh1
    }
  });
  project_backward(sp, a, LoraTarget::kGate, dg.data(), in, w, g, sp.w_in, din, N, D, F, false, tdw);
  project_backward(sp, a, LoraTarget::kUp, dh3.data(), in, w, g, sp.w_up, din, N, D, F, true, tdw);
}

// dout [N, D] = d(loss)/d(the attention's output) -> din [N, D] = d(loss)/d(in) (overwritten); dW into g.
void CpuModel::attention_backward(const StepPlan& sp, StepActs& a, const float* w, float* g, const float* dout,
                                  int64_t B, int64_t T, float* din, double* tdw) {
  const models::AttnDesc& at = sp.s->attn;
  const int64_t N = B * T, D = d_.dim, hd = at.head_dim, QD = at.n_heads * hd, KD = at.n_kv_heads * hd;
  const float* in = sp.s->pre_norm ? a.xn.data() : a.x.data();
  std::vector<float> datt(size_t(N * QD)), dq(size_t(N * QD)), dk(size_t(N * KD)), dv(size_t(N * KD)), nb;
  project_backward(sp, a, LoraTarget::kO, dout, at.output_gate ? a.gated.data() : a.att.data(), w, g, sp.wo,
                   datt.data(), N, QD, D, false, tdw);
  std::vector<float> dgate;
  if (at.output_gate) {  // d(att * s) : datt * s into datt, datt * att * s (1 - s) into dgate
    dgate.resize(size_t(N * QD));
    parallel_rows(N * QD, N * QD, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float s = sigmoidf(a.gate[size_t(i)]), d = datt[size_t(i)];
        dgate[size_t(i)] = d * a.att[size_t(i)] * s * (1.0f - s);
        datt[size_t(i)] = d * s;
      }
    });
  }
  scores_backward(at, a, B, T, datt.data(), dq.data(), dk.data(), dv.data());
  rope(sp, dq.data(), N, at.n_heads, T, -1.0f);
  rope(sp, dk.data(), N, at.n_kv_heads, T, -1.0f);
  if (at.q_norm) {  // gradients w.r.t. the normed q -> w.r.t. the projection
    std::vector<float> d(dq.size());
    rmsnorm_backward(a.qp.data(), norm_w(*at.q_norm, wp(w, sp.qn), hd, nb), a.rrmsq.data(), dq.data(), d.data(),
                     base_grad(g, sp.qn), N * at.n_heads, hd, false);
    dq.swap(d);
  }
  if (at.k_norm) {
    std::vector<float> d(dk.size());
    rmsnorm_backward(a.kp.data(), norm_w(*at.k_norm, wp(w, sp.kn), hd, nb), a.rrmsk.data(), dk.data(), d.data(),
                     base_grad(g, sp.kn), N * at.n_kv_heads, hd, false);
    dk.swap(d);
  }
  if (at.output_gate) {  // back into wq's per-head [q | gate] rows
    std::vector<float> dqg(size_t(N * 2 * QD));
    for (int64_t r = 0; r < N * at.n_heads; ++r) {
      std::memcpy(dqg.data() + 2 * r * hd, dq.data() + r * hd, size_t(hd) * 4);
      std::memcpy(dqg.data() + (2 * r + 1) * hd, dgate.data() + r * hd, size_t(hd) * 4);
    }
    project_backward(sp, a, LoraTarget::kQ, dqg.data(), in, w, g, sp.wq, din, N, D, 2 * QD, false, tdw);
  } else {
    project_backward(sp, a, LoraTarget::kQ, dq.data(), in, w, g, sp.wq, din, N, D, QD, false, tdw);
  }
  project_backward(sp, a, LoraTarget::kK, dk.data(), in, w, g, sp.wk, din, N, D, KD, true, tdw);
  project_backward(sp, a, LoraTarget::kV, dv.data(), in, w, g, sp.wv, din, N, D, KD, true, tdw);
}

// dx [N, D]: d(loss)/d(step i's output) on entry, d(loss)/d(its input x) on exit (the residual path plus the
// branch's); weight gradients added into g.
void CpuModel::step_backward(const float* w, float* g, size_t i, int64_t B, int64_t T, float* dx, double* tdw,
                             bool need_dx) {
  const StepPlan& sp = steps_[i];
  const models::Step& s = *sp.s;
  StepActs& a = acts_[i];
  const int64_t N = B * T, D = d_.dim;
  std::vector<float> nb, scaled, dpost, din(need_dx ? size_t(N * D) : 0);
  float* dbranch = need_dx ? din.data() : nullptr;  // d(loss)/d(the branch's input), or not computed
  const float* db = dx;                             // d(loss)/d(the branch) = residual_scale * dx
  if (s.residual_scale != 1.0f) {
    scaled.resize(size_t(N * D));
    for (int64_t j = 0; j < N * D; ++j) scaled[size_t(j)] = s.residual_scale * dx[j];
    db = scaled.data();
  }
  if (s.post_norm) {  // b = rmsnorm(o) * (offset + post_norm)
    dpost.resize(size_t(N * D));
    rmsnorm_backward(a.o.data(), norm_w(*s.post_norm, wp(w, sp.post), D, nb), a.rrmso.data(), db, dpost.data(),
                     base_grad(g, sp.post), N, D, false);
    db = dpost.data();
  }
  const float* in = s.pre_norm ? a.xn.data() : a.x.data();
  switch (s.kind) {
    case models::StepKind::kAttention:
      attention_backward(sp, a, w, g, db, B, T, dbranch, tdw);
      break;
    case models::StepKind::kFfn:
      ffn_backward(sp, a, w, g, db, in, N, dbranch, tdw);
      break;
    case models::StepKind::kLinearAttention: {
      std::vector<float> gb;
      const DeltaNetGrads dg = deltanet_grads(sp, g);
      const DeltaNetAdapters ad = deltanet_adapters(sp, a, N, tdw);
      a.dn.backward(s.deltanet, deltanet_weights(sp, w, gb), lora_ ? nullptr : &dg, in, db, B, T, D, dbranch, tdw,
                    lora_ ? &ad : nullptr);
      break;
    }
  }
  if (!need_dx) return;
  if (s.pre_norm)
    rmsnorm_backward(a.x.data(), norm_w(*s.pre_norm, wp(w, sp.pre), D, nb), a.rrms.data(), din.data(), dx,
                     base_grad(g, sp.pre), N, D, true);
  else
    add_into(dx, dx, din.data(), N * D);
}

// Whether a step of kind s.kind runs the projection a target adapts.
bool CpuModel::step_has_target(const models::Step& s, LoraTarget t) {
  switch (s.kind) {
    case models::StepKind::kAttention:
      return t == LoraTarget::kQ || t == LoraTarget::kK || t == LoraTarget::kV || t == LoraTarget::kO;
    case models::StepKind::kFfn:
      return t == LoraTarget::kGate || t == LoraTarget::kUp || t == LoraTarget::kDown;
    case models::StepKind::kLinearAttention:
      return t == LoraTarget::kLinQkv || t == LoraTarget::kLinZ || t == LoraTarget::kLinB || t == LoraTarget::kLinA ||
             t == LoraTarget::kLinOut;
  }
  return false;
}

size_t CpuModel::lowest_adapted_step() const {
  for (size_t i = 0; i < steps_.size(); ++i)
    for (int t = 0; t < kLoraTargets; ++t)
      if (lora_->layout->slot(steps_[i].layer, LoraTarget(t)) >= 0 && step_has_target(*steps_[i].s, LoraTarget(t)))
        return i;
  return steps_.size();
}

double CpuModel::forward_backward(const float* w, const Batch& b, float grad_scale, float* gr, CpuTimes* t) {
  if (base_ && !lora_) fail("train", "a frozen base (CpuModel::set_base) trains adapters only: set_lora first");
  if (b.B <= 0 || b.T <= 0 || int64_t(b.tokens.size()) != b.B * (b.T + 1))
    fail("train", "batch of ", b.tokens.size(), " tokens does not hold B=", b.B, " x (T+1)=", b.T + 1);
  double t0 = now_ms();
  forward(w, b.tokens.data(), b.B, b.T, b.T + 1);
  double t1 = now_ms();
  const double loss = cross_entropy(b, grad_scale, true);
  const int64_t N = b.B * b.T, D = d_.dim;
  double t2 = now_ms();
  head_classifier_dw(gr);
  double t3 = now_ms();
  std::vector<float> dxl(size_t(N * D));
  head_backward(w, xL_.data(), gr, dxl.data(), N);
  if (grads_final_ && !lora_) grads_final_(layout_.final_norm(gr) - gr);
  double tdw = 0;
  // LoRA: the steps below the lowest adapter have nothing to compute, and its own dx is not needed.
  const size_t lowest = lora_ ? lowest_adapted_step() : 0;
  for (int64_t l = int64_t(layer_first_.size()) - 1; l >= 0; --l) {
    const size_t end = size_t(l) + 1 < layer_first_.size() ? size_t(layer_first_[size_t(l) + 1]) : steps_.size();
    for (size_t i = end; i-- > std::max(size_t(layer_first_[size_t(l)]), lowest);)
      step_backward(w, gr, i, b.B, b.T, dxl.data(), &tdw, i > lowest || !lora_);
    if (grads_final_ && !lora_) grads_final_(layer_grads_[size_t(l)]);
  }
  float* demb = lora_ ? nullptr : layout_.embedding(gr);
  for (int64_t n = 0; n < N && demb; ++n) {
    float* row = demb + int64_t(inputs_[size_t(n)]) * D;
    const float* src = dxl.data() + n * D;
    for (int64_t i = 0; i < D; ++i) row[i] += src[i] * d_.embed.scale;
  }
  if (t) {
    t->fwd += t1 - t0;
    t->cls += t3 - t1;
    t->dw += t3 - t2 + tdw;
    t->bwd += now_ms() - t3;
  }
  return loss;
}

}  // namespace anelab::train
