// A small persistent thread pool for hot loops (emulator kernels, CPU GEMV/GEMM, heads).
// Work is cut into chunks that workers claim from one atomic counter (tagged with the job's generation,
// so a worker that wakes late can never take a chunk of a newer job). The calling thread takes part as
// worker 0, and because chunks are claimed dynamically a worker that the OS has descheduled (the box
// is shared, or the trainer overlaps CPU dW work with kernel evaluations) only costs the chunk it holds.
// Idle workers spin briefly on the generation counter, then sleep on it (std::atomic::wait = futex):
// unlike OpenMP's default active wait they do not burn a core. Jobs are passed by non-owning reference,
// so dispatch allocates nothing. One job runs at a time per pool.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
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
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, A... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// Starts a std::thread running fn. A thread the OS cannot create (std::system_error: a process-count or
// memory limit such as `ulimit -u` / `ulimit -v`) becomes one anelab::Error line:
// "[threads] cannot start WHAT: REASON; ...". Every anelab thread starts through this.
std::thread start_thread(std::function<void()> fn, const std::string& what);

class ThreadPool {
 public:
  // n_threads >= 1 (1: everything on the caller). Throws (start_thread) naming n_threads when a worker
  // cannot be created; the workers already started are stopped first.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  // Calls fn(chunk, worker) for every chunk in [0, n_chunks), spread over the workers; waits for all.
  // `worker` identifies the executing thread (unique among concurrently running calls, < size()).
  void run_chunks(int64_t n_chunks, FunctionRef<void(int64_t chunk, int worker)> fn);
  // Calls fn(slot) once for each slot in [0, size()), concurrently; slots can index per-slot workspaces.
  void run(FunctionRef<void(int slot)> fn);
  // Splits [0, n) into chunks aligned to `align` (about 8 per worker) and calls fn(begin, end) per chunk.
  void parallel_for(int64_t n, int64_t align, FunctionRef<void(int64_t, int64_t)> fn);

  // Process-wide pool, created on first use with the size given to size_global(), else ANELAB_THREADS, else
  // the hardware threads.
  static ThreadPool& global();
  // The size global() is created with (the CLI's -t of train, demo and bench). Throws when the pool already
  // exists with another size.
  static void size_global(int n_threads);

 private:
  void worker_loop(int id);
  void stop_workers();
  void work(uint32_t gen, int worker);
  int n_;
  std::vector<std::thread> threads_;
  // Written by the caller between two stores of claim_ (closed, then open); read by workers after an
  // acquire of claim_ showing the current job.
  std::atomic<const FunctionRef<void(int64_t, int)>*> job_{nullptr};
  std::atomic<int64_t> n_chunks_{0};
  uint32_t gen_ = 0;                     // caller side
  std::atomic<uint32_t> generation_{0};  // wakes the workers
  std::atomic<uint64_t> claim_{0};       // (generation << 32) | next chunk
  std::atomic<int64_t> done_{0};         // chunks finished in the current job
  std::atomic<bool> stop_{false};
};

}  // namespace anelab
