// Qwen3.5's Gated DeltaNet mixer (models::StepKind::kLinearAttention, framework/core/model_desc.h DeltaNetDesc) as
// MIL, for the prefill's layer kernels (infer/prefill_mil.h) at a bucket of S positions, S a multiple of kDeltaChunk.
// The math is infer/cpu_deltanet.h's (the CPU engine's, checked against scripts/qwen35_reference.py), in the chunked
// WY / UT form of fla-org/flash-linear-attention's chunk_gated_delta_rule:
//
//   qkv = Wqkv xn [C]; z = Wz xn [V]; b = Wb xn [Hv]; a = Wa xn [Hv]          (1x1 convs)
//   mix = silu(causal depthwise conv_K(qkv))                                   (a grouped conv, K-1 zeros on the left)
//   q, k, v = mix's rows; q, k L2-normalised per key head, q also * dk^-0.5; each value head h reads key head
//   h / (Hv / Hk) (gqa_expand)
//   beta = sigmoid(b) * valid;  g = -exp(A_log) * softplus(a + dt_bias) * valid      (valid: 1 at real positions,
//   0 at the bucket's padding: there the state update is the identity, so the final state is the last real token's)
//   per value head, per chunk of L = kDeltaChunk positions (all chunks at once, the chunk as a batch dimension):
//     c = cumsum(g) (a matmul with the lower-triangular ones), Gam_ij = exp(c_i - c_j) for j <= i, 0 above (the
//     exponent summed as sum_{j < m <= i} g_m by a matmul with a 0/1 table, not as an fp16 difference of sums)
//     A = beta_i (k_i . k_j) Gam_ij for j < i (strictly lower, nilpotent: A^L = 0)
//     T = (I + A)^-1 = (I - A)(I + A^2)(I + A^4) ... (I + A^(L/2))       (log2(L) factors, 2 log2(L) - 2 matmuls)
//     U0 = T (beta v);  W = T (beta exp(c) k);  P = (q k^T) * Gam
//     O0 = P U0;  Qm = exp(c) q - P W;  Kw = exp(c_L - c) k
//   the inter-chunk recurrence, unrolled over the bucket's S / L chunks in the same program (state S0 [dk, dv] per
//   head, zero before the first chunk):
//     U = U0 - W S0;  O = O0 + Qm S0;  S0 = exp(c_L) S0 + Kw^T U
//   o = gated RMSNorm(O per value head) * silu(z);  out = Wout o [D]
// fp16 care: the L2 and RMS norms take their statistics of x / (max|x| + sqrt(eps)) (a small head's squares would be
// subnormal: the fixture's ~1e-2 outputs lost 3 % of the logits that way; and eps / max|x|^2 overflowed for a head
// below sqrt(eps) / 256), and the decay exponents c_i - c_j are summed directly
// (an fp16 difference of two cumulative sums of hundreds is off by ~0.1).
// This equals infer/cpu_deltanet.h's forward substitution in real arithmetic ((I + A) U = beta (v - exp(c) S0^T k)).
// Where the fp16 error comes from (issue 36; each stage made exact in turn in a per-op fp16 model of this program,
// layer 0 of the tiny fixture, 150 tokens, bucket 256): every stage's values carry ~1-2 ulps (o 1e-3 of each head, the
// median position), no stage dominates, and the mixer output is 1.3e-3 (rms) / 4.3e-3 (largest) of its largest value;
// the conv and its silu exact, 1.0e-3 / 1.7e-3; one fp16 rounding of q and k alone, all else exact, 3.5e-4 / 1.1e-3.
// The fixture's logits amplify this: an equivalent change of rounding (a scale moved by 2x) moves the 150-token logit
// error between 1.5e-2 and 1.9e-2. The one loss found and removed: the norms' eps overflow (scaled_norm, .cpp).
//
// Why the recurrence is unrolled in the program rather than run on the CPU between programs: a bucket has a fixed
// S, so its S / L chunk steps are known when the kernel is built; one program per layer keeps the dispatch count at
// one per layer (a program per chunk would cost ~70 us of dispatch each, S / L per layer, and the state, Hv*dk*dv
// fp16 per layer (0.5 MiB at Qwen3.5-0.8B's 16 x 128 x 128), would go through the host twice per chunk). The CPU keeps
// the embedding, the LM head and the hand-over of the final states to the recurrent decode.
#pragma once
#include <cstdint>
#include <span>

#include "framework/core/model_desc.h"
#include "framework/kernels/nn.h"
#include "framework/quant/mat.h"

namespace anelab::kern {

// The chunk of the MIL chunked delta rule (the CPU's DeltaRuleChunked::kChunk too): a bucket is whole chunks.
inline constexpr int64_t kDeltaChunk = 64;
// transformers' l2norm eps for q and k (Qwen3_5GatedDeltaNet: l2norm(x, dim=-1, eps=1e-6)).
inline constexpr float kDeltaL2Eps = 1e-6f;

// One Gated DeltaNet mixer's weights (not owned), the tensors of models::DeltaNetDesc.
struct DeltaNetWeights {
  quant::Mat qkv, z, b, a, out;                       // [C, dim], [V, dim], [Hv, dim] x2, [dim, V]
  std::span<const float> conv, a_log, dt_bias, norm;  // [C, K], [Hv], [Hv], [v_dim] (the gated norm's multiplier)
};

// What build_deltanet returns besides the mixer output: the values the CPU decode continues from.
struct DeltaNetTaps {
  Value out;    // [1, dim, 1, S] = Wout o
  Value qkv;    // [1, C, 1, S] the conv's input (the conv state is its last K-1 real columns)
  Value state;  // [Hv, 1, dk, dv] the delta-rule state after the last real position
};

// The mixer on xn [1, dim, 1, S] (the step's pre-normed input) with valid [1, 1, 1, S] (1 / 0 per position); the
// matrices and vectors baked into bs as fp16 BLOBFILE consts named ssm_*. Throws "[kernels] ..." for an S that is not
// whole chunks.
DeltaNetTaps build_deltanet(FunctionBuilder& b, const models::DeltaNetDesc& d, const DeltaNetWeights& w, BlobSet& bs,
                            const Value& xn, const Value& valid);

// The state [Hv, 1, dk, dv] as rows of S columns, [1, R, 1, S] (R = ceil(Hv*dk*dv / S), zeros after the state), the
// layout a prefill kernel's output carries it in; read back row-major, its first Hv*dk*dv values are the state.
Value state_rows(FunctionBuilder& b, const Value& state, int64_t S);

}  // namespace anelab::kern
