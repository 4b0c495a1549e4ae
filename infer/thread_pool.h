// A small persistent thread pool for the decode/prefill hot loops (GEMV rows, GEMM tiles, heads).
// The calling thread takes part as worker 0; the other workers spin briefly on a generation counter,
// then sleep on it (std::atomic::wait = futex), so a GEMV costs no thread creation and no OpenMP
// fork/join. One job runs at a time; run() returns when every worker has finished its share.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace anelab::infer {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1 (1: everything on the caller)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  // Calls fn(worker) once on each of the size() workers (worker 0 = the caller) and waits for all.
  void run(const std::function<void(int worker)>& fn);
  // Splits [0, n) into size() contiguous ranges aligned to `align` and calls fn(begin, end) per worker.
  void parallel_for(int64_t n, int64_t align, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int id);
  int n_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace anelab::infer
