// The ANE emulator backend: executes parsed MIL programs on the CPU with the ANE's fp16 storage
// semantics, enforcing the device profile's limits. See framework/emulator/README.md.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "framework/runtime/backend.h"

namespace anelab::emu {
std::unique_ptr<rt::Backend> make_emulator_backend(const rt::BackendOptions& opts);

// The ops the emulator lowers (every one is a registered MIL op).
std::vector<std::string> lowered_ops();
// Registered ops the emulator does not lower, each with the reason.
struct UnloweredOp {
  std::string op, reason;
};
const std::vector<UnloweredOp>& unlowered_ops();
}  // namespace anelab::emu
