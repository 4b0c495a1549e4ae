// A small persistent thread pool for hot loops (emulator kernels, CPU GEMV/GEMM, heads).
// The calling thread takes part as worker 0; the other workers spin briefly on a generation counter,
// then sleep on it (std::atomic::wait = futex). Unlike OpenMP's default active wait, idle workers do
// not burn a core for long, which matters on 2-core machines where the trainer overlaps CPU dW work
// with kernel evaluations. Jobs are passed by non-owning reference: dispatch allocates nothing.
// One job runs at a time per pool; run() returns when every worker has finished its share.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace anelab {

// Non-owning reference to a callable; valid while the callable lives (for the duration of a call).
template <typename Sig>
class FunctionRef;
template <typename R, typename... A>
class FunctionRef<R(A...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT(implicit)
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...); }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1 (1: everything on the caller)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  // Calls fn(worker) once on each of the size() workers (worker 0 = the caller) and waits for all.
  void run(FunctionRef<void(int)> fn);
  // Splits [0, n) into size() contiguous ranges aligned to `align` and calls fn(begin, end) per worker
  // (ranges may be empty and are then skipped). Runs inline when n is small or the pool has 1 thread.
  void parallel_for(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn);

  // Process-wide pool sized to the hardware threads (ANELAB_THREADS overrides), created on first use.
  static ThreadPool& global();

 private:
  void worker_loop(int id);
  int n_;
  std::vector<std::thread> threads_;
  const FunctionRef<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace anelab
