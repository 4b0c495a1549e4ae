// GGUF files (models/formats/gguf.h, the container) to and from the canonical Model and VocabData.
//
// Architectures: those of the architecture table (models/arch/arch.h); general.architecture is the
// table's name, "<name>." prefixes its keys, and the architecture file decides the norm, RoPE order and
// activation from them. Tensor names map as (llama.cpp's names, the same for every architecture)
//   token_embd -> tok_embeddings, position_embd -> pos_embeddings, output_norm -> norm(_bias),
//   output -> output (absent = tied), blk.N.attn_norm -> layers.N.attn_norm(_bias),
//   blk.N.attn_q/k/v -> wq/wk/wv (+ .bias -> bq/bk/bv), blk.N.attn_qkv (fused) -> split into wq/wk/wv,
//   blk.N.attn_output -> wo (+ bo), blk.N.attn_q_norm/attn_k_norm -> q_norm/k_norm, blk.N.ffn_norm -> ffn_norm(_bias),
//   blk.N.ffn_gate/down/up -> w1/w2/w3 (SwiGLU, GeGLU); GELU MLP: ffn_up -> fc(_bias), ffn_down -> proj(_bias).
// An architecture may name some layer tensors its own way and store them otherwise (Arch::gguf_layer_names,
// gguf_export_tensor / gguf_import_tensor: Gemma 3's sandwich norms, qwen35's linear-attention tensors).
// The optional tensors present decide qkv_bias, attn_out_bias, mlp_bias and tied_embeddings; the rest the
// architecture implies (its description), and the tensors are checked against it (check_complete).
// RoPE: llama.cpp's converter permutes q/k of some architectures so that its graph uses the "normal"
// (adjacent pairs) rope (Arch::gguf_rope); the others use NEOX (rotate half) on unpermuted weights.
// Llama 3.1+ RoPE scaling is llama.cpp's rope_freqs.weight (F32 per-frequency divisors), with the exact
// parameters in anelab.rope_scaling.{factor, low_freq_factor, high_freq_factor, original_max_pos} on export
// (llama.cpp ignores them); a file without them has the parameters fitted from the divisors.
// Tokenizer: tokenizer.ggml.{model ("llama" -> SentencePiece, "gpt2" -> byte BPE), pre, tokens, scores,
//   token_type, merges, bos_token_id, eos_token_id, unknown_token_id, padding_token_id, add_bos_token,
//   add_space_prefix}. SentencePiece pieces are written with U+2581 for spaces, as real Llama GGUFs (and
//   tokenizer.model) have them; the tokenizer reads either spelling (llama2.c's tokenizer.bin has ' ').
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/file.h"
#include "models/formats/gguf.h"
#include "models/formats/model.h"
#include "models/formats/vocab.h"

namespace anelab::models {

// Model from a GGUF with tensors (the vocab is attached when the metadata has one).
Model gguf_to_model(const GgufFile& g, const std::string& where);
Model read_gguf(const std::string& path, FileAccess access = FileAccess::kMap);
// The tokenizer in GGUF metadata; throws when absent or malformed.
tok::VocabData gguf_vocab(const GgufFile& g, const std::string& where);
bool gguf_has_vocab(const GgufFile& g);

// GGUF of a canonical Model in the layout llama.cpp loads: q/k in the RoPE order its architecture expects,
// q/k/v fused into blk.N.attn_qkv and output.weight always written where the architecture says so
// (Arch::gguf_fused_qkv, gguf_explicit_output; a tied head is then a copy of token_embd). The vocab
// (m.vocab) is included when present: a token list shorter than vocab_size is padded to it with
// "[PAD<id>]" tokens of type unused (as llama.cpp's converter does), and tokenizer.ggml.pre is the
// llama.cpp name of the pre-tokenizer (tok::llama_cpp_pre_name). Without a vocab the file says
// tokenizer.ggml.model "none" and <arch>.vocab_size, llama.cpp's form of a model without a tokenizer (it
// loads, llama-bench runs it; text needs a tokenizer).
// general.file_type records the matrices' dominant dtype (llama_ftype). Norm weights of a model whose norms
// multiply by (norm_offset + w) are written as F32 w + norm_offset (llama.cpp multiplies by the stored
// weight; its Gemma converter adds the 1) and read back as w. The architecture adds its own keys
// (Arch::gguf_write) and, in `notes`, what llama.cpp will compute differently from the model.
// The writer views the model's tensors: `m` must outlive the returned writer.
GgufWriter gguf_writer_for(const Model& m, std::vector<std::string>* notes = nullptr);
std::vector<uint8_t> model_to_gguf(const Model& m);
int64_t write_gguf_model(const Model& m, const std::string& path, std::vector<std::string>* notes = nullptr);

int fuzz_read_gguf(const uint8_t* data, size_t size);

}  // namespace anelab::models
