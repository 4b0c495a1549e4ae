// Wall-clock helpers shared by the timing code (training benchmarks, step timers).
#pragma once

#include <chrono>

namespace anelab {

// Milliseconds on the steady clock (monotonic; only differences mean anything).
inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds on the steady clock.
inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace anelab
