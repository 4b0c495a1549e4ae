// Non-Apple hosts: there is no AppleNeuralEngine.framework, so no system shim can be created and the
// "ane" backend is registered but unavailable. (On Apple hosts CMake compiles shim_apple.mm instead.)
#include "framework/ane/shim.h"

namespace anelab::ane {

std::unique_ptr<Shim> create_system_shim(std::string* why_not) {
  if (why_not)
    *why_not =
        "no Apple Neural Engine on this host (the native backend needs macOS on Apple Silicon); "
        "use --backend emulator";
  return nullptr;
}

}  // namespace anelab::ane
