// A small persistent thread pool for the decode/prefill hot loops (GEMV rows, GEMM tiles, heads).
// Work is cut into chunks that workers claim from one atomic counter (tagged with the job's generation,
// so a worker that wakes late can never take a chunk of a newer job). The calling thread takes part as
// worker 0, and because chunks are claimed dynamically a worker that the OS has descheduled (the box is
// shared) only costs the chunk it holds, not half the job. Idle workers spin briefly on the generation
// counter, then sleep on it (std::atomic::wait = futex): no thread creation and no OpenMP fork per GEMV.
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
  // Calls fn(chunk, worker) for every chunk in [0, n_chunks), spread over the workers; waits for all.
  void run_chunks(int64_t n_chunks, const std::function<void(int64_t chunk, int worker)>& fn);
  // Splits [0, n) into chunks aligned to `align` (about 8 per worker) and calls fn(begin, end) per chunk.
  void parallel_for(int64_t n, int64_t align, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int id);
  void work(uint32_t gen, int worker);
  int n_;
  std::vector<std::thread> threads_;
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t n_chunks_ = 0;
  uint32_t gen_ = 0;                       // caller side
  std::atomic<uint32_t> generation_{0};    // wakes the workers
  std::atomic<uint64_t> claim_{0};         // (generation << 32) | next chunk
  std::atomic<int64_t> done_{0};           // chunks finished in the current job
  std::atomic<bool> stop_{false};
};

}  // namespace anelab::infer
