// The ANE emulator backend: executes parsed MIL programs on the CPU with the ANE's fp16 storage
// semantics, enforcing the device profile's limits. See framework/emulator/README.md.
#pragma once
#include <memory>

#include "framework/runtime/backend.h"

namespace anelab::emu {
std::unique_ptr<rt::Backend> make_emulator_backend(const rt::BackendOptions& opts);
}  // namespace anelab::emu
