#include "framework/core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace anelab {

namespace {
constexpr int kSpinIters = 20000;  // ~tens of µs of spinning before sleeping on the counter
}

ThreadPool::ThreadPool(int n_threads) : n_(std::max(1, n_threads)) {
  for (int i = 1; i < n_; ++i) threads_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker_loop(int id) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpinIters; ++i) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    (*job_)(id);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(FunctionRef<void(int)> fn) {
  if (n_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0);
  for (int i = 0; i < kSpinIters; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    _mm_pause();
  }
  for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) pending_.wait(p, std::memory_order_acquire);
}

void ThreadPool::parallel_for(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  align = std::max<int64_t>(1, align);
  const int64_t units = (n + align - 1) / align;
  const int workers = static_cast<int>(std::min<int64_t>(n_, units));
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  run([&](int w) {
    if (w >= workers) return;
    const int64_t b = std::min(n, units * w / workers * align);
    const int64_t e = std::min(n, units * (w + 1) / workers * align);
    if (b < e) fn(b, e);
  });
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* e = std::getenv("ANELAB_THREADS")) {
      int n = std::atoi(e);
      if (n > 0) return n;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace anelab
