// Quantizing a whole model the way llama.cpp's llama-quantize does (no importance matrix): a file type
// ("mix") picks a dtype per tensor, and every matrix is converted with the reference quantizers of
// framework/quant/blocks.h. The per-tensor rules, in canonical tensor names (models/formats/model.h):
//
//   1-D tensors (norms, biases) and pos_embeddings      kept as they are (not quantized)
//   output, and tok_embeddings when the head is tied    q8_0 -> Q8_0; every other mix -> Q6_K
//   layers.N.wv (attn_v) and layers.N.w2 / .proj        q4_k_m, q5_k_m: Q6_K where use_more_bits(N, n_layers), else
//   (ffn_down); gpt2's q/k/v too (one fused attn_qkv    the base type; use_more_bits(i, n) = i < n/8 || i >= 7n/8 ||
//   in GGUF, which llama-quantize counts as an attn_v)  (i - n/8) % 3 == 2 (the first and last eighth of the layers and
//                                                       every third between)
//   every other matrix                                  the mix's base type (Q8_0, Q4_0, Q4_K, Q5_K)
//   a row length that is not whole blocks               llama.cpp's fallback: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0;
//                                                       then (and for Q8_0 / Q4_0) fp16
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "models/formats/model.h"

namespace anelab::models {

enum class QuantMix : uint8_t { kQ8_0, kQ4_0, kQ4_K_M, kQ5_K_S, kQ5_K_M };

// "q8_0", "q4_0", "q4_k_m", "q5_k_s", "q5_k_m" (any case); nullopt otherwise.
std::optional<QuantMix> parse_quant_mix(std::string_view s);
const char* quant_mix_name(QuantMix m);
// The dtype `mix` gives tensor `name` of shape `shape` in a model of config c (src = its current dtype).
DType mix_dtype(const ModelConfig& c, const std::string& name, const std::vector<int64_t>& shape, DType src,
                QuantMix mix);
// The model with every tensor converted to mix_dtype (in memory; rows quantized on the shared thread pool).
Model quantize_model(const Model& m, QuantMix mix);

// The layer matrices the MIL prefill bakes (layers.N.wq, wk, wv, wo, w1, w2, w3) palettized with `bits` (4: lut4, 6:
// lut6) and `group` rows per table (0: one table per tensor; a tensor whose rows `group` does not divide gets one
// table), k-means as framework/quant/palette.h says: each such tensor becomes fp16 holding exactly its palette's
// values, and m.palettes holds the palette (the anelab file stores both, anelab_file.h). Other tensors stay views.
Model palettize_model(const Model& m, int bits, int64_t group);

}  // namespace anelab::models
