// One loader for everything that runs a model (the CLI's `infer` commands and the HTTP server): the model
// file (any format, models/io/load_any.h), its tokenizer (--tokenizer, else the one embedded in the
// file, else the file the model names), the chat template the tokenizer supports, and the engine options
// (--dtype auto resolved against the file). Errors start with the caller's component ("[infer]",
// "[serve]") and name the model file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/file.h"
#include "infer/engine.h"
#include "models/formats/model.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::infer {

struct LoadOptions {
  std::string model, tokenizer;  // tokenizer "": the model's own
  std::string backend = "auto", device = rt::kDefaultDevice, dtype = "auto";
  std::string ane_weights = "fp16";    // MIL prefill weights (EngineOptions::ane_weights)
  std::string chat_template = "auto";  // tok::chat_template_for
  int threads = 2;
  int64_t ctx = 0;              // 0: the model's max_seq_len
  std::string kv_type = "f32";  // KV-cache element type, f32 | f16 (EngineOptions::kv_type)
  std::string mmap = "auto";    // on | off | auto: how the weights come into memory (resolve_file_access)
  bool quiet = false;
  std::string component = "infer";  // error prefix
  // LoRA adapters (models/io/adapter.h: PEFT directories or GGUF adapters) merged into the weights at load:
  // W + lora_scale[i] * alpha/r * B·A in fp32; the adapted matrices stay fp32 (the others as stored).
  std::vector<std::string> lora;
  std::vector<float> lora_scale;  // per adapter (missing: 1)
  // Read the adapters into LoadedModel::adapters instead of merging them (the server's runtime adapters:
  // Engine::add_lora); the weights stay the base's.
  bool lora_runtime = false;
};

struct LoadedModel {
  models::Model model;
  std::unique_ptr<tok::Tokenizer> tokenizer;  // null when not asked for
  std::string tokenizer_source;               // the path, or "embedded in MODEL"
  tok::ChatTemplate chat = tok::ChatTemplate::kNone;
  EngineOptions engine;        // for Engine(std::move(model), engine)
  std::string weights_memory;  // how the file came in: "mmap" or "read, THP madvise: 506 MiB in huge pages"
  std::vector<models::LoraAdapter> adapters;  // LoadOptions::lora, read, when lora_runtime (in --lora order)
};

// --mmap: "on" maps the model file (pages shared with the page cache, brought in on first touch), "off" reads
// it into anonymous memory with huge pages advised (framework/core/file.h FileAccess::kRead), "auto" reads
// where the OS gives transparent huge pages (Linux with THP "always" or "madvise") and the file takes at most
// half of the available memory, else maps. `why` (when given) receives the reason for auto's choice.
inline constexpr const char* kMmapHelp =
    "How the model file comes into memory: on (mmap), off (read into anonymous memory with transparent huge pages "
    "advised: fewer TLB misses when every weight streams per token, and Q8_0 / Q4_K matrices rewritten as 16-row tiles "
    "for "
    "the decode GEMV), auto (off where the OS has transparent huge pages and the file is at most half the available "
    "memory, else on)";
FileAccess resolve_file_access(const std::string& mode, const std::string& model, std::string* why = nullptr);

enum class TokenizerUse {
  kNone,      // not loaded
  kRequired,  // "[component] MODEL has no tokenizer: pass --tokenizer PATH" when there is none
  kIfAny,     // loaded when the model has one (or --tokenizer names one), else left null
};

// Reads the model and resolves the engine options; per `use` also the tokenizer (checked to fit the
// model's vocabulary) and its chat template.
LoadedModel load_model(const LoadOptions& o, TokenizerUse use);

// The tokenizer of a loaded model: o.tokenizer, else the embedded vocabulary, else the model's tokenizer
// path; null (no throw) when there is none. `source` receives where it came from.
std::unique_ptr<tok::Tokenizer> model_tokenizer(const models::Model& m, const LoadOptions& o, std::string* source);

// A draft model for `target` (--model-draft): the same vocab_size and, when both have a tokenizer, the same token
// texts (ids both define); else throws "[component] the draft model D does not share the vocabulary of T: ..." naming
// both files.
void check_draft_vocabulary(const models::Model& target, const tok::Tokenizer* target_tk,
                            const std::string& target_name, const models::Model& draft, const tok::Tokenizer* draft_tk,
                            const std::string& draft_name, const std::string& component);
// The draft model of speculative decoding (infer/generate.h GenerateOptions::draft): the file `draft` loaded with the
// target's options (backend, dtype, threads, KV type, component; its own tokenizer if it has one, no LoRA), the
// context `ctx` (the target engine's), checked against the target (check_draft_vocabulary). A draft model with
// linear-attention layers is refused (its recurrent state cannot drop rejected drafts). `slots` as EngineOptions.
LoadedModel load_draft_model(const LoadOptions& target, const std::string& draft, int64_t ctx, int64_t slots,
                             const models::Model& target_model, const tok::Tokenizer* target_tk);

}  // namespace anelab::infer
