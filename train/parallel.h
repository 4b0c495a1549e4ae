// When to split an elementwise loop over the OpenMP threads: only above ~64K element-operations, so
// small models (stories260K) do not pay fork/join costs on every tiny loop.
#pragma once
#include <cstdint>

namespace anelab::train {
inline bool kParallel(int64_t work) { return work >= (int64_t(1) << 16); }
}  // namespace anelab::train
