#include "infer/prefill_mil.h"

#include "infer/engine.h"

namespace anelab::infer {

int64_t prefill_bucket(int64_t n, int64_t context) {
  int64_t s = 32;
  while (s < n && s < context) s *= 2;
  return std::min(s, context);
}

MilPrefill::MilPrefill(Engine& e, const std::string& backend, const std::string& device, bool quiet) : e_(e), quiet_(quiet) {
  rt::BackendOptions bo;
  bo.device = device;
  bo.threads = e.options().threads;
  backend_ = rt::create_backend(backend, bo);
}
MilPrefill::~MilPrefill() = default;

bool MilPrefill::run(std::span<const int32_t>, int64_t, std::vector<float>*, PrefillStats&) { return false; }

}  // namespace anelab::infer
