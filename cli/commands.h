// Subcommand registration: each area adds its subcommands to the one `anelab` program.
// Handlers throw anelab::Error on failure; main() prints one line and exits non-zero.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "infer/params_check.h"
#include "models/formats/model.h"

namespace anelab::cli {
void add_mil_commands(CLI::App& app);        // cli/mil_cmd.cpp:      anelab mil check|print|run
void add_bench_commands(CLI::App& app);      // cli/bench_cmd.cpp:    anelab bench emulator
void add_demo_command(CLI::App& app);        // cli/demo_cmd.cpp:     anelab demo (README main job)
void add_model_commands(CLI::App& app);      // cli/models_cmd.cpp:   anelab convert|export|info
void add_tokenize_command(CLI::App& app);    // cli/tokenize_cmd.cpp: anelab tokenize
void add_train_command(CLI::App& app);       // cli/train_cmd.cpp:    anelab train (+ bench train)
void add_infer_command(CLI::App& app);       // cli/infer_cmd.cpp:    anelab infer generate|chat|logits|bench
void add_perplexity_command(CLI::App& app);  // cli/perplexity_cmd.cpp: anelab perplexity
void add_serve_command(CLI::App& app);       // cli/serve_cmd.cpp:    anelab serve
void add_dashboard_command(CLI::App& app);   // cli/dashboard_cmd.cpp: anelab dashboard
void add_probe_command(CLI::App& app);       // cli/probe_cmd.cpp:    anelab probe
void add_power_command(CLI::App& app);       // cli/power_cmd.cpp:    anelab power
void add_estimate_command(CLI::App& app);    // cli/estimate_cmd.cpp: anelab estimate train|infer|mil, --calibrate

// cli/usage.cpp: an unknown subcommand or option in argv, as one line naming the closest known
// name ("unknown command 'trian'; did you mean 'train'? ..."), or nullopt; checked before CLI11 parses.
std::optional<std::string> usage_error(CLI::App& app, int argc, const char* const* argv);
// A numeric option's range, with a plain message ("--temperature: must be >= 0 (got -1)"); hi = infinity
// for no upper bound; above_lo: the value must be > lo.
CLI::Validator number_in(double lo, double hi, bool above_lo = false);
// The same for a parameter of the shared table (infer/params_check.h), which the server's parser also asks.
CLI::Validator number_in(const infer::ParamRange& r);
// The name in `names` closest to `word` (edit distance, prefixes count as close), or "" when none is close.
std::string closest_name(const std::string& word, const std::vector<std::string>& names);
// cli/estimate_cmd.cpp: one line with the cost model's prefill tok/s for `prompt_tokens` and decode tok/s of config c
// on `device` ("auto": the fallback profile's chip), or "no estimate: <why>" (`infer bench` prints it next to its
// numbers).
std::string estimate_infer_note(const models::ModelConfig& c, int64_t prompt_tokens, const std::string& device);
// The same for a training step of `preset` under each of the strategies named in `strategies` ("dynamic,static"; "cpu"
// gives ""), one line each (`bench train` prints them under its measurements).
std::string estimate_train_note(const std::string& preset, const std::string& strategies, int64_t seq);
}  // namespace anelab::cli
