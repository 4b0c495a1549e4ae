// llama2.c checkpoints (karpathy/llama2.c), read into the canonical Model (all tensors fp32, mmapped).
//
// Legacy format (run.c):  7 x int32 header dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
//   seq_len (negative vocab_size = untied classifier), then fp32 arrays, each stacked over layers:
//   token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim],
//   wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim],
//   rms_final [dim], freq_cis_real [seq_len, head_size/2], freq_cis_imag [same] (skipped),
//   wcls [vocab, dim] only when untied.  kv_dim = n_kv_heads * head_size, head_size = dim / n_heads.
// Export version 1 (export.py --version 1): u32 magic 0x616b3432 ("ak42"), i32 version 1, the same
//   7 x int32, u8 shared_classifier, zero padding to 256 bytes; then fp32: rms_att [L, dim],
//   rms_ffn [L, dim], rms_final [dim], token_embedding, wq, wk, wv, wo, w1, w2, w3 (each [L, ...]),
//   wcls only when not shared. No freq tables. Version 2 (int8 groups) is rejected.
// The file size must match the header exactly (every byte accounted for).
// Config: arch llama, RMSNorm eps 1e-5, SwiGLU, RoPE theta 10000 in adjacent-pairs style.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "framework/core/file.h"
#include "models/formats/model.h"

namespace anelab::models {

constexpr uint32_t kLlama2cMagic = 0x616b3432;

Model read_llama2c(const std::string& path, FileAccess access = FileAccess::kMap);
Model parse_llama2c(const uint8_t* data, size_t size, std::shared_ptr<const void> owner, const std::string& where);
// True for an "ak42" header, or a legacy header whose sizes account exactly for the file size.
bool looks_like_llama2c(const uint8_t* data, size_t size);
int fuzz_read_llama2c(const uint8_t* data, size_t size);

}  // namespace anelab::models
