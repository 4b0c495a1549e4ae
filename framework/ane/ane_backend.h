// The native ANE backend (macOS, AppleNeuralEngine.framework through a private-API shim; see
// native_backend.h and docs/native_backend.md).
// On other hosts it is registered but unavailable, and says why.
#pragma once
#include <memory>
#include <string>

#include "framework/ane/shim.h"
#include "framework/runtime/backend.h"

namespace anelab::ane {
bool ane_available(std::string* why_not);
std::unique_ptr<rt::Backend> make_ane_backend(const rt::BackendOptions& opts);

// The shim ANELAB_ANE_SHIM=fake puts under the "ane" backend. The fake shim lives with the tests'
// support code (tests/support/fake_shim.h, target anelab_fake_shim); the programs that link it (the
// anelab CLI, tests) install its factory once at start. Without one, ANELAB_ANE_SHIM=fake is refused.
using FakeShimFactory = std::unique_ptr<Shim> (*)(const std::string& device);
void install_fake_shim(FakeShimFactory factory);
}  // namespace anelab::ane
