// Linear ops on the GEMM of gemm.cpp: conv (direct 1x1 or im2col, one batched GEMM over (batch,
// group), bias and fp16 rounding fused), batched matmul (views read in place when a matrix dim has unit
// stride) and scaled_dot_product_attention (two GEMMs around a softmax).
#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/emulator/lower.h"

namespace anelab::emu {

using mil::DType;
using mil::Shape;

namespace {

// ---- step functions --------------------------------------------------------------------------------------
// in: x [N, Cin, H, W], weight [Cout, Cin/groups, kh, kw], (bias [Cout]); scratch: im2col columns.
void k_conv(const Step& s, const ExecCtx& ctx) {
  const ConvArgs& p = step_args<ConvArgs>(s);
  const int64_t N = p.n, Cin = p.cin, H = p.h, W = p.w, kh = p.kh, kw = p.kw;
  const int64_t sh = p.sh, sw = p.sw, dh = p.dh, dw = p.dw, pt = p.pt, pl = p.pl, Ho = p.ho, Wo = p.wo;
  const bool direct = p.direct, has_bias = p.has_bias;
  const float* x = s.in[0];
  const float* cols = x;
  if (!direct) {
    // cols[(n*Cin + c)*kh*kw + ki*kw + kj][oh*Wo + ow] = x[n, c, oh*sh - pt + ki*dh, ow*sw - pl + kj*dw]
    const int64_t rows = N * Cin * kh * kw;
    float* col = s.scratch;
    par_for(ctx, rows, rows * Ho * Wo > 32768, [&](int64_t row) {
      const int64_t kj = row % kw, ki = (row / kw) % kh, nc = row / (kw * kh);
      const float* xp = x + nc * H * W;
      float* dst = col + row * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t ih = oh * sh - pt + ki * dh;
        float* d = dst + oh * Wo;
        if (ih < 0 || ih >= H) {
          std::fill(d, d + Wo, 0.0f);
          continue;
        }
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t iw = ow * sw - pl + kj * dw;
          d[ow] = (iw >= 0 && iw < W) ? xp[ih * W + iw] : 0.0f;
        }
      }
    });
    cols = col;
  }
  run_gemm(s.gemms[0], s.in[1], cols, s.out, ctx, has_bias ? s.in[2] : nullptr);  // bias + rounding fused
}

void k_matmul(const Step& s, const ExecCtx& ctx) { run_gemm(s.gemms[0], s.in[0], s.in[1], s.out, ctx); }

// scores = fp16(Q K^T * (1/sqrt(E))) per batch; P = fp16(softmax_fp32(scores)); out = fp16(P V).
// scratch: [batch, L, S].
void k_sdpa(const Step& s, const ExecCtx& ctx) {
  const SdpaArgs& p = step_args<SdpaArgs>(s);
  run_gemm(s.gemms[0], s.in[0], s.in[1], s.scratch, ctx);  // alpha = scale, fp16 rounding fused
  softmax_rows(s.scratch, p.batch * p.l, p.s, ctx);
  run_gemm(s.gemms[1], s.scratch, s.in[2], s.out, ctx);
}

// ---- lowering -------------------------------------------------------------------------------------
// conv as one batched GEMM per (batch, group): weight [Cout/G, K] x columns [K, Ho*Wo].
void lower_conv(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const auto& g = std::get<mil::ConvGeometry>(r.params);
  const ValueInfo& x = l.value(op, "x");
  const ValueInfo& w = l.value(op, "weight");
  const ValueInfo* bias = op.arg("bias") ? &l.value(op, "bias") : nullptr;
  const Shape &xs = x.type.shape, &ws = w.type.shape;
  ConvArgs c;
  c.n = xs[0], c.cin = xs[1], c.h = xs[2], c.w = xs[3], c.kh = ws[2], c.kw = ws[3];
  c.sh = g.stride[0], c.sw = g.stride[1], c.dh = g.dilation[0], c.dw = g.dilation[1];
  c.pt = g.pad[0], c.pl = g.pad[2], c.ho = g.out_h, c.wo = g.out_w;
  c.direct = c.kh == 1 && c.kw == 1 && c.sh == 1 && c.sw == 1 && g.pad[0] == 0 && g.pad[1] == 0 && g.pad[2] == 0 &&
             g.pad[3] == 0;
  c.has_bias = bias != nullptr;
  const int64_t G = g.groups, cout = ws[0];
  const int64_t hw = c.ho * c.wo, cin_g = c.cin / G, cout_g = cout / G, K = cin_g * c.kh * c.kw;
  GemmPlan gp;
  gp.m = cout_g, gp.n = hw, gp.k = K, gp.lda = K, gp.ldb = hw, gp.ldc = hw;
  gp.round_fp16 = op.type.dtype == DType::kFp16;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t gi = 0; gi < G; ++gi) {
      gp.a_off.push_back(gi * cout_g * K);
      gp.b_off.push_back(c.direct ? n * c.cin * c.h * c.w + gi * cin_g * c.h * c.w
                                  : (n * c.cin + gi * cin_g) * c.kh * c.kw * hw);
      gp.c_off.push_back(n * cout * hw + gi * cout_g * hw);
      if (bias) gp.bias_off.push_back(gi * cout_g);
    }
  plan_gemm(gp);
  if (w.ref.kind == Ref::kConst) prepack_gemm_a(gp, l.plan().ptr(w.ref));  // weights packed once
  std::vector<const ValueInfo*> ins{&x, &w};
  if (bias) ins.push_back(bias);
  const size_t scratch = c.direct ? 0 : static_cast<size_t>(c.n * c.cin * c.kh * c.kw * hw);
  Step& s = l.new_step(op, k_conv, ins, c);
  s.gemms.push_back(std::move(gp));
  if (scratch) l.set_scratch(s, scratch);
}

// A matmul operand read in place: its last two dims [R, C] must have unit stride in one of them.
// Gives the GEMM transpose flag (the op's flag, flipped for a column-major view) and leading dimension.
bool gemm_operand(const ValueInfo& v, bool op_t, bool* t, int64_t* ld) {
  const Shape& sh = v.type.shape;
  const auto st = strides_of(v);
  const size_t r = sh.size();
  const int64_t R = sh[r - 2], C = sh[r - 1], sr = st[r - 2], sc = st[r - 1];
  if (sc == 1 || C == 1) {
    *t = op_t, *ld = R == 1 ? std::max<int64_t>(C, 1) : sr;
    return *ld >= 1;
  }
  if (sr == 1 || R == 1) {
    *t = !op_t, *ld = sc;
    return true;
  }
  return false;
}

void lower_matmul(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const auto& p = std::get<mil::MatmulParams>(r.params);
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  // views whose matrix dims have a unit stride are read in place; others are materialised
  if (!gemm_operand(l.view(op, "x"), p.transpose_x, &ta, &lda))
    gemm_operand(l.value(op, "x"), p.transpose_x, &ta, &lda);
  if (!gemm_operand(l.view(op, "y"), p.transpose_y, &tb, &ldb))
    gemm_operand(l.value(op, "y"), p.transpose_y, &tb, &ldb);
  const ValueInfo& x = l.view(op, "x");
  const ValueInfo& y = l.view(op, "y");
  const Shape &xs = x.type.shape, &ys = y.type.shape, &ob = p.batch;
  GemmPlan g;
  g.m = p.m, g.n = p.n, g.k = p.k, g.ta = ta, g.tb = tb, g.lda = lda, g.ldb = ldb, g.ldc = p.n;
  g.round_fp16 = op.type.dtype == DType::kFp16;
  const auto xst = strides_of(x), yst = strides_of(y);  // element strides; batch dims broadcast with 0
  const auto sx = bcast_strides(Shape(xs.begin(), xs.end() - 2), std::vector<int64_t>(xst.begin(), xst.end() - 2), ob);
  const auto sy = bcast_strides(Shape(ys.begin(), ys.end() - 2), std::vector<int64_t>(yst.begin(), yst.end() - 2), ob);
  const int64_t nb = prod(ob, 0, ob.size());
  for (int64_t b = 0; b < nb; ++b) {
    int64_t rem = b, ox = 0, oy = 0;
    for (int d = static_cast<int>(ob.size()) - 1; d >= 0; --d) {
      const int64_t i = rem % ob[static_cast<size_t>(d)];
      rem /= ob[static_cast<size_t>(d)];
      ox += i * sx[static_cast<size_t>(d)];
      oy += i * sy[static_cast<size_t>(d)];
    }
    g.a_off.push_back(ox);
    g.b_off.push_back(oy);
    g.c_off.push_back(b * p.m * p.n);
  }
  plan_gemm(g);
  if (x.ref.kind == Ref::kConst) prepack_gemm_a(g, l.plan().ptr(x.ref));  // const A packed once
  l.new_step(op, k_matmul, {&x, &y}).gemms.push_back(std::move(g));
}

void lower_sdpa(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const auto& p = std::get<mil::SdpaParams>(r.params);
  ANELAB_CHECK(!p.has_mask, "emulator", l.where(op),
               ": attn_mask is ignored by the ANE (digest §2.6.4); use matmul + add(mask) + softmax + matmul");
  const ValueInfo& q = l.value(op, "query");
  const ValueInfo& k = l.value(op, "key");
  const ValueInfo& v = l.value(op, "value");
  const int64_t B = prod(p.batch, 0, p.batch.size()), L = p.l, E = p.e, S = p.s, Ev = p.ev;
  GemmPlan g1, g2;
  g1.m = L, g1.n = S, g1.k = E, g1.tb = true, g1.lda = E, g1.ldb = E, g1.ldc = S;
  g1.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  g2.m = L, g2.n = Ev, g2.k = S, g2.lda = S, g2.ldb = Ev, g2.ldc = Ev;
  for (int64_t b = 0; b < B; ++b) {
    g1.a_off.push_back(b * L * E), g1.b_off.push_back(b * S * E), g1.c_off.push_back(b * L * S);
    g2.a_off.push_back(b * L * S), g2.b_off.push_back(b * S * Ev), g2.c_off.push_back(b * L * Ev);
  }
  plan_gemm(g1);
  plan_gemm(g2);
  Step& s = l.new_step(op, k_sdpa, {&q, &k, &v}, SdpaArgs{B, L, S});
  s.gemms.push_back(std::move(g1));
  s.gemms.push_back(std::move(g2));
  l.set_scratch(s, static_cast<size_t>(B * L * S));
}

constexpr LowerRule kLinearRules[] = {
    {"conv", lower_conv},
    {"matmul", lower_matmul},
    {"scaled_dot_product_attention", lower_sdpa},
};

}  // namespace

std::span<const LowerRule> linear_rules() { return kLinearRules; }

}  // namespace anelab::emu
