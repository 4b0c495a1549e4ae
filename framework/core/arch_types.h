// The vocabulary of transformer architectures shared by the model layer (models/: ModelConfig) and the
// kernel generators (framework/kernels/): how positions are encoded, which norm, which MLP activation.
// Defined once here, with the names the model files store ("rope_style": "rotate_half", ...).
#pragma once
#include <cstdint>
#include <numbers>
#include <optional>
#include <string_view>

namespace anelab {

enum class RopeStyle : uint8_t {
  kNone = 0,           // learned positions (no RoPE)
  kAdjacentPairs = 1,  // llama2.c / GPT-J / Meta / GGUF llama: rotates (x[2i], x[2i+1]) by pos * theta^(-2i/HD)
  kRotateHalf = 2,     // Hugging Face: rotates (x[i], x[i + HD/2]) by pos * theta^(-2i/HD)
};
// RoPE frequency scaling (Hugging Face rope_type). kNone: inv_freq(i) = theta^(-2i/HD). kLlama3 (Llama 3.1+):
// wavelengths 2*pi / inv_freq longer than original_max_pos / low_freq_factor are slowed by `factor`, those
// shorter than original_max_pos / high_freq_factor are kept, the ones between are blended linearly in
// original_max_pos / wavelength (llama3_scaled_inv_freq below; cpu_ops.h rope_inv_freq applies it).
enum class RopeScalingType : uint8_t { kNone = 0, kLlama3 = 1 };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 8.0f;  // the fields below are used by kLlama3 only
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_pos = 8192;  // original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};
const char* rope_scaling_name(RopeScalingType t);  // "none", "llama3"
std::optional<RopeScalingType> parse_rope_scaling(std::string_view s);

// The llama3 scaling of one inverse frequency `inv`, evaluated in F (fp32 in transformers' order of operations,
// or fp64): wavelen = 2*pi / inv; kept below original / high_freq_factor, divided by `factor` beyond
// original / low_freq_factor, blended linearly in original / wavelen between.
template <typename F>
F llama3_scaled_inv_freq(F inv, const RopeScaling& s) {
  const F wavelen = static_cast<F>(2.0 * std::numbers::pi) / inv;
  const F factor = static_cast<F>(s.factor);
  if (wavelen < static_cast<F>(double(s.original_max_pos) / s.high_freq_factor)) return inv;
  if (wavelen > static_cast<F>(double(s.original_max_pos) / s.low_freq_factor)) return inv / factor;
  const F smooth = (static_cast<F>(s.original_max_pos) / wavelen - static_cast<F>(s.low_freq_factor)) /
                   static_cast<F>(double(s.high_freq_factor) - double(s.low_freq_factor));
  return (F(1) - smooth) * inv / factor + smooth * inv;
}

enum class NormType : uint8_t { kRms = 0, kLayer = 1 };
// silu => SwiGLU w1/w2/w3: W2·(silu(W1·x) * W3·x); gelu_tanh => fc/proj: proj·gelu(fc·x);
// gelu_tanh_gated => GeGLU (Gemma) w1/w2/w3: W2·(gelu_tanh(W1·x) * W3·x)
enum class Activation : uint8_t { kSilu = 0, kGeluTanh = 1, kGeluTanhGated = 2 };
// Gated MLPs (SwiGLU, GeGLU) have the three matrices w1 (gate), w2 (down), w3 (up).
constexpr bool gated_mlp(Activation a) { return a != Activation::kGeluTanh; }

const char* rope_style_name(RopeStyle r);   // "none", "adjacent_pairs", "rotate_half"
const char* norm_type_name(NormType n);     // "rms", "layer"
const char* activation_name(Activation a);  // "silu", "gelu_tanh", "gelu_tanh_gated"
// The inverse of the names above; nullopt for any other text (the caller names the field in its error).
std::optional<RopeStyle> parse_rope_style(std::string_view s);
std::optional<NormType> parse_norm_type(std::string_view s);
std::optional<Activation> parse_activation(std::string_view s);

}  // namespace anelab
