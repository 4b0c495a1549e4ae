// The backend registry (see registry.h).
#include "framework/backends/registry.h"

#include "framework/ane/ane_backend.h"
#include "framework/emulator/emulator.h"

namespace anelab::rt {

const std::vector<BackendInfo>& backends() {
  static const std::vector<BackendInfo> list = {
      {"emulator", "ANE emulator: runs the MIL the ANE would get on the CPU with fp16 semantics and device limits",
       [](std::string*) { return true; }, [](const BackendOptions& o) { return emu::make_emulator_backend(o); }},
      {"ane", "native Apple Neural Engine through AppleNeuralEngine.framework (macOS on Apple Silicon)",
       [](std::string* why) { return ane::ane_available(why); },
       [](const BackendOptions& o) { return ane::make_ane_backend(o); }},
  };
  return list;
}

std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& opts) {
  std::string known;
  for (const auto& b : backends()) {
    if (b.name == name) {
      std::string why;
      if (!b.available(&why)) fail("backend", name, ": ", why);
      return b.create(opts);
    }
    known += (known.empty() ? "" : ", ") + b.name;
  }
  fail("backend", "unknown backend '", name, "' (known: ", known, ")");
}

}  // namespace anelab::rt
