#include "framework/cli/commands.h"

namespace anelab::cli {
void add_bench_commands(CLI::App& app) {}  // placeholder until this area lands
}  // namespace anelab::cli
