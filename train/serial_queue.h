// SerialQueue: one worker thread running submitted closures in submission order (a serial dispatch queue,
// digest §5.3 "dw_cblas"). The kernel engine puts the CPU dW GEMMs here so they overlap with the next kernel
// evaluations. Closures capture pointers to buffers the submitter keeps alive and untouched until
// wait(ticket) has returned for the task's ticket.
//
//   SerialQueue q;                                        // the worker is a serial thread (train/parallel.h)
//   const uint64_t t = q.submit([&] { dw_acc(...); });
//   ... main thread work ...
//   q.wait(t);                                            // rethrows the first exception a task threw
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "framework/core/thread_pool.h"
#include "train/parallel.h"

namespace anelab::train {

class SerialQueue {
 public:
  SerialQueue() : th_(start_thread([this] { loop(); }, "the serial queue's worker thread")) {}
  ~SerialQueue() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    th_.join();  // runs the remaining tasks first
  }
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  // Returns the task's ticket (1, 2, ...).
  uint64_t submit(std::function<void()> task) {
    uint64_t t;
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(task));
      t = ++submitted_;
    }
    cv_work_.notify_one();
    return t;
  }
  // Blocks until every task up to `ticket` finished (0: returns at once); rethrows a task's exception once.
  void wait(uint64_t ticket) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return done_ >= ticket; });
    if (error_) {
      auto e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }
  void drain() {
    uint64_t t;
    {
      std::lock_guard<std::mutex> lk(mu_);
      t = submitted_;
    }
    wait(t);
  }
  double busy_ms() const {  // wall time spent inside tasks so far
    std::lock_guard<std::mutex> lk(mu_);
    return busy_ms_;
  }

 private:
  void loop() {
    const SerialScope serial;  // runs beside the main thread's pool jobs: never dispatch to the pool from here
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_work_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stop_ and drained
      auto task = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      std::exception_ptr err;
      try {
        task();
      } catch (...) {
        err = std::current_exception();
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      lk.lock();
      busy_ms_ += ms;
      if (err && !error_) error_ = err;
      ++done_;
      cv_done_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<std::function<void()>> q_;
  uint64_t submitted_ = 0, done_ = 0;
  bool stop_ = false;
  double busy_ms_ = 0;
  std::exception_ptr error_;
  std::thread th_;  // last: started after every other member is constructed
};

}  // namespace anelab::train
