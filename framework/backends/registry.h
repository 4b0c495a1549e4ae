// The backend registry: names -> factories, chosen at run time (--backend emulator|ane). The one place that
// names the concrete backends (framework/emulator, framework/ane); library anelab_backends, above them and the
// runtime (docs/architecture.md).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/runtime/backend.h"

namespace anelab::rt {

struct BackendInfo {
  std::string name;
  std::string description;
  std::function<bool(std::string* why_not)> available;
  std::function<std::unique_ptr<Backend>(const BackendOptions&)> create;
};

// Known backends: "emulator" (always), "ane" (Apple hosts only; elsewhere unavailable with a reason).
const std::vector<BackendInfo>& backends();
// Creates a backend by name; throws anelab::Error naming the known backends, or the reason a known
// backend is unavailable on this host ("[backend] ane: no Apple Neural Engine on this host (...)").
std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& opts = {});

}  // namespace anelab::rt
