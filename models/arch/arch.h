// The architecture table: everything that makes one model architecture what it is, in one file per
// architecture (models/arch/<name>.cpp) listed once in models/arch/registry.cpp. The generic code (the
// Hugging Face and GGUF mappings, presets, export, config validation) asks this table and names no
// architecture; docs/adding_an_architecture.md says which files a new one touches.
//
// What an architecture supplies:
//   - its name (ModelConfig::arch, GGUF general.architecture and the prefix of its GGUF keys);
//   - Hugging Face: the config.json model_type values and architectures[0] class prefixes it answers to,
//     config.json -> ModelConfig (transformers 4.x keys and 5.x rope_parameters), HF tensors -> canonical
//     tensors, and for export the HF name of each canonical tensor and its config.json keys;
//   - GGUF: the architecture's keys -> the ModelConfig fields they decide (norm, RoPE order, activation)
//     and back, the q/k row order llama.cpp expects, whether q/k/v are fused and the head is always written;
//   - presets (named configs of real models) and the rules a config of this architecture must follow.
// Tensor names in GGUF follow llama.cpp's per-tensor conventions (token_embd, blk.N.attn_q, ...), the same
// for every architecture: gguf_model.cpp holds that one table.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/core/model_desc.h"
#include "models/formats/gguf.h"
#include "models/formats/model.h"
#include "models/formats/safetensors.h"

namespace anelab::models {

// A tensor's bytes in another layout than the model holds (Arch::gguf_export_tensor / gguf_import_tensor).
struct GgufTensorBytes {
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
};
// One architecture parameter (Arch::params): a number the architecture's layers use beyond the generic config
// fields (Gemma 3's norm offset, scales, attention window, ...). Its value lives in ModelConfig::params under
// `name` (absent: `def`); the JSON form writes it as a top-level key of that name; validate_config refuses a
// value outside [lo, hi] (and, for an integer parameter, a non-integer) naming it. `zero_allowed`: 0 is accepted
// besides [lo, hi] (0 meaning "none" / "the generic value"). The architecture's own Hugging Face and GGUF code map
// it to and from those formats' keys.
struct ParamSpec {
  const char* name;
  bool integer;  // an integer (JSON integer), else a number kept in fp32
  double def, lo, hi;
  bool zero_allowed;
  const char* what;  // one line for `anelab info` and the docs
};
// The value of p in c (its default when c does not set it); param_int for integer parameters.
float param(const ModelConfig& c, const ParamSpec& p);
int64_t param_int(const ModelConfig& c, const ParamSpec& p);
// Sets p in c (a number is kept in fp32, as the executors read it).
void set_param(ModelConfig* c, const ParamSpec& p, double v);

// The same by name, through the table of c's architecture (for tests and tools): throws naming a parameter the
// architecture does not have.
double param_named(const ModelConfig& c, std::string_view name);
// One line per parameter of c's architecture, from its table: name, value (the default when c does not set it)
// and what it does, then one line naming the norms of layer 0 (from its description); for `anelab info` after
// describe_config.
std::string describe_params(const ModelConfig& c);
void set_param_named(ModelConfig* c, std::string_view name, double v);

// The RMSNorm offset (every norm multiplies by (norm_offset + w), added in fp32): a parameter of Gemma 3 and
// Qwen3.5 (1), read by decoder_desc (common.h) and by the GGUF code (llama.cpp stores such norms as w + offset).
inline constexpr ParamSpec kNormOffset{
    "norm_offset", false, 0.0, -16.0, 16.0, false, "every RMSNorm multiplies by (norm_offset + w)"};

// A permutation of a matrix's rows and columns (Arch::gguf_matrix_order).
struct GgufMatrixOrder {
  std::vector<int64_t> rows, cols;  // stored index -> anelab index (empty: identity)
};

struct Arch {
  std::string name;  // ModelConfig::arch; GGUF general.architecture and key prefix ("<name>.block_count")

  // ---- Hugging Face ----
  std::vector<std::string> hf_model_types;     // config.json "model_type" values
  std::vector<std::string> hf_class_prefixes;  // "architectures"[0] prefixes, for a config without model_type
  // config.json -> ModelConfig (sizes, norm, RoPE, flags); throws naming the key and `where`.
  ModelConfig (*hf_config)(const nlohmann::json& config, const std::string& where) = nullptr;
  // Adds the canonical tensors of HF `tensors` to m (m.config is set; an absent lm_head made it tied).
  void (*hf_tensors)(Model& m, const StTensorMap& tensors, const std::string& where) = nullptr;
  // Export (nullptr: no Hugging Face export): config.json of c, and the HF name of a canonical tensor.
  nlohmann::json (*hf_export_config)(const ModelConfig& c) = nullptr;
  std::string (*hf_tensor_name)(const std::string& canonical) = nullptr;
  // The HF shape of a canonical tensor where it differs, the bytes the same (nullptr: none differs; qwen35's conv1d
  // [C, 1, K] held as [C, K]).
  std::vector<int64_t> (*hf_tensor_shape)(const std::string& canonical, const std::vector<int64_t>& shape) = nullptr;

  // ---- GGUF ----
  // After the generic sizes are read from "<name>.*": the fields the architecture decides (norm and its
  // eps key, RoPE order, activation, learned positions).
  void (*gguf_config)(const GgufFile& g, ModelConfig* c, const std::string& where) = nullptr;
  // The inverse on export: the architecture's own keys beyond the generic sizes, norm eps and RoPE base
  // (nullptr: none). Appends to `notes` what llama.cpp's graph for the architecture computes differently
  // from this config (it derives some values itself and ignores the keys that hold them).
  void (*gguf_write)(GgufWriter& w, const ModelConfig& c, std::vector<std::string>* notes) = nullptr;
  std::optional<RopeStyle> gguf_rope;  // q/k row order llama.cpp's graph for this arch expects (nullopt: as stored)
  bool gguf_fused_qkv = false;         // written as one blk.N.attn_qkv (q, k, v row blocks)
  bool gguf_explicit_output = false;   // output.weight written even when the head is tied
  // Layer tensors the architecture names its own way in GGUF: canonical leaf -> llama.cpp's name after "blk.N."
  // (with its suffix: "attn_qkv.weight", "ssm_a"); looked up before the generic table, both ways.
  std::vector<std::pair<std::string, std::string>> gguf_layer_names;
  // The bytes llama.cpp stores for canonical tensor t when they are not anelab's (nullopt: stored as held), and the
  // inverse on read (`stored` carries the canonical name and the file's dtype, shape and bytes); the shape is kept.
  std::optional<GgufTensorBytes> (*gguf_export_tensor)(const ModelConfig& c, const Tensor& t) = nullptr;
  std::optional<GgufTensorBytes> (*gguf_import_tensor)(const ModelConfig& c, const Tensor& stored,
                                                       const std::string& where) = nullptr;
  // The row / column reordering gguf_export_tensor applies to a canonical matrix [rows, cols], as index maps (stored
  // index i holds anelab's rows[i] / cols[i]; empty: unchanged), or nullptr for none: a GGUF LoRA adapter's B rows and
  // A columns follow it (models/io/adapter.h), so that B'·A' is the stored matrix's update.
  GgufMatrixOrder (*gguf_matrix_order)(const ModelConfig& c, const std::string& canonical, int64_t rows,
                                       int64_t cols) = nullptr;

  // ---- the layers ----
  // What each layer computes, in order, with its weights (framework/core/model_desc.h): the one description every
  // executor walks. The Llama-like architectures share decoder_desc (common.h).
  ModelDesc (*describe)(const ModelConfig& c) = nullptr;

  // ---- parameters ----
  // The parameters this architecture reads (ParamSpec above), each declared once in its file; any other key in
  // ModelConfig::params is refused by validate_config (legacy keys at their no-op value aside: common.h).
  std::vector<const ParamSpec*> params;

  // Config keys that files of earlier versions carried as booleans for what the architecture now implies by its
  // description (the optional tensors: "qk_norm" for q/k norms, ...): those it implies true. Such a key read from
  // a file (ModelConfig::params, 0 / 1) is accepted at 1 by an architecture that lists it and at 0 by any other,
  // refused otherwise naming it, and dropped (drop_legacy_params).
  std::vector<const char*> implied_flags;

  // ---- presets and rules ----
  std::vector<std::pair<std::string, ModelConfig>> presets;  // name -> config (models/presets.h)
  // Rules beyond validate_config_fields' generic ones (nullptr: none); throws naming the field and `where`.
  void (*validate)(const ModelConfig& c, const std::string& where) = nullptr;
};

// Every architecture, in table order.
const std::vector<const Arch*>& architectures();
const Arch* find_arch(std::string_view name);  // nullptr when unknown
// Throws "[model] WHERE: architecture 'X' is not supported (use llama, ...)".
const Arch& arch_of(std::string_view name, const std::string& where);
std::string arch_names();  // "llama, qwen2, gpt2" (table order)
// validate_config_fields (models/formats/model.h), then the architecture: throws "[model] WHERE: architecture 'X'
// is not supported (use llama, ...)", a parameter the architecture does not have or out of its range (Arch::params,
// one line naming it), or the architecture's own rule (Arch::validate) naming the field.
void validate_config(const ModelConfig& c, const std::string& where);
// Removes the parameters of c its architecture does not have and that files written before the parameter tables
// carried at their no-op value (validate_config accepts them; the readers of models/io call this, so a config
// loaded from such a file equals the one the architecture builds).
void drop_legacy_params(ModelConfig* c);
// The description of c (framework/core/model_desc.h), built by its architecture (Arch::describe); throws naming the
// architecture when it has none.
ModelDesc describe_model(const ModelConfig& c);
// The architecture a Hugging Face config.json names (model_type, else architectures[0]); throws naming `where`.
const Arch& arch_for_hf(const nlohmann::json& config, const std::string& where);

}  // namespace anelab::models
