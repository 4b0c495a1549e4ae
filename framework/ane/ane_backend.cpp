// The "ane" registry entry: the portable NativeBackend over the host's system shim. The backend is
// unavailable exactly when the shim cannot be created (every non-Apple host, or a Mac whose
// AppleNeuralEngine.framework cannot be loaded), and the reason is the shim's.
#include "framework/ane/ane_backend.h"

#include "framework/ane/native_backend.h"
#include "framework/ane/shim.h"

namespace anelab::ane {

bool ane_available(std::string* why_not) {
  return create_system_shim(why_not) != nullptr;
}

std::unique_ptr<rt::Backend> make_ane_backend(const rt::BackendOptions& opts) {
  std::string why;
  std::unique_ptr<Shim> shim = create_system_shim(&why);
  if (!shim) fail("backend", "ane: ", why);
  return std::make_unique<NativeBackend>(std::move(shim), opts);
}

}  // namespace anelab::ane
