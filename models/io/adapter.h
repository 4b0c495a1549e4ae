// LoRA adapter files: a PEFT directory (what `peft.PeftModel.from_pretrained` loads) and a GGUF LoRA adapter (what
// llama.cpp's `--lora FILE` loads). Written by `anelab export RUN OUT --adapter`, read by `infer --lora FILE`.
//
// An adapter is, for each adapted projection W [out, in] of the canonical model (models/formats/model.h names:
// layers.N.wq wk wv wo w1 w3 w2, and Qwen3.5's ssm_qkv ssm_z ssm_b ssm_a ssm_out), A [r, in] and B [out, r] in fp32,
// with alpha: W' = W + (alpha / r) * B·A.
// In memory B's rows follow the model config's q/k row order (rope_style); each file holds them in its own:
//
//   PEFT dir   adapter_config.json {"peft_type": "LORA", "r", "lora_alpha", "target_modules" (q_proj k_proj v_proj
//              o_proj gate_proj up_proj down_proj), "base_model_name_or_path" when known, "bias": "none",
//              "task_type": "CAUSAL_LM", ...} and adapter_model.safetensors with PEFT's keys
//              base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight [r, in] / .lora_B.weight [out, r]
//              (mlp.gate_proj, mlp.up_proj, mlp.down_proj for the MLP; linear_attn.in_proj_qkv, in_proj_z, in_proj_b,
//              in_proj_a, out_proj for Qwen3.5's Gated DeltaNet); q/k rows in Hugging Face's rotate-half order (as
//              models/io/export.h's Hugging Face directory).
//   GGUF       general.type "adapter", general.architecture the base's, adapter.type "lora", adapter.lora.alpha
//              (f32); tensors blk.N.attn_q.weight.lora_a with ne [in, r] and .lora_b with ne [r, out] (the same bytes
//              as PEFT's A [r, in] and B [out, r] row-major): llama.cpp's src/llama-adapter.cpp checks
//              model.ne[0] == a.ne[0], model.ne[1] == b.ne[1], a.ne[1] == b.ne[0], and convert_lora_to_gguf.py
//              writes PEFT's lora_A / lora_B tensors unchanged under those names; q/k rows in the order the base
//              GGUF has them (Arch::gguf_rope, as export_model writes the base). Qwen3.5's DeltaNet projections:
//              blk.N.attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out (llama.cpp's qwen35 names), B's rows and A's
//              columns in the base GGUF's value-head order (Arch::gguf_matrix_order).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/formats/model.h"

namespace anelab::models {

struct LoraPair {
  std::string tensor;  // the adapted canonical tensor, e.g. "layers.3.wq"
  int64_t in = 0, out = 0;
  std::vector<float> a;  // [r, in]
  std::vector<float> b;  // [out, r]
};

struct LoraAdapter {
  int64_t rank = 0;
  float alpha = 0;
  std::string base_model;  // base_model_name_or_path ("" when unknown)
  std::vector<LoraPair> pairs;
  float scale() const { return alpha / float(rank); }
};

// Writes a PEFT directory (atomically: DIR.tmp.<pid> renamed into place) for a base of config c.
void write_peft_adapter(const LoraAdapter& a, const ModelConfig& c, const std::string& dir);
// Writes a GGUF LoRA adapter for a base of config c (refused for architectures whose GGUF fuses q/k/v).
void write_gguf_adapter(const LoraAdapter& a, const ModelConfig& c, const std::string& path);
// Reads a PEFT directory or a .gguf adapter for a base of config c (B's rows back into c's order); every tensor's
// name and shape is checked against c ("[adapter] PATH: ..." naming the first that does not fit).
LoraAdapter read_lora_adapter(const std::string& path, const ModelConfig& c);
// W += s * scale * B·A (fp32) into the fp32 tensors of m (made fp32 and owned where they were not).
void merge_lora(Model& m, const LoraAdapter& a, float s);

}  // namespace anelab::models
