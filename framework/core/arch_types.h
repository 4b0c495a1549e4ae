// The vocabulary of transformer architectures shared by the model layer (models/: ModelConfig) and the
// kernel generators (framework/kernels/): how positions are encoded, which norm, which MLP activation.
// Defined once here, with the names the model files store ("rope_style": "rotate_half", ...).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace anelab {

enum class RopeStyle : uint8_t {
  kNone = 0,           // learned positions (no RoPE)
  kAdjacentPairs = 1,  // llama2.c / GPT-J / Meta / GGUF llama: rotates (x[2i], x[2i+1]) by pos * theta^(-2i/HD)
  kRotateHalf = 2,     // Hugging Face: rotates (x[i], x[i + HD/2]) by pos * theta^(-2i/HD)
};
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
