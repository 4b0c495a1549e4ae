// Non-Apple hosts: the native ANE backend is known to the registry but unavailable.
#include "framework/ane/ane_backend.h"

namespace anelab::ane {

bool ane_available(std::string* why_not) {
  if (why_not)
    *why_not = "no Apple Neural Engine on this host (the native backend needs macOS on Apple Silicon); "
               "use --backend emulator";
  return false;
}

std::unique_ptr<rt::Backend> make_ane_backend(const rt::BackendOptions&) {
  std::string why;
  ane_available(&why);
  fail("backend", "ane: ", why);
}

}  // namespace anelab::ane
