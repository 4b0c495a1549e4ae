// Float64 CPU reference of one Llama layer (forward + analytic backward), written independently of the
// MIL kernels for the kernel tests. Channel-first [C, S] arrays, weights [out, in] row-major.
#pragma once
#include <vector>

#include "framework/kernels/train.h"

namespace anelab::test {

using F64v = std::vector<double>;

struct RefWeights {
  F64v wq, wk, wv, wo, w1, w2, w3, rms_att, rms_ffn;
  F64v& get(const std::string& n);
};

struct RefFwd {
  F64v x, xn1, q, k, v, q_rope, k_rope, probs /* [H, S, S] */, attn, o, x2, xn2, h1, h3, gate, y, out;
};
struct RefGrads {
  // activations
  F64v dffn /* = dy */, dxn2, dh1, dh3, dx2, da, dv, dp /* [H,S,S] */, dq_rope, dk_rope, dq, dk, dxn1, dx;
  // weights
  RefWeights dw;
};

RefFwd ref_forward(const kern::TrainShape& s, const RefWeights& w, const F64v& x);
// Loss L = sum(dy * out); returns all gradients.
RefGrads ref_backward(const kern::TrainShape& s, const RefWeights& w, const RefFwd& f, const F64v& dy);

// RMSNorm pieces (also used by tests that chain kernels with CPU glue).
F64v ref_rms_fwd(const F64v& x, const F64v& w, int64_t D, int64_t S, double eps);
F64v ref_rms_bwd(const F64v& dy, const F64v& x, const F64v& w, int64_t D, int64_t S, double eps, F64v* dw);

}  // namespace anelab::test
