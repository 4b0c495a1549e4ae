// conv lowering: general 2-D convolution as (im2col +) one batched GEMM over (batch, group).
#include <algorithm>

#include "framework/core/error.h"
#include "framework/emulator/lower_ops.h"

namespace anelab::emu {

using mil::DType;
using mil::Shape;

namespace {
struct ConvGeom {
  int64_t N, Cin, H, W, Cout, kh, kw, G, sh, sw, dh, dw, pt, pb, pl, pr, Ho, Wo;
};

// MIL pad_type "same": total padding so that out = ceil(in / stride); the extra pixel goes at the end
// ("same") or at the beginning ("same_lower").
void same_pad(int64_t in, int64_t k, int64_t s, int64_t d, bool lower, int64_t* before, int64_t* after) {
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
  *before = lower ? (total + 1) / 2 : total / 2;
  *after = total - *before;
}
}  // namespace

void Lowerer::lower_conv(const mil::Operation& op) {
  const ValueInfo& x = value(op, "x");
  const ValueInfo& w = value(op, "weight");
  const ValueInfo* bias = op.arg("bias") ? &value(op, "bias") : nullptr;
  const Shape &xs = x.type.shape, &ws = w.type.shape;
  const bool one_d = xs.size() == 3;
  ANELAB_CHECK((xs.size() == 4 || one_d) && ws.size() == xs.size(), "emulator", where(op),
               ": x ", x.type.str(), " and weight ", w.type.str(), " must both be rank 4 (or both rank 3)");
  ConvGeom c{};
  c.N = xs[0], c.Cin = xs[1], c.H = one_d ? 1 : xs[2], c.W = xs.back();
  c.Cout = ws[0], c.kh = one_d ? 1 : ws[2], c.kw = ws.back();
  c.G = lit_int(op, "groups", 1);
  const auto strides = lit_ints(op, "strides", one_d ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 1});
  const auto dil = lit_ints(op, "dilations", one_d ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 1});
  const size_t nsp = one_d ? 1 : 2;
  ANELAB_CHECK(strides.size() == nsp && dil.size() == nsp, "emulator", where(op), ": strides/dilations need ", nsp,
               " entries");
  c.sh = one_d ? 1 : strides[0], c.sw = strides.back(), c.dh = one_d ? 1 : dil[0], c.dw = dil.back();
  ANELAB_CHECK(c.G >= 1 && c.Cin % c.G == 0 && c.Cout % c.G == 0 && ws[1] == c.Cin / c.G, "emulator", where(op),
               ": groups=", c.G, " does not fit x ", x.type.str(), " and weight ", w.type.str(),
               " (weight must be [Cout, Cin/groups, kh, kw])");
  ANELAB_CHECK(c.sh > 0 && c.sw > 0 && c.dh > 0 && c.dw > 0, "emulator", where(op), ": strides/dilations must be > 0");
  const std::string pt = lit_str(op, "pad_type", "valid");
  if (pt == "custom") {
    const auto pad = lit_ints(op, "pad", std::vector<int64_t>(2 * nsp, 0));
    ANELAB_CHECK(pad.size() == 2 * nsp, "emulator", where(op), ": pad needs ", 2 * nsp, " entries");
    c.pt = one_d ? 0 : pad[0], c.pb = one_d ? 0 : pad[1], c.pl = pad[2 * nsp - 2], c.pr = pad[2 * nsp - 1];
  } else if (pt == "same" || pt == "same_lower") {
    same_pad(c.H, c.kh, c.sh, c.dh, pt == "same_lower", &c.pt, &c.pb);
    same_pad(c.W, c.kw, c.sw, c.dw, pt == "same_lower", &c.pl, &c.pr);
  } else {
    ANELAB_CHECK(pt == "valid", "emulator", where(op), ": pad_type '", pt, "' (expected valid, same, same_lower, custom)");
  }
  ANELAB_CHECK(c.pt >= 0 && c.pb >= 0 && c.pl >= 0 && c.pr >= 0, "emulator", where(op), ": negative padding");
  c.Ho = (c.H + c.pt + c.pb - ((c.kh - 1) * c.dh + 1)) / c.sh + 1;
  c.Wo = (c.W + c.pl + c.pr - ((c.kw - 1) * c.dw + 1)) / c.sw + 1;
  ANELAB_CHECK(c.Ho > 0 && c.Wo > 0, "emulator", where(op), ": kernel larger than the padded input");
  Shape out = one_d ? Shape{c.N, c.Cout, c.Wo} : Shape{c.N, c.Cout, c.Ho, c.Wo};
  expect_shape(op, out);
  if (bias)
    ANELAB_CHECK(bias->type.numel() == c.Cout, "emulator", where(op), ": bias ", bias->type.str(), " needs ", c.Cout,
                 " elements");
  const bool direct = c.kh == 1 && c.kw == 1 && c.sh == 1 && c.sw == 1 && c.pt == 0 && c.pb == 0 && c.pl == 0 &&
                      c.pr == 0;
  const int64_t hw = c.Ho * c.Wo, cin_g = c.Cin / c.G, cout_g = c.Cout / c.G, K = cin_g * c.kh * c.kw;
  GemmPlan g;
  g.m = cout_g, g.n = hw, g.k = K, g.lda = K, g.ldb = hw, g.ldc = hw;
  g.round_fp16 = op.type.dtype == DType::kFp16;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t gi = 0; gi < c.G; ++gi) {
      g.a_off.push_back(gi * cout_g * K);
      g.b_off.push_back(direct ? n * c.Cin * c.H * c.W + gi * cin_g * c.H * c.W : (n * c.Cin + gi * cin_g) * c.kh * c.kw * hw);
      g.c_off.push_back(n * c.Cout * hw + gi * cout_g * hw);
      if (bias) g.bias_off.push_back(gi * cout_g);
    }
  plan_gemm(g);
  if (w.ref.kind == Ref::kConst) prepack_gemm_a(g, plan_.ptr(w.ref));  // weights packed once
  std::vector<const ValueInfo*> ins{&x, &w};
  if (bias) ins.push_back(bias);
  Step& s = new_step(op, k_conv, ins);
  s.iv = {c.N, c.Cin, c.H, c.W, c.Cout, c.kh, c.kw, c.G, c.sh, c.sw, c.dh, c.dw, c.pt, c.pl, c.Ho, c.Wo,
          direct ? 1 : 0, bias ? 1 : 0};
  s.gemms.push_back(std::move(g));
  if (!direct) set_scratch(s, static_cast<size_t>(c.N * c.Cin * c.kh * c.kw * hw));
}

}  // namespace anelab::emu
