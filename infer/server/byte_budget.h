// A budget of bytes shared by threads: the server's bound on request bytes held at once (the connection layer's
// body budget) and on JSON bytes being parsed at once (the parse budget, http_server.cpp).
//
// try_take(n) / take(n, timeout) reserve n bytes while used + n <= capacity; a request for more than the whole
// capacity is granted only while nothing else is held, so one large request still passes, alone. give(n)
// returns bytes and says when the budget has just become idle after at least `trim_after` bytes went through
// it, which is when the caller gives the allocator's free memory back (platform::release_free_memory).
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace anelab::serve {

class ByteBudget {
 public:
  explicit ByteBudget(size_t capacity, size_t trim_after = size_t(1) << 20)
      : capacity_(std::max<size_t>(1, capacity)), trim_after_(trim_after) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  bool try_take(size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    return take_locked(n);
  }
  // Waits up to `timeout` for room; false when there was none.
  bool take(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return take_locked(n); });
  }
  // Returns n bytes taken before; true when the budget is now idle and at least trim_after bytes were given
  // back since the last time it said so.
  bool give(size_t n) {
    bool trim = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      used_ -= std::min(used_, n);
      since_trim_ += n;
      if (used_ == 0 && since_trim_ >= trim_after_) trim = true, since_trim_ = 0;
    }
    cv_.notify_all();
    return trim;
  }
  size_t capacity() const { return capacity_; }
  size_t used() const {
    std::lock_guard<std::mutex> lk(mu_);
    return used_;
  }
  size_t peak() const {  // the most ever held at once
    std::lock_guard<std::mutex> lk(mu_);
    return peak_;
  }

 private:
  bool take_locked(size_t n) {
    if (used_ + n > capacity_ && used_ > 0) return false;
    used_ += n;
    peak_ = std::max(peak_, used_);
    return true;
  }
  const size_t capacity_, trim_after_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t used_ = 0, peak_ = 0, since_trim_ = 0;
};

}  // namespace anelab::serve
