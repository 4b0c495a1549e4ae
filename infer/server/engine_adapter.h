// The one place where `anelab serve` touches the inference API (infer/engine.h, infer/generate.h,
// models/tokenizer/chat_template.h).
//
// Generator is what the HTTP layer needs from a model; ModelPool implements it over one Engine with N slots (a KV cache
// each, EngineOptions::slots) shared by the N generation workers through continuous batching (infer/batch.h: the
// workers' decode steps run together, prompts are prefilled in chunks between them); the tokenizer is shared (it is
// thread-safe). Memory: the weights once, the KV cache N times. A model with linear-attention layers (one recurrent
// state per engine) gets N engines instead, one per worker, each with its weights and KV cache.
// LoRA adapters (--lora) are runtime products of the engines (Engine::add_lora), not merged: each request runs with
// its own scales (its `lora` field, else the global ones of POST /lora-adapters) on its slot, so requests with
// different adapters share a batch; a worker's prompt cache is reused only by a request with the same scales.
// Prompt cache: a request takes the longest cached prefix of its prompt among its slot, the other idle slots and the
// prompt store of --cache-ram (infer/server/prompt_store.h), into which a slot's sequence moves when the slot is taken
// for another prompt; --slot-save-path saves and restores a slot's sequence to a file (slot_action).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "framework/runtime/device_profile.h"
#include "infer/load.h"
#include "infer/server/api.h"
#include "infer/server/scheduler.h"

namespace anelab::serve {

class Generator {
 public:
  virtual ~Generator() = default;
  virtual int64_t context() const = 0;
  // Request -> token prompt and generation parameters, or a 4xx error (prompt over the context,
  // token ids outside the vocabulary, text the tokenizer rejects).
  virtual std::optional<ApiError> prepare(const CompletionRequest& r, GenParams& out) const = 0;
  // Runs a job on worker w; streams text through job.push_text; stops at the next token once
  // job.cancel is set (stop_reason "cancelled").
  virtual GenOutcome run(size_t w, Job& job) = 0;
  virtual nlohmann::json info() const = 0;           // for /v1/models and /health
  virtual BatchFigures batch() const { return {}; }  // for /metrics and /slots
  // llama.cpp's /tokenize and /detokenize: the ids of text (add_special: BOS where the tokenizer adds one),
  // with each id's piece when pieces is given; the text of ids (ids outside the vocabulary are a 400). A
  // generator without a tokenizer answers 501.
  virtual std::optional<ApiError> tokenize(const std::string& text, bool add_special, std::vector<int32_t>& ids,
                                           std::vector<std::string>* pieces) const;
  virtual std::optional<ApiError> detokenize(const std::vector<int64_t>& ids, std::string& text) const;
  // llama.cpp's /lora-adapters: the adapters loaded with --lora, [{"id", "path", "scale"}] with their global scales
  // (what a request without a `lora` field uses: --lora-scale, default 1); set_lora sets the global scales from
  // [{id, scale}], an adapter not listed getting 0 (an id that is not an adapter: 400 naming the entry).
  virtual nlohmann::json lora_adapters() const { return nlohmann::json::array(); }
  virtual std::optional<ApiError> set_lora(const std::vector<LoraScale>& scales);
  // llama.cpp's POST /slots/{id}?action=save|restore|erase (`filename` for save and restore, a name inside
  // --slot-save-path): out gets the answer (id_slot, filename, n_saved / n_restored / n_erased, n_written / n_read,
  // timings {save_ms | restore_ms}); a slot generating now is a 409, a bad name or file a 400 naming it. A generator
  // without slot files answers 501.
  virtual std::optional<ApiError> slot_action(size_t slot, SlotAction a, const std::string& filename,
                                              nlohmann::json& out);
  // For /slots: slot w's LoRA scales [{id, scale}] (of its current or last request, else the global ones) and the
  // tokens its cache holds ("n_cached").
  virtual nlohmann::json slot_state(size_t) const { return nlohmann::json::object(); }
  virtual PromptCacheFigures prompt_cache() const { return {}; }  // for /metrics
};

struct ModelOptions {
  // model file, tokenizer, backend, device, dtype, chat template (chat requests are 400 for a model without
  // one), threads, ctx, kv_type; mmap auto maps the file when there are several workers (each worker's engine
  // loads it: mapped pages are shared, read copies are not). quiet and component are set by the pool.
  infer::LoadOptions load;
  int64_t warmup_tokens = 512;  // compile the prefill buckets for prompts up to this many tokens at start
  std::string name;             // model id in responses (default: the model file's name)
  int32_t draft_max = 0;        // speculative decoding with prompt-lookup drafts (infer::GenerateOptions)
  std::string draft_model;      // with a draft model instead (--model-draft; draft_max 0: infer::kDefaultDraftMax)
  int64_t batch_chunk = 128;    // continuous batching: the most prompt tokens of one slot prefilled per step
  int64_t cache_ram_mib = 0;    // --cache-ram: the prompt store's bound in MiB (prompt_store.h); 0: off, -1: no bound
  std::string slot_save_path;   // --slot-save-path: the directory of slot files; empty: slot save / restore refused
  std::function<void(const std::string&)> progress;  // start-up progress lines (load, warm-up); empty: silent
};

class ModelPool final : public Generator {
 public:
  ModelPool(const ModelOptions& o, size_t workers);
  ~ModelPool() override;
  int64_t context() const override;
  std::optional<ApiError> prepare(const CompletionRequest& r, GenParams& out) const override;
  GenOutcome run(size_t w, Job& job) override;
  nlohmann::json info() const override;
  BatchFigures batch() const override;
  std::optional<ApiError> tokenize(const std::string& text, bool add_special, std::vector<int32_t>& ids,
                                   std::vector<std::string>* pieces) const override;
  std::optional<ApiError> detokenize(const std::vector<int64_t>& ids, std::string& text) const override;
  nlohmann::json lora_adapters() const override;
  std::optional<ApiError> set_lora(const std::vector<LoraScale>& scales) override;
  std::optional<ApiError> slot_action(size_t slot, SlotAction a, const std::string& filename,
                                      nlohmann::json& out) override;
  nlohmann::json slot_state(size_t slot) const override;
  PromptCacheFigures prompt_cache() const override;
  double load_ms() const { return load_ms_; }
  double warmup_ms() const { return warmup_ms_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  double load_ms_ = 0, warmup_ms_ = 0;
};

}  // namespace anelab::serve
