#include "framework/core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <system_error>

#include "framework/core/error.h"
#include "framework/simd/simd.h"

namespace anelab {

namespace {
constexpr int kSpinIters = 20000;  // ~tens of µs of spinning before sleeping on the counter
}

std::thread start_thread(std::function<void()> fn, const std::string& what) {
  try {
    return std::thread(std::move(fn));
  } catch (const std::system_error& e) {
    fail("threads", "cannot start ", what, ": ", e.what(),
         "; lower --threads (or ANELAB_THREADS) or raise the limit on processes/memory (ulimit -u, ulimit -v)");
  }
}

ThreadPool::ThreadPool(int n_threads) : n_(std::max(1, n_threads)) {
  threads_.reserve(size_t(n_ - 1));  // push_back cannot throw (and drop a running thread) after a start
  try {
    for (int i = 1; i < n_; ++i)
      threads_.push_back(start_thread([this, i] { worker_loop(i); }, "worker " + std::to_string(i) + " of a pool of " +
                                                                         std::to_string(n_) + " threads (--threads " +
                                                                         std::to_string(n_) + ")"));
  } catch (...) {
    stop_workers();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

// Claims and runs chunks of job `gen` until none are left (or a newer job replaced it).
void ThreadPool::work(uint32_t gen, int worker) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(c >> 32) != gen) return;
    const int64_t idx = static_cast<int64_t>(c & 0xFFFFFFFFu);
    if (idx >= n_chunks_.load(std::memory_order_relaxed)) return;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    (*job_.load(std::memory_order_relaxed))(
        idx, worker);  // job gen is current: it cannot finish before this chunk is counted done
    done_.fetch_add(1, std::memory_order_acq_rel);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop(int id) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpinIters; ++i) {
      simd::cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    work(g, id);
  }
}

void ThreadPool::run_chunks(int64_t n_chunks, FunctionRef<void(int64_t, int)> fn) {
  if (n_chunks <= 0) return;
  if (n_ == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) fn(c, 0);
    return;
  }
  const uint32_t gen = ++gen_;
  // Close the claim word before the new job's fields change: a worker still inside work() for the previous
  // job holds that job's claim value, and once claim_ differs its compare-exchange fails, so it can never
  // pair the old claim with this job's chunk count or function (which ran chunks twice and let this call
  // return while a chunk was still running).
  claim_.store((static_cast<uint64_t>(gen) << 32) | 0xFFFFFFFFu, std::memory_order_release);
  job_.store(&fn, std::memory_order_relaxed);
  n_chunks_.store(n_chunks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  work(gen, 0);
  for (int i = 0; done_.load(std::memory_order_acquire) != n_chunks; ++i) {
    if (i < kSpinIters)
      simd::cpu_relax();
    else
      std::this_thread::yield();  // a worker holding a chunk was descheduled
  }
}

void ThreadPool::run(FunctionRef<void(int)> fn) {
  run_chunks(n_, [&](int64_t slot, int) { fn(static_cast<int>(slot)); });
}

void ThreadPool::parallel_for(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  align = std::max<int64_t>(1, align);
  const int64_t units = (n + align - 1) / align;
  const int64_t chunks = std::min<int64_t>(units, n_ == 1 ? 1 : 8 * n_);
  run_chunks(chunks, [&](int64_t c, int) {
    const int64_t b = std::min(n, units * c / chunks * align);
    const int64_t e = std::min(n, units * (c + 1) / chunks * align);
    if (b < e) fn(b, e);
  });
}

namespace {
std::atomic<int> g_requested_global{0};  // size_global(); 0: not asked
std::atomic<bool> g_global_made{false};
}  // namespace

void ThreadPool::size_global(int n_threads) {
  n_threads = std::max(1, n_threads);
  if (g_global_made.load()) {
    ANELAB_CHECK(global().size() == n_threads, "threads", "the process-wide pool already runs ", global().size(),
                 " threads; cannot make it ", n_threads);
    return;
  }
  g_requested_global.store(n_threads);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    g_global_made.store(true);
    if (const int n = g_requested_global.load(); n > 0) return n;
    if (const char* e = std::getenv("ANELAB_THREADS")) {
      int n = std::atoi(e);
      if (n > 0) return n;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace anelab
