// The native ANE backend (macOS, AppleNeuralEngine.framework through a private-API shim; see
// native_backend.h and docs/native_backend.md).
// On other hosts it is registered but unavailable, and says why.
#pragma once
#include <memory>
#include <string>

#include "framework/runtime/backend.h"

namespace anelab::ane {
bool ane_available(std::string* why_not);
std::unique_ptr<rt::Backend> make_ane_backend(const rt::BackendOptions& opts);
}  // namespace anelab::ane
