// The nn functions of Llama/GPT-style transformer kernels (norms, linear, activations, RoPE, attention), as
// compositions of a few MIL ops on the typed builder (framework/mil/builder.h). The transformer layer built
// from them is layer.h (used by the training kernels, framework/kernels/train.h, and the inference prefill);
// the backward kernels use them directly. Every function takes and returns builder Values; shapes are checked
// by the builder, so a wrong shape throws here, naming the op.
//
// Layouts (ane_digest §4.1): activations are channel-first [1, C, 1, S]; attention works on heads
// [1, H, S, HD] (split_heads / merge_heads convert). Weights are PyTorch nn.Linear order [out, in].
//
//   mil::ProgramBuilder pb;
//   auto& b = pb.function("main");
//   kern::BlobSet blobs;
//   auto x  = b.input("x", kern::act_type(768, 256));
//   auto xn = kern::rms_norm(b, x, blobs.vector(b, "rms_att", rms_w), 1e-5);
//   auto q  = kern::linear(b, xn, blobs.matrix(b, "wq", wq, 768, 768));
//   ...
//   rt::Weights weights = blobs.weights();
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "framework/core/arch_types.h"
#include "framework/mil/builder.h"
#include "framework/runtime/backend.h"

namespace anelab::kern {

using mil::FunctionBuilder;
using mil::Value;

// [1, C, 1, S] fp16 (the ANE activation type).
mil::TensorType act_type(int64_t channels, int64_t seq, mil::DType dt = mil::DType::kFp16);

struct W8Matrix;  // w8.h
}  // namespace anelab::kern
namespace anelab::quant {
struct Mat;      // framework/quant/mat.h
struct Palette;  // framework/quant/palette.h
}  // namespace anelab::quant
namespace anelab::kern {

// ---- weights dictionary -------------------------------------------------------------------------
// Collects BLOBFILE consts into the weights dictionary a backend compiles with (digest §1.3): one blob
// file "@model_path/weights/<stem>.bin" with one fp16 (or int8) chunk per weight. Adding the same stem twice
// returns the existing const when the function is the same builder (mask / rope tables reuse).
class BlobSet {
 public:
  // Any tensor type; values row-major, numel(type) floats.
  Value tensor(FunctionBuilder& b, const std::string& stem, const mil::TensorType& t, std::span<const float> values);
  // Conv weight [out, in, 1, 1] from a row-major [out, in] matrix; transposed=true bakes W^T
  // (conv weight [in, out, 1, 1]) for backward products y = W^T x.
  Value matrix(FunctionBuilder& b, const std::string& stem, std::span<const float> w, int64_t out, int64_t in,
               bool transposed = false);
  // The same conv weight [out, in, 1, 1] from int8 per-output-channel weights (w8.h): an int8 blob and
  // a constexpr_affine_dequantize op (scale tensor<fp16, [out]> along axis 0, zero_point int8(0)).
  Value int8_matrix(FunctionBuilder& b, const std::string& stem, const W8Matrix& m);
  // The same conv weight as 4-bit blocks of 32 input channels, ggml's Q4_0 (x = d * (q - 8)): uint4 data q
  // [out, in, 1, 1], an fp16 scale d per block [out, in/32, 1, 1] and offset 8 (uint4, the same shape), through
  // constexpr_blockwise_shift_scale (iOS18). A Q4_0 matrix is baked with its own bits (its d and nibbles);
  // any other type is quantized to Q4_0 first (quant::quantize, ggml's reference quantizer). in % 32 == 0.
  Value q4_matrix(FunctionBuilder& b, const std::string& stem, const quant::Mat& m);
  // The same conv weight as 8-bit blocks of 32 input channels, ggml's Q8_0 (x = d * q): int8 data q [out, in, 1, 1]
  // and an fp16 scale d per block [out, in/32, 1, 1], no offset, through constexpr_blockwise_shift_scale (iOS18;
  // coremltools defs/iOS18/compression.py: data int4/uint4/int8/uint8, offset optional). A Q8_0 matrix is baked
  // with its own bits (rows held in row tiles copied out of them); any other type is quantized to Q8_0 first.
  // in % 32 == 0.
  Value q8_matrix(FunctionBuilder& b, const std::string& stem, const quant::Mat& m);
  // The same conv weight from a palette (quant/palette.h): uint4 (lut4) or uint6 (lut6) indices [out, in, 1, 1] and
  // an fp16 table per group of rows, lut [out / group, 1, 1, 1, 2^bits, 1], through constexpr_lut_to_dense (iOS18).
  Value lut_matrix(FunctionBuilder& b, const std::string& stem, const quant::Palette& p);
  // Per-channel vector as [1, C, 1, 1] (norm weights, biases).
  Value vector(FunctionBuilder& b, const std::string& stem, std::span<const float> v);

  const rt::Weights& weights() const { return weights_; }
  size_t size() const { return weights_.size(); }

 private:
  void add_file(const std::string& stem, const std::string& path, std::vector<uint8_t> bytes);
  rt::Weights weights_;
  std::map<std::pair<const FunctionBuilder*, std::string>, Value> made_;
};

// ---- host-side tables ---------------------------------------------------------------------------
// Additive causal mask [S, S]: 0 on and below the diagonal, -65504 above (digest §2.6.4); with a window
// > 0 also -65504 where i - j >= window (a windowed layer: query i sees keys i - window < j <= i).
std::vector<float> causal_mask(int64_t seq, int64_t window = 0);

using anelab::rope_style_name;
using anelab::RopeStyle;  // framework/core/arch_types.h (kNone is not a rotation: rope() treats it as kRotateHalf)

// cos / sin tables [S, HD] (row-major, position-major) for positions pos0 .. pos0+S-1, laid out for
// `style`: adjacent pairs duplicate angle i at columns 2i and 2i+1; rotate-half at i and i + HD/2.
// The angles are cpu_ops.h's rope_half_tables with the training reference's numerics (fp64 angles), with
// `scaling`'s frequencies.
struct RopeTables {
  std::vector<float> cos, sin;  // [S, HD] each
};
// `scaling`'s frequencies (llama3), then divided by `linear` (linear RoPE scaling) when it is not 1.
RopeTables rope_tables(int64_t seq, int64_t head_dim, double theta, RopeStyle style, int64_t pos0 = 0,
                       const RopeScaling& scaling = {}, double linear = 1.0);

// ---- functions ----------------------------------------------------------------------------------
// RMSNorm over channels as the ANE code does (digest §5.3): x*x, reduce_sum(axis 1), *1/D, +eps,
// pow(-0.5), x*r, *w.  x [1, D, 1, S], w [1, D, 1, 1] (const or slice). Returns [1, D, 1, S].
Value rms_norm(FunctionBuilder& b, const Value& x, const Value& w, double eps);
// 1 / sqrt(mean(x^2) + eps) per position: [1, 1, 1, S] (shared by rms_norm and its backward).
Value rms_rrms(FunctionBuilder& b, const Value& x, double eps);
// LayerNorm over channels (GPT-2), composed of reduce_sum / sub / mul / pow (no layer_norm op):
// (x - mean) * (var + eps)^-0.5 * gamma + beta. gamma/beta [1, D, 1, 1]; beta optional.
Value layer_norm(FunctionBuilder& b, const Value& x, const Value& gamma, const std::optional<Value>& beta, double eps);

// y = W x (+ bias) as a 1x1 conv: x [1, IC, 1, S], w [OC, IC, 1, 1], bias [1, OC, 1, 1].
Value linear(FunctionBuilder& b, const Value& x, const Value& w, const std::optional<Value>& bias = {});
// y = A^T x with a runtime matrix A [1, IC, 1, OC] (a slot of the input surface; dynamic weights,
// digest §5.4): reshape A to [1, 1, IC, OC], matmul(A, x, transpose_x) -> [1, OC, 1, S].
Value linear_runtime_t(FunctionBuilder& b, const Value& x, const Value& a);
// y = M x with a runtime matrix M [1, OC, 1, IC] (slot rows = output channels).
Value linear_runtime(FunctionBuilder& b, const Value& x, const Value& m);

Value silu(FunctionBuilder& b, const Value& x);       // x * sigmoid(x)
Value gelu_tanh(FunctionBuilder& b, const Value& x);  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

// [1, H*HD, 1, S] <-> [1, H, S, HD]  (reshape [1,H,HD,S] + transpose [0,1,3,2]).
Value split_heads(FunctionBuilder& b, const Value& x, int64_t heads);
Value merge_heads(FunctionBuilder& b, const Value& x);

// RoPE on heads x [1, H, S, HD] with tables cos/sin [1, 1, S, HD] (consts or input slots laid out by
// rope_tables for the same style): x*cos + rot(x)*sin, rot = (-x_odd, x_even) per adjacent pair or
// (-x2, x1) for rotate-half. The backward (inverse rotation) is rope() with -sin, because both tables
// repeat each angle for the two elements it rotates (so rot(s*g) = s*rot(g) and rot^T = -rot).
Value rope(FunctionBuilder& b, const Value& x, const Value& cos, const Value& sin, RopeStyle style);

// GQA: kv [1, KVH, S, HD] -> [1, KVH*n_rep, S, HD], repeating each kv head n_rep times contiguously,
// so query head h reads kv head h / n_rep (llama2.c, HF repeat_kv). NOT a whole-tensor concat
// (that gives h mod KVH; digest §5.5).
Value gqa_expand(FunctionBuilder& b, const Value& kv, int64_t n_rep);
// Adjoint of gqa_expand: g [1, KVH*n_rep, S, HD] -> [1, KVH, S, HD], summing each group of n_rep heads.
Value gqa_reduce(FunctionBuilder& b, const Value& g, int64_t n_rep);

// Attention probabilities softmax(q k^T * scale + mask) on heads: q [1,H,S,HD], k [1,H,S,HD] (already
// GQA-expanded), mask [1,1,S,S] additive. Returns [1, H, S, S].
Value attention_probs(FunctionBuilder& b, const Value& q, const Value& k, const Value& mask, double scale);
// Causal attention: probs(q,k) @ v -> [1, H, S, HD]. Never SDPA's attn_mask (ignored on the ANE).
Value causal_attention(FunctionBuilder& b, const Value& q, const Value& k, const Value& v, const Value& mask,
                       double scale);

}  // namespace anelab::kern
