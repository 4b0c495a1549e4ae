// Subcommand registration: each area adds its subcommands to the one `anelab` program.
// Handlers throw anelab::Error on failure; main() prints one line and exits non-zero.
#pragma once
#include <CLI/CLI.hpp>

namespace anelab::cli {
void add_mil_commands(CLI::App& app);       // framework/cli/mil_cmd.cpp:      anelab mil check|print|run
void add_bench_commands(CLI::App& app);     // framework/cli/bench_cmd.cpp:    anelab bench emulator
void add_demo_command(CLI::App& app);       // framework/cli/demo_cmd.cpp:     anelab demo (README main job)
void add_model_commands(CLI::App& app);     // framework/cli/models_cmd.cpp:   anelab convert|export|info
void add_tokenize_command(CLI::App& app);   // framework/cli/tokenize_cmd.cpp: anelab tokenize
void add_train_command(CLI::App& app);      // framework/cli/train_cmd.cpp:    anelab train (+ bench train)
void add_infer_command(CLI::App& app);      // framework/cli/infer_cmd.cpp:    anelab infer generate|chat|bench
void add_serve_command(CLI::App& app);      // framework/cli/serve_cmd.cpp:    anelab serve
void add_dashboard_command(CLI::App& app);  // framework/cli/dashboard_cmd.cpp: anelab dashboard
void add_probe_command(CLI::App& app);      // framework/cli/probe_cmd.cpp:    anelab probe
void add_power_command(CLI::App& app);      // framework/cli/power_cmd.cpp:    anelab power
}  // namespace anelab::cli
