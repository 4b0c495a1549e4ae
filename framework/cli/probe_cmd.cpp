#include "framework/cli/commands.h"

namespace anelab::cli {
void add_probe_command(CLI::App& app) {}  // placeholder until this area lands
}  // namespace anelab::cli
