// The in-memory model every anelab component reads: ModelConfig (hyperparameters), Tensor (a named,
// typed, shaped view of weight bytes — usually the model file's, mapped or read into memory) and Model
// (config + tensors + optional tokenizer). Training and inference read models ONLY through this API; every
// converter (llama2.c, safetensors, GGUF, anelab files, random presets) produces the same Model.
//
// Canonical tensor naming (all weights [out, in] row-major, like torch nn.Linear.weight):
//   tok_embeddings              [vocab, dim]
//   pos_embeddings              [max_seq_len, dim]            when learned_pos
//   layers.{i}.attn_norm        [dim]        (+ layers.{i}.attn_norm_bias [dim] for LayerNorm)
//   layers.{i}.wq               [n_heads*head_dim, dim]
//   layers.{i}.wk, .wv          [n_kv_heads*head_dim, dim]
//   layers.{i}.wo               [dim, n_heads*head_dim]
//   layers.{i}.bq / bk / bv     [rows of wq / wk / wv]        when qkv_bias
//   layers.{i}.bo               [dim]                          when attn_out_bias
//   per-head norms of q and k  [head_dim]                     where the architecture has them (models/arch/<arch>.cpp)
//   layers.{i}.ffn_norm         [dim]        (+ layers.{i}.ffn_norm_bias [dim] for LayerNorm)
//   SwiGLU (silu) / GeGLU (gelu_tanh_gated): layers.{i}.w1 [hidden, dim] gate, .w2 [dim, hidden] down,
//   .w3 [hidden, dim] up; GELU MLP (gelu_tanh): layers.{i}.fc [hidden, dim] + fc_bias [hidden], .proj [dim, hidden]
//   + proj_bias [dim]
//   norms of a step's output before its residual add [dim]    where the architecture has them (Gemma 3)
//   Linear-attention layers (ModelConfig::linear_layer(i), Qwen3.5's Gated DeltaNet) replace the attention tensors
//   (attn_norm stays) with, C = linear_conv_dim(), Vd = linear_value_dim(), Hv = linear_v_heads:
//   layers.{i}.ssm_qkv [C, dim], ssm_z [Vd, dim], ssm_b [Hv, dim], ssm_a [Hv, dim], ssm_conv [C, conv_kernel],
//   ssm_a_log [Hv], ssm_dt_bias [Hv], ssm_norm [linear_v_dim], ssm_out [dim, Vd]
//   With attn_output_gate, wq is [2*n_heads*head_dim, dim] (per head [q | gate] rows).
//   norm                        [dim]        (+ norm_bias [dim] for LayerNorm)
//   output                      [vocab, dim]                  absent when tied_embeddings
// Which of them a model has, in which order, is its architecture's description's (models/arch/tensors.h:
// canonical_tensors, check_complete); the readers here check a file against itself.
//
// RoPE: kAdjacentPairs rotates (x[2j], x[2j+1]) (llama2.c, GGUF llama); kRotateHalf rotates
// (x[j], x[j+head_dim/2]) (Hugging Face). q/k weights are stored as the source has them.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/arch_types.h"
#include "framework/core/model_desc.h"
#include "framework/quant/palette.h"
#include "framework/quant/types.h"
#include "models/formats/vocab.h"

namespace anelab::models {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  // Block-quantized (ggml layouts, framework/quant/blocks.h), blocks along the last (row) axis:
  kQ8_0 = 3,  // 32 values in 34 bytes: fp16 scale d + 32 int8 q; x = d*q
  kQ4_0 = 4,  // 32 values in 18 bytes: fp16 d + 16 bytes of nibbles; x = d*(q-8)
  kQ4_K = 5,  // 256 values in 144 bytes: fp16 d, dmin, 8 6-bit (scale, min) pairs, 128 bytes of nibbles
  kQ6_K = 6,  // 256 values in 210 bytes: 6-bit q in 16 groups of 16 with int8 scales, fp16 d
  kQ5_0 = 7,  // 32 values in 22 bytes: fp16 d + 32 high bits + 16 bytes of nibbles; x = d*(q-16)
  kQ5_1 = 8,  // 32 values in 24 bytes: fp16 d, m + 32 high bits + 16 bytes of nibbles; x = d*q + m
  kQ5_K = 9,  // 256 values in 176 bytes: Q4_K's scales and nibbles + 32 bytes of 5th bits
};
// The block types are the rows of the type table (framework/quant/types.h: names, GGUF ids, block sizes); the
// DType values above are the anelab file's ids (never renumbered) and convert through these two functions.
std::optional<quant::BlockType> block_type_of(DType t);  // nullopt for fp32 / fp16 / bf16
DType dtype_of(quant::BlockType t);
const char* dtype_name(DType t);        // "fp32", "fp16", "bf16" or the table's name ("q8_0", "q4_k", ...)
DType parse_dtype(std::string_view s);  // accepts the names above (+ f32/f16/float32..., upper case), throws otherwise
bool is_block_quantized(DType t);       // a row of the type table
int64_t dtype_block(DType t);           // values per block: the table's for block types, 1 otherwise
// Bytes needed for n elements (block types: n must be a multiple of dtype_block); returns -1 when n is invalid.
int64_t dtype_nbytes(DType t, int64_t n);

// RopeStyle, NormType, Activation and their names: framework/core/arch_types.h (shared with the kernels).
using anelab::Activation;
using anelab::NormType;
using anelab::RopeScaling;
using anelab::RopeScalingType;
using anelab::RopeStyle;

// The value of one architecture parameter (ModelConfig::params): an integer, or a number kept in fp32 (the
// precision the executors read it in). The JSON form writes an integer as a JSON integer, a number as a JSON
// number.
struct ParamValue {
  bool integer = false;
  int64_t i = 0;   // when integer
  float f = 0.0f;  // otherwise
  double value() const { return integer ? static_cast<double>(i) : static_cast<double>(f); }
  bool operator==(const ParamValue&) const = default;
};

struct ModelConfig {
  std::string arch = "llama";  // a name in the architecture table (models/arch/arch.h)
  int64_t dim = 0;             // model width (embedding size)
  int64_t hidden_dim = 0;      // feed-forward width
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // == n_heads without GQA
  int64_t head_dim = 0;    // usually dim / n_heads (may differ: 128 with dim 1024 and 16 heads)
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;  // context length (rows of pos_embeddings when learned_pos)
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  RopeScaling rope_scaling;     // RoPE frequency scaling (arch_types.h): none, or llama3's
  bool tied_embeddings = true;  // output = tok_embeddings (no `output` tensor)
  bool qkv_bias = false;        // bq/bk/bv present
  bool attn_out_bias = false;   // bo present
  bool mlp_bias = false;        // fc_bias/proj_bias present (GELU MLP)
  NormType norm = NormType::kRms;
  Activation activation = Activation::kSilu;
  bool learned_pos = false;  // pos_embeddings present (then rope_style is kNone)
  // The architecture's own parameters (Gemma 3's norm offset, scales, attention window, ...): each
  // architecture declares its parameters once, with kind, default and range (Arch::params, models/arch/arch.h);
  // a config holds the values it sets, by name (absent: the table's default). The generic code (the JSON
  // form, `anelab info`) writes and reads them by iterating this map and names none of them; the
  // architecture's table validates them (validate_config) and its code reads them (models/arch/arch.h param()).
  std::map<std::string, ParamValue> params;
  // Qwen3.5's hybrid (Gated DeltaNet linear-attention layers between gated full-attention layers; 0 / false leave
  // every other architecture as it was):
  int64_t full_attention_interval = 0;  // > 0: layer l is full attention iff (l + 1) % interval == 0, else linear
  int64_t linear_k_heads = 0, linear_v_heads = 0;  // DeltaNet key (and query) heads, value heads (a multiple)
  int64_t linear_k_dim = 0, linear_v_dim = 0;      // their head dims
  int64_t linear_conv_kernel = 0;                  // the short causal conv1d's kernel over [q | k | v]
  float rope_fraction = 1.0f;                      // RoPE rotates the first rope_fraction * head_dim dims of a head
  bool attn_output_gate = false;  // wq rows per head [q | gate]; attention out *= sigmoid(gate) before wo

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  bool linear_layer(int64_t l) const { return full_attention_interval > 0 && (l + 1) % full_attention_interval != 0; }
  int64_t linear_qk_dim() const { return linear_k_heads * linear_k_dim; }               // q and k widths
  int64_t linear_value_dim() const { return linear_v_heads * linear_v_dim; }            // v, z and the output's width
  int64_t linear_conv_dim() const { return 2 * linear_qk_dim() + linear_value_dim(); }  // [q | k | v]

  bool operator==(const ModelConfig&) const = default;
};

// Throws anelab::Error naming the field, its value and the accepted range when a config is unusable by any
// architecture (non-positive or absurd sizes, n_heads % n_kv_heads != 0, inconsistent flags, ...).
// validate_config (models/arch/arch.h) adds the architecture's name and its own rules.
void validate_config_fields(const ModelConfig& c, const std::string& where);
// The element count of a tensor list with overflow-checked arithmetic: throws naming `where` and the tensor when a
// dimension is not positive or the count passes kMaxParams. Every reader calls it (on its file's tensor table, or
// through checked_parameter_count, models/arch/tensors.h) before a size or offset is computed from it.
constexpr int64_t kMaxParams = int64_t{1} << 36;
int64_t checked_numel(const std::vector<TensorSpec>& specs, const std::string& where);
// One line per field, for `anelab info` (the architecture's parameters: describe_params, models/arch/arch.h).
std::string describe_config(const ModelConfig& c);

std::string shape_string(const std::vector<int64_t>& shape);  // "[64, 172]"

struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // nbytes bytes, owned by `owner` (a mapping or a heap buffer)
  int64_t nbytes = 0;
  std::shared_ptr<const void> owner;

  int64_t numel() const;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? numel() : numel() / shape[0]; }
  const float* f32() const;           // direct pointer; throws unless dtype is fp32
  std::vector<float> to_f32() const;  // dequantised copy (fp16/bf16/block types -> fp32)
  // Dequantises elements [begin, begin+count) into out (block types: begin and count multiples of dtype_block).
  void to_f32(int64_t begin, int64_t count, float* out) const;
  std::string shape_str() const;  // "[64, 172]"
};

class Model {
 public:
  ModelConfig config;
  std::optional<tok::VocabData> vocab;  // embedded tokenizer, when the source had one
  std::string tokenizer_path;           // where the tokenizer came from / lives (may be empty)
  std::string chat_template;            // the source's Jinja chat template text, when it has one (else empty)
  std::string source_format;            // "anelab", "llama2c", "safetensors", "gguf", "checkpoint", "random"
  std::string source_path;
  // Every tensor's bytes are this process's own writable memory (files read, FileAccess::kRead, or converted), not
  // a shared file mapping: an engine holding the model alone may rewrite them in place (infer::Engine's Q8_0 tiles).
  bool private_memory = false;
  // Palettes (lut4 / lut6, framework/quant/palette.h) of some matrices, by tensor name: `anelab convert
  // --palettize` computes them once and the anelab file stores them (anelab_file.h); the tensor itself then holds
  // exactly the palette's values, so every reader that ignores the palette computes on the same numbers.
  std::map<std::string, std::shared_ptr<const quant::Palette>> palettes;

  const Tensor& tensor(std::string_view name) const;  // throws "[model] no tensor NAME (has: ...)"
  const Tensor* find(std::string_view name) const;    // nullptr when absent
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The output projection: `output`, or `tok_embeddings` when tied.
  const Tensor& output_weight() const;

  // Adds a view over bytes kept alive by owner (shape/dtype/nbytes consistency is checked).
  void add_view(std::string name, DType dtype, std::vector<int64_t> shape, const uint8_t* data, int64_t nbytes,
                std::shared_ptr<const void> owner);
  // Adds a tensor that owns its bytes.
  void add_owned(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  int64_t parameter_count() const;
  int64_t total_bytes() const;

 private:
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Format conversion helpers (n elements).
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);  // round to nearest even, NaN kept
// Converts n fp32 values into dst in dtype t (dst must hold dtype_nbytes(t, n) bytes; block types quantize
// with the reference quantizers of framework/quant/blocks.h).
void f32_to_dtype(const float* src, DType t, uint8_t* dst, int64_t n);

}  // namespace anelab::models
