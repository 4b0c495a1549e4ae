#include "dashboard/system_stats.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace anelab::dashboard {

MachineCpu::MachineCpu(TickSource source) : source_(std::move(source)) {}

bool MachineCpu::sample() {
  const auto t = source_();
  if (!t) {
    reason_ = t.reason;
    return false;
  }
  cores_ = t->cores;
  const auto pct = primed_ ? platform::cpu_percent(last_, *t) : platform::Reading<double>::unavailable("first sample");
  last_ = *t, primed_ = true;
  reason_ = pct ? "" : pct.reason;
  if (pct) pct_ = *pct;
  return bool(pct);
}

}  // namespace anelab::dashboard
