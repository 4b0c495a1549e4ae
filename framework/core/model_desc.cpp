#include "framework/core/model_desc.h"

#include "framework/core/error.h"

namespace anelab::models {

const char* step_kind_name(StepKind k) {
  switch (k) {
    case StepKind::kAttention:
      return "attention";
    case StepKind::kFfn:
      return "ffn";
    case StepKind::kLinearAttention:
      return "linear attention";
  }
  return "?";
}

void unsupported(const char* component, const char* executor, int64_t layer, StepKind step, const std::string& what) {
  fail(component, "layer ", layer, " ", step_kind_name(step), ": ", what, " is not supported by ", executor);
}

}  // namespace anelab::models
