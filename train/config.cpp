#include "train/config.h"

#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <variant>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "train/lora.h"

namespace anelab::train {
namespace {

using Field =
    std::variant<std::string TrainConfig::*, int64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*>;
struct OptionDef {
  const char* key;  // toml key; the flag is "--" + key with '_' -> '-'
  Field field;
  const char* help;
  bool cli_only = false;  // not read from / written to config files
  bool path = false;      // a file/dir path: relative in a config file = relative to that file's directory
};

// A path as the saved config holds it: absolute (relative ones would mean "next to this file"), "" kept.
std::string saved_path(const std::string& p) {
  return p.empty() ? p : std::filesystem::absolute(p).lexically_normal().string();
}

const std::vector<OptionDef>& table() {
  using C = TrainConfig;
  static const std::vector<OptionDef> t = {
      {"config", &C::config, "experiment TOML file (flags override its values)", true},
      {"init", &C::init, "model file to start from (llama2.c .bin, .anelab, ...)", false, true},
      {"preset", &C::preset,
       "model preset for a seeded random init (stories260k, stories15m, stories110m, qwen3-0.6b-shape, ...)"},
      {"shape", &C::shape,
       "with --preset: a JSON object of model config fields replacing the preset's (as convert --random's --shape)"},
      {"data", &C::data, "token file: flat uint16 (llama2.c) or anelab tokens (with .json sidecar)", false, true},
      {"tokenizer", &C::tokenizer, "tokenizer for samples (default: none -> samples show ids)", false, true},
      {"run", &C::run, "run name (default: config file stem, else preset / init file stem)"},
      {"run_dir", &C::run_dir,
       "run directory for checkpoints, config and events.jsonl (default checkpoints/<run> in the current directory)",
       false, true},
      {"resume", &C::resume, "continue from <run-dir>/last.ckpt (bit-exact)", true},
      {"resume_or_start", &C::resume_or_start,
       "continue the run in --run-dir when it holds last.ckpt, else start it (a command to run again after a stop)",
       true},
      {"force", &C::force,
       "start in a non-empty --run-dir that is not an anelab run (its other files are kept; the run's are written)",
       true},
      {"steps", &C::steps, "total optimizer steps"},
      {"batch_size", &C::batch_size, "sequences per micro-batch"},
      {"seq_len", &C::seq_len, "tokens per sequence"},
      {"accum_steps", &C::accum_steps, "micro-batches accumulated per optimizer step"},
      {"stop_after", &C::stop_after, "stop after N steps in this process, with a checkpoint (0 = run to --steps)",
       true},
      {"lr", &C::lr, "maximum learning rate"},
      {"min_lr_frac", &C::min_lr_frac, "cosine floor as a fraction of --lr"},
      {"schedule", &C::schedule, "learning-rate schedule: constant | cosine"},
      {"warmup_steps", &C::warmup_steps, "linear warmup steps"},
      {"weight_decay", &C::weight_decay, "AdamW decoupled weight decay (not applied to norm weights)"},
      {"beta1", &C::beta1, "AdamW beta1"},
      {"beta2", &C::beta2, "AdamW beta2"},
      {"eps", &C::eps, "AdamW epsilon"},
      {"grad_clip", &C::grad_clip, "global gradient-norm clip (0 = off)"},
      {"loss_scale", &C::loss_scale, "loss scaling: static:N | dynamic[:INIT[:INTERVAL]] | none"},
      {"strategy", &C::strategy,
       "execution: cpu (fp32 reference) | static (baked weights) | dynamic (weights in inputs)"},
      {"compile_budget", &C::compile_budget,
       "compiles per process before checkpoint + exec-restart (-1: backend's; cpu: >0 simulates one)"},
      {"batching", &C::batching, "data order: random | sequential"},
      {"seed", &C::seed, "seed for random init and data order"},
      {"backend", &C::backend, "backend name for kernel strategies (emulator | ane)"},
      {"device", &C::device, "device profile for kernel strategies (default: the backend's)"},
      {"launcher", &C::launcher,
       "data-parallel group: auto (MPI when started by mpirun/mpiexec) | mpi | none (docs/training.md)", true},
      {"comm_overlap", &C::comm_overlap,
       "with several ranks, sum each layer's gradients while the lower layers' backward runs: on | off (same bits)"},
      {"lora", &C::lora,
       "LoRA fine-tuning: train adapters on the targeted projections, the base frozen (--strategy cpu; static: the "
       "base compiled into the kernels once; dynamic: the base staged into the kernels' inputs once; on both the "
       "adapters are kernel inputs; a quantized base is dequantized to fp32 once at load)"},
      {"lora_rank", &C::lora_rank, "LoRA rank r"},
      {"lora_alpha", &C::lora_alpha, "LoRA alpha (the adapters are scaled by alpha / r)"},
      {"lora_dropout", &C::lora_dropout, "dropout on the adapters' input during training"},
      {"lora_compute", &C::lora_compute,
       "--lora --strategy cpu: the frozen base's products in fp32 | bf16 (W and activations rounded to bf16, fp32 "
       "sums, "
       "as QLoRA's compute dtype)"},
      {"lora_targets", &C::lora_targets,
       "LoRA target modules: a comma list of q,k,v,o,gate,up,down,lin_qkv,lin_z,lin_b,lin_a,lin_out "
       "(lin_*: Qwen3.5's Gated DeltaNet projections; default all)"},
      {"mask_prompt", &C::mask_prompt,
       "JSONL data (--data FILE.jsonl: text, prompt/completion or chat messages): loss on the completions only "
       "(false: on every token)"},
      {"val_frac", &C::val_frac, "fraction of the data (tail) held out for validation"},
      {"eval_every", &C::eval_every, "validate every N steps (0 = only at the end)"},
      {"eval_batches", &C::eval_batches, "validation batches per evaluation"},
      {"sample_every", &C::sample_every, "generate a sample every N steps (0 = never)"},
      {"sample_tokens", &C::sample_tokens, "tokens per sample"},
      {"checkpoint_every", &C::checkpoint_every, "write last.ckpt every N steps (0 = at the end / stops only)"},
      {"quiet", &C::quiet, "no console progress lines", true},
  };
  return t;
}

std::string flag_name(const char* key) {
  std::string f = std::string("--") + key;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

std::string default_text(const Field& f) {
  static const TrainConfig d;
  return std::visit(
      [](auto p) -> std::string {
        std::ostringstream os;
        os << d.*p;
        return os.str();
      },
      f);
}

void set_from_text(TrainConfig& c, const OptionDef& o, const std::string& v, const std::string& where) {
  auto bad = [&](const char* why) { fail("train", where, " '", v, "': ", why); };
  std::visit(
      [&](auto p) {
        using T = std::remove_cvref_t<decltype(c.*p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          c.*p = v;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (v == "true" || v == "1")
            c.*p = true;
          else if (v == "false" || v == "0")
            c.*p = false;
          else
            bad("expected true or false");
        } else {
          size_t used = 0;
          try {
            if constexpr (std::is_same_v<T, int64_t>)
              c.*p = std::stoll(v, &used);
            else
              c.*p = std::stod(v, &used);
          } catch (const std::exception&) {
            used = 0;
          }
          if (used == 0 || used != v.size())
            bad(std::is_same_v<T, int64_t> ? "expected an integer" : "expected a number");
        }
      },
      o.field);
}

// A path as written in config file `config`: "~/..." is under $HOME; other relative paths are relative to the
// config file's directory (not the current one). Made absolute, so the saved config works from any directory.
std::string config_path(const std::string& v, const std::string& config) {
  namespace fs = std::filesystem;
  if (v.empty()) return v;
  fs::path p(v);
  if (v == "~" || v.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (!home || !*home) fail("train", "config ", config, ": '", v, "' starts with ~ but $HOME is not set");
    p = fs::path(home) / v.substr(std::min<size_t>(2, v.size()));
  } else if (p.is_relative()) {
    p = fs::path(config).parent_path() / p;
  }
  return fs::absolute(p).lexically_normal().string();
}

std::string toml_quote(const std::string& v) {
  std::string o = "\"";
  for (unsigned char ch : v) {
    if (ch == '"' || ch == '\\')
      o += '\\', o += char(ch);
    else if (ch < 0x20 || ch == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else
      o += char(ch);
  }
  return o + "\"";
}

}  // namespace

void register_options(CLI::App& cmd, std::vector<FlagSlot>* slots) {
  // --help groups: each starts at the table entry named here and runs to the next one (table order).
  static const std::vector<std::pair<std::string, const char*>> groups = {{"config", "Model and data"},
                                                                          {"steps", "Loop"},
                                                                          {"lr", "Optimizer"},
                                                                          {"strategy", "Execution"},
                                                                          {"val_frac", "Evaluation and output"}};
  const char* group = "Options";
  slots->clear();
  slots->resize(table().size());
  for (size_t i = 0; i < table().size(); ++i) {
    const OptionDef& o = table()[i];
    for (const auto& [first, name] : groups)
      if (first == o.key) group = name;
    FlagSlot& s = (*slots)[i];
    s.key = o.key;
    s.flag = std::holds_alternative<bool TrainConfig::*>(o.field);
    if (s.flag) {
      s.opt = cmd.add_flag(flag_name(o.key), o.help);
    } else {
      // Shown as the other commands show theirs: TYPE and the default (CLI11's "=VALUE").
      s.opt = cmd.add_option(flag_name(o.key), s.value, o.help)->default_str(default_text(o.field));
      s.opt->type_name(o.path                                                    ? "PATH"
                       : std::holds_alternative<int64_t TrainConfig::*>(o.field) ? "INT"
                       : std::holds_alternative<double TrainConfig::*>(o.field)  ? "FLOAT"
                                                                                 : "TEXT");
    }
    s.opt->group(group);
  }
}

bool flag_given(const std::vector<FlagSlot>& slots, const std::string& key) {
  for (const auto& s : slots)
    if (s.key == key) return s.opt && s.opt->count() > 0;
  return false;
}

void apply_flags(TrainConfig& c, const std::vector<FlagSlot>& slots) {
  for (size_t i = 0; i < slots.size() && i < table().size(); ++i) {
    const FlagSlot& s = slots[i];
    if (!s.opt || s.opt->count() == 0) continue;
    set_from_text(c, table()[i], s.flag ? "true" : s.value, flag_name(s.key.c_str()));
  }
}

// read_file_text: a FIFO or device is refused, not read.
void apply_toml_file(TrainConfig& c, const std::string& path) { apply_toml_text(c, read_file_text(path), path); }

void apply_toml_text(TrainConfig& c, std::string_view text, const std::string& path) {
  toml::table tbl;
  try {
    tbl = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description() << " at line " << e.source().begin.line;
    fail("train", "config ", path, ": ", os.str());
  }
  for (const auto& [k, node] : tbl) {
    const std::string key(k.str());
    const OptionDef* def = nullptr;
    for (const auto& o : table())
      if (key == o.key && !o.cli_only) def = &o;
    if (!def)
      fail("train", "config ", path, ": unknown key '", key, "' (keys are the flag names with '_', e.g. batch_size)");
    std::string text;
    if (auto s = node.value<std::string>(); s && node.is_string())
      text = *s;
    else if (node.is_integer())
      text = std::to_string(*node.value<int64_t>());
    else if (node.is_floating_point()) {
      std::ostringstream os;
      os.precision(17);
      os << *node.value<double>();
      text = os.str();
    } else if (node.is_boolean())
      text = *node.value<bool>() ? "true" : "false";
    else
      fail("train", "config ", path, ": key '", key, "' must be a string, number or boolean");
    if (std::holds_alternative<std::string TrainConfig::*>(def->field) && !node.is_string())
      fail("train", "config ", path, ": key '", key, "' must be a string");
    if (def->path) text = config_path(text, path);
    set_from_text(c, *def, text, "config " + path + ": " + key);
  }
  c.config = path;
}

nlohmann::json to_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& o : table()) {
    if (o.cli_only && std::string(o.key) != "config") continue;
    std::visit(
        [&](auto p) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(c.*p)>, std::string>)
            j[o.key] = o.path ? saved_path(c.*p) : c.*p;  // --resume from another directory finds them
          else
            j[o.key] = c.*p;
        },
        o.field);
  }
  return j;
}

void apply_json(TrainConfig& c, const nlohmann::json& j) {
  for (const auto& o : table()) {
    if (!j.contains(o.key) || o.cli_only) continue;
    std::visit(
        [&](auto p) {
          using T = std::remove_cvref_t<decltype(c.*p)>;
          const nlohmann::json& v = j.at(o.key);
          // An integer key takes a JSON integer only (converting 1e300 to int64 would be undefined behaviour).
          if (std::is_same_v<T, int64_t> && !v.is_number_integer())
            fail("train", "saved config: key '", o.key, "' must be an integer, got ", v.dump());
          try {
            c.*p = v.get<T>();
          } catch (const std::exception&) {
            fail("train", "saved config: key '", o.key, "' has the wrong type");
          }
        },
        o.field);
  }
}

// The shortest decimal that reads back as exactly x ("0.003", not "0.0030000000000000001"), always a TOML float.
std::string toml_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char b[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, x);
    if (std::strtod(b, nullptr) == x) break;
  }
  std::string s = b;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string to_toml(const TrainConfig& c) {
  std::ostringstream os;
  os << "# resolved configuration written by `anelab train` (load with --config)\n";
  os.precision(17);
  for (const auto& o : table()) {
    if (o.cli_only) continue;
    std::visit(
        [&](auto p) {
          using T = std::remove_cvref_t<decltype(c.*p)>;
          os << o.key << " = ";
          if constexpr (std::is_same_v<T, std::string>)  // paths absolute: relative ones would mean "next to this file"
            os << toml_quote(o.path ? saved_path(c.*p) : c.*p);
          else if constexpr (std::is_same_v<T, bool>)
            os << (c.*p ? "true" : "false");
          else if constexpr (std::is_same_v<T, double>)
            os << toml_float(c.*p);
          else
            os << c.*p;
          os << "\n";
        },
        o.field);
  }
  return os.str();
}

void validate(const TrainConfig& c) {
  auto need = [](bool ok, const char* flag, auto value, const char* why) {
    if (!ok) fail("train", flag, " ", value, ": ", why);
  };
  need(c.init.empty() != c.preset.empty() || c.resume, "--init/--preset", c.init + c.preset,
       "give exactly one of --init FILE or --preset NAME");
  need(c.shape.empty() || !c.preset.empty(), "--shape", c.shape, "goes with --preset NAME");
  need(!c.data.empty(), "--data", "''", "a token file is required");
  need(c.steps > 0, "--steps", c.steps, "must be > 0");
  need(c.batch_size > 0 && c.batch_size <= 4096, "--batch-size", c.batch_size, "must be in [1, 4096]");
  need(c.seq_len > 0 && c.seq_len <= 65536, "--seq-len", c.seq_len, "must be in [1, 65536]");
  need(c.accum_steps > 0, "--accum-steps", c.accum_steps, "must be > 0");
  need(c.stop_after >= 0, "--stop-after", c.stop_after, "must be >= 0");
  need(c.lr > 0 && std::isfinite(c.lr), "--lr", c.lr, "must be a positive number");
  need(c.min_lr_frac >= 0 && c.min_lr_frac <= 1, "--min-lr-frac", c.min_lr_frac, "must be in [0, 1]");
  need(c.schedule == "constant" || c.schedule == "cosine", "--schedule", c.schedule, "must be constant or cosine");
  need(c.warmup_steps >= 0, "--warmup-steps", c.warmup_steps, "must be >= 0");
  need(c.weight_decay >= 0, "--weight-decay", c.weight_decay, "must be >= 0");
  need(c.beta1 >= 0 && c.beta1 < 1, "--beta1", c.beta1, "must be in [0, 1)");
  need(c.beta2 >= 0 && c.beta2 < 1, "--beta2", c.beta2, "must be in [0, 1)");
  need(c.eps > 0, "--eps", c.eps, "must be > 0");
  need(c.grad_clip >= 0, "--grad-clip", c.grad_clip, "must be >= 0 (0 = off)");
  need(c.strategy == "cpu" || c.strategy == "static" || c.strategy == "dynamic", "--strategy", c.strategy,
       "must be static, dynamic or cpu");
  need(c.compile_budget >= -1, "--compile-budget", c.compile_budget, "must be -1 or >= 0");
  need(c.backend == "emulator" || c.backend == "ane", "--backend", c.backend,
       "must be emulator or ane (the backends of the kernel strategies; --strategy cpu is the CPU path)");
  need(c.launcher == "auto" || c.launcher == "mpi" || c.launcher == "none", "--launcher", c.launcher,
       "must be auto, mpi or none");
  need(c.comm_overlap == "on" || c.comm_overlap == "off", "--comm-overlap", c.comm_overlap, "must be on or off");
  need(c.batching == "random" || c.batching == "sequential", "--batching", c.batching, "must be random or sequential");
  need(c.val_frac >= 0 && c.val_frac <= 0.5, "--val-frac", c.val_frac, "must be in [0, 0.5]");
  need(c.eval_every >= 0, "--eval-every", c.eval_every, "must be >= 0");
  need(c.eval_batches >= 0, "--eval-batches", c.eval_batches, "must be >= 0");
  need(c.sample_every >= 0, "--sample-every", c.sample_every, "must be >= 0");
  need(c.sample_tokens > 0, "--sample-tokens", c.sample_tokens, "must be > 0");
  need(c.checkpoint_every >= 0, "--checkpoint-every", c.checkpoint_every, "must be >= 0");
  need(c.lora_compute == "fp32" || c.lora_compute == "bf16", "--lora-compute", c.lora_compute, "must be fp32 or bf16");
  need(c.lora_compute == "fp32" || (c.lora && c.strategy == "cpu"), "--lora-compute", c.lora_compute,
       "needs --lora --strategy cpu (the kernel strategies and full training compute in their own types)");
  if (c.lora) validate_lora(c);
}

void validate_lora(const TrainConfig& c) {
  auto need = [](bool ok, const char* flag, auto value, const char* why) {
    if (!ok) fail("train", flag, " ", value, ": ", why);
  };
  need(c.lora_rank > 0 && c.lora_rank <= 65536, "--lora-rank", c.lora_rank, "must be in [1, 65536]");
  need(c.lora_alpha > 0 && std::isfinite(c.lora_alpha), "--lora-alpha", c.lora_alpha, "must be a positive number");
  need(c.lora_dropout >= 0 && c.lora_dropout < 1, "--lora-dropout", c.lora_dropout, "must be in [0, 1)");
  need(c.compile_budget <= 0 || c.strategy != "cpu", "--lora: --compile-budget", c.compile_budget,
       "is not simulated for LoRA on --strategy cpu");
  parse_lora_targets(c.lora_targets);  // throws naming the bad entry
}

void resolve_names(TrainConfig& c) {
  namespace fs = std::filesystem;
  if (c.run.empty()) {
    if (!c.config.empty())
      c.run = fs::path(c.config).stem().string();
    else if (!c.preset.empty())
      c.run = c.preset;
    else if (!c.init.empty())
      c.run = fs::path(c.init).stem().string();
    else
      c.run = "run";
  }
  if (c.run_dir.empty()) c.run_dir = (fs::path("checkpoints") / c.run).string();
}

}  // namespace anelab::train
