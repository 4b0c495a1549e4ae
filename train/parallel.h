// Splitting train/ loops over the process's thread pool (ThreadPool::global(), framework/core/thread_pool.h).
// - parallel_rows: elementwise / per-row loops, only above ~64K element-operations so small models
//   (stories260K) do not pay dispatch costs on every tiny loop.
// - parallel_blocks: big matrix products, cut into a few blocks of the output per thread (each block is one
//   single-threaded Eigen product; Eigen itself never spawns threads: see eigen_single_thread).
// The pool runs one job at a time, so a thread that runs beside the pool's user (the kernel engine's dW worker,
// a SerialQueue) is marked serial and runs everything inline; so is a thread inside a pool chunk (no nesting).
// Block boundaries depend only on the sizes and the pool's thread count, never on timing, so results are
// bitwise reproducible for a given thread count.
#pragma once
#include <algorithm>
#include <cstdint>

#include "framework/core/thread_pool.h"

namespace anelab::train {

inline bool kParallel(int64_t work) { return work >= (int64_t(1) << 16); }

// True on a thread that must not use the pool (see above).
inline bool& serial_thread() {
  thread_local bool serial = false;
  return serial;
}
// Marks the current thread serial for the scope's lifetime.
class SerialScope {
 public:
  SerialScope() : prev_(serial_thread()) { serial_thread() = true; }
  ~SerialScope() { serial_thread() = prev_; }
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool prev_;
};

// Calls fn(begin, end) over [0, n) in at most `max_chunks` chunks whose boundaries are multiples of `align`.
inline void split_on_pool(int64_t n, int64_t align, int64_t max_chunks, FunctionRef<void(int64_t, int64_t)> fn) {
  ThreadPool& pool = ThreadPool::global();
  align = std::max<int64_t>(1, align);
  const int64_t units = (n + align - 1) / align;
  const int64_t chunks = std::min(units, std::max<int64_t>(1, max_chunks));
  if (serial_thread() || pool.size() == 1 || chunks <= 1) {
    fn(0, n);
    return;
  }
  pool.run_chunks(chunks, [&](int64_t c, int) {
    const SerialScope inside;  // a nested parallel_* call runs inline
    const int64_t b = std::min(n, units * c / chunks * align), e = std::min(n, units * (c + 1) / chunks * align);
    if (b < e) fn(b, e);
  });
}

// fn(begin, end) over rows [0, n); split (8 chunks per thread) only when `work` element-operations are many.
inline void parallel_rows(int64_t n, int64_t work, FunctionRef<void(int64_t, int64_t)> fn) {
  if (!kParallel(work)) {
    fn(0, n);
    return;
  }
  split_on_pool(n, 1, 8 * int64_t(ThreadPool::global().size()), fn);
}

// fn(begin, end) over output blocks [0, n) of a matrix product with `flops` multiply-adds: two blocks per thread
// (few, because each block packs the shared operand again), aligned to 16 (Eigen's AVX-512 register tile).
inline void parallel_blocks(int64_t n, int64_t flops, FunctionRef<void(int64_t, int64_t)> fn) {
  if (flops < (int64_t(1) << 20)) {
    fn(0, n);
    return;
  }
  split_on_pool(n, 16, 2 * int64_t(ThreadPool::global().size()), fn);
}

}  // namespace anelab::train
