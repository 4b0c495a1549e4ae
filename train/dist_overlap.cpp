#include "train/dist_overlap.h"

#include <chrono>
#include <string>
#include <utility>

#include "framework/core/clock.h"

namespace anelab::train::dist {
std::vector<int64_t> backward_bounds(const ParamLayout& layout) {
  std::vector<int64_t> b = {layout.total(), layout.find("norm").offset};
  for (int64_t l = layout.config().n_layers - 1; l >= 0; --l)
    b.push_back(layout.find("layers." + std::to_string(l) + ".attn_norm").offset);
  b.push_back(0);
  return b;
}

OverlappedSum::OverlappedSum(Group& group, std::vector<int64_t> bounds, bool overlap)
    : group_(group), bounds_(std::move(bounds)), overlap_(overlap) {
  if (overlap_) comm_ = std::make_unique<SerialQueue>();
}

void OverlappedSum::begin(const float* x, float* acc) {
  std::lock_guard<std::mutex> lk(mu_);
  x_ = x, acc_ = acc, next_ = 0;
  if (comm_) busy0_ = comm_->busy_ms();
}

void OverlappedSum::final_from(int64_t from) {
  if (!overlap_) return;
  std::lock_guard<std::mutex> lk(mu_);
  submit_through(from);
}

void OverlappedSum::submit_through(int64_t from) {
  for (; next_ + 1 < bounds_.size() && bounds_[next_ + 1] >= from; ++next_) {
    const int64_t lo = bounds_[next_ + 1], n = bounds_[next_] - lo;
    if (n > 0) comm_->submit([this, x = x_ + lo, a = acc_ + lo, n] { group_.accumulate_ordered(x, a, n); });
  }
}

SumTimes OverlappedSum::finish() {
  const double t0 = now_ms();
  if (!overlap_) {
    group_.accumulate_ordered(x_, acc_, bounds_.front());
    const double ms = now_ms() - t0;
    return {ms, ms};
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    submit_through(0);
  }
  comm_->drain();
  return {comm_->busy_ms() - busy0_, now_ms() - t0};
}

}  // namespace anelab::train::dist
