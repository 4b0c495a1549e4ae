// The trainer's resolved configuration: ONE option table (kOptions in config.cpp) declares every option
// once — CLI flag, TOML key (the flag name with '-' -> '_'), help text with the default, type — and drives
// CLI registration, `--config FILE.toml` loading, flag overrides, and the saved config.toml/config.json.
// Precedence: defaults < --config file < (on --resume: the run dir's saved config.json) < explicit flags.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace anelab::train {

struct TrainConfig {
  // model + data
  std::string config;     // --config file it came from (informational)
  std::string init;       // model file (llama2.c / anelab / ...) to start from
  std::string preset;     // or a preset name for a seeded random init
  std::string shape;      // with preset: a JSON object of model config fields replacing the preset's
  std::string data;       // token file
  std::string tokenizer;  // for samples (default: the model's embedded/side tokenizer)
  std::string run;        // run name (default: config stem, else preset/init stem)
  std::string run_dir;    // default checkpoints/<run>
  bool resume = false;
  bool resume_or_start = false;  // resume when run_dir holds last.ckpt, else start (cli/train_cmd.cpp)
  bool force = false;            // a fresh start in a non-empty directory that is not a run (train/run_dir.h)
  // loop
  int64_t steps = 100;
  int64_t batch_size = 4;
  int64_t seq_len = 256;
  int64_t accum_steps = 1;
  int64_t stop_after = 0;  // stop (with a checkpoint) after this many steps in this process
  // optimizer
  double lr = 3e-4;
  double min_lr_frac = 0.1;
  std::string schedule = "cosine";  // constant | cosine
  int64_t warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;
  std::string loss_scale = "static:256";
  // execution
  std::string strategy = "cpu";     // static | dynamic | cpu
  int64_t compile_budget = -1;      // -1: the backend's; cpu strategy: >0 simulates a budget
  std::string batching = "random";  // random | sequential
  int64_t seed = 42;
  std::string backend = "emulator";
  std::string device;               // device profile ("" = backend default)
  std::string launcher = "auto";    // data-parallel group (train/dist.h): auto | mpi | none
  std::string comm_overlap = "on";  // gradient sum during the backward (train/dist_overlap.h): on | off
  // LoRA (train/lora.h): adapters trained, the base frozen
  bool lora = false;
  int64_t lora_rank = 8;
  double lora_alpha = 16;
  double lora_dropout = 0;
  std::string lora_compute = "fp32";  // the frozen base's products: fp32 | bf16 (train/bf16_linalg.h)
  std::string lora_targets = "q,k,v,o,gate,up,down,lin_qkv,lin_z,lin_b,lin_a,lin_out";  // train/lora.h kLoraAllTargets
  bool mask_prompt = true;  // JSONL data: loss on completion tokens only
  // evaluation / output
  double val_frac = 0.05;
  int64_t eval_every = 0;  // 0 = only at the end
  int64_t eval_batches = 8;
  int64_t sample_every = 0;
  int64_t sample_tokens = 64;
  int64_t checkpoint_every = 0;  // 0 = only at the end (and at stops/restarts)
  bool quiet = false;
};

// CLI slots filled by CLI11; only options that were given on the command line override.
struct FlagSlot {
  std::string key;    // table key, e.g. "batch_size"
  std::string value;  // raw text (bool flags: "true")
  bool flag = false;  // bool flag
  CLI::Option* opt = nullptr;
};
// Adds every option of the table to `cmd` (text-typed; values are parsed and validated by apply_flags).
// `slots` must outlive parsing; it is resized here (do not resize it afterwards).
void register_options(CLI::App& cmd, std::vector<FlagSlot>* slots);
// Applies the slots whose option was given; throws "[train] --flag VALUE: why" on unparsable values.
void apply_flags(TrainConfig& c, const std::vector<FlagSlot>& slots);
bool flag_given(const std::vector<FlagSlot>& slots, const std::string& key);
// Loads a TOML file over c (unknown keys and wrongly typed values are errors naming the key). Paths in it
// (init, data, tokenizer, run_dir) are relative to the file's directory ("~/" = $HOME) and made absolute.
void apply_toml_file(TrainConfig& c, const std::string& path);
// The same over the file's text (`path` names it in errors and anchors its relative paths).
void apply_toml_text(TrainConfig& c, std::string_view text, const std::string& path);
// Loads a saved config.json over c.
void apply_json(TrainConfig& c, const nlohmann::json& j);
nlohmann::json to_json(const TrainConfig& c);
std::string to_toml(const TrainConfig& c);
// Checks ranges and enumerations; throws "[train] --flag VALUE: why" on the first bad value.
void validate(const TrainConfig& c);
// The LoRA fields' checks of validate (--lora-rank, --lora-alpha, --lora-dropout, --lora-targets),
// also `estimate train --lora`'s.
void validate_lora(const TrainConfig& c);
// Resolves run name / run dir defaults.
void resolve_names(TrainConfig& c);

}  // namespace anelab::train
