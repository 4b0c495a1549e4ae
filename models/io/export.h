// Writing a Model in every format anelab reads, so that what `anelab train` produces runs everywhere:
//
//   anelab       OUT.anelab   anelab_file.h (tokenizer and chat template embedded)
//   gguf         OUT.gguf     gguf.h (tokenizer in the metadata; llama q/k rows in adjacent-pairs order)
//   safetensors  OUT_DIR      a Hugging Face model directory loadable by transformers: config.json
//                             (written by the architecture file, models/arch/), model.safetensors (q/k rows in
//                             rotate-half order, as HF Llama expects), and for byte-level BPE vocabularies
//                             tokenizer.json + tokenizer_config.json (chat_template when known); written into
//                             OUT_DIR.tmp.<pid> and moved into place when complete (a failed export leaves
//                             no partial directory)
//   llama2c      OUT.bin      llama2.c legacy format (run.c), fp32; no tokenizer (pass --tokenizer when running it)
//
// The format comes from --format, else from the output name: .anelab, .gguf, .bin, or a name without an
// extension (or ending in '/') for the Hugging Face directory. Any other extension is refused (a
// `.safetensors` file alone is not loadable by transformers: the error says to name a directory).
// RoPE: q/k weights are permuted between adjacent-pairs and rotate-half row order where the target
// format requires the other style (an exact row permutation, so logits are unchanged).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "models/formats/anelab_file.h"
#include "models/formats/model.h"

namespace anelab::models {

enum class ExportFormat { kAnelab, kGguf, kSafetensors, kLlama2c };
const char* export_format_name(ExportFormat f);  // "anelab", "gguf", "safetensors", "llama2c"
// format: "" (choose by name), or one of the names above ("hf" = safetensors). Throws naming the
// output and the accepted names / extensions.
ExportFormat export_format_for(const std::string& out, const std::string& format);

// Writes m to out in format f (matrices converted to dtype when given; 1-D tensors stay fp32).
// Returns notes for the user (e.g. "no tokenizer written: ..."); throws naming the field that the
// format cannot hold.
std::vector<std::string> export_model(const Model& m, const std::string& out, ExportFormat f,
                                      std::optional<DType> dtype = {}, const ProgressFn& progress = {});

// Saves m as an anelab file (atomically): its tensors checked against canonical_tensors (check_complete,
// models/arch/tensors.h) and written in that order. target dtype (when given) applies to 2-D tensors; 1-D tensors
// (norms, biases) stay fp32; block types need rows whose length is a multiple of their block (other matrices fall
// back to fp16: stored_dtype).
int64_t save_model(const Model& m, const std::string& path, std::optional<DType> target = {},
                   const ProgressFn& progress = {});

// Row permutation of a q/k projection (or its bias, or a LoRA B [out, r]) between RoPE styles, per head of head_dim
// rows (an owned copy).
Tensor permute_rope_rows(const Tensor& t, int64_t head_dim, RopeStyle from, RopeStyle to);
// The model with its q/k rows permuted into `target` RoPE order (views of m where nothing changes).
Model with_rope_style(const Model& m, RopeStyle target);
// A model with m's config, tokenizer, chat template and source, and no tensors (converters add theirs).
Model copy_header(const Model& m);
// Hugging Face tokenizer.json text of a byte-level BPE vocabulary (throws for SentencePiece vocabularies).
std::string vocab_to_hf_tokenizer_json(const tok::VocabData& v);

}  // namespace anelab::models
