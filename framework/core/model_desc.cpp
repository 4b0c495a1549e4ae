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

std::vector<StepNorm> step_norms(const Step& s, int64_t dim) {
  std::vector<StepNorm> out;
  auto add = [&](const std::optional<NormDesc>& n, int64_t width) {
    if (n) out.push_back({&*n, width});
  };
  add(s.pre_norm, dim);
  add(s.post_norm, dim);
  switch (s.kind) {
    case StepKind::kAttention:
      add(s.attn.q_norm, s.attn.head_dim);
      add(s.attn.k_norm, s.attn.head_dim);
      break;
    case StepKind::kFfn:
      break;
    case StepKind::kLinearAttention:
      out.push_back({&s.deltanet.norm, s.deltanet.v_dim});
      break;
  }
  return out;
}

void unsupported(const char* component, const char* executor, int64_t layer, StepKind step, const std::string& what) {
  fail(component, "layer ", layer, " ", step_kind_name(step), ": ", what, " is not supported by ", executor);
}

}  // namespace anelab::models
