// Scratch: a buffer of trivial values that is not value-initialised, so only the pages a caller writes become
// resident (large allocations come from fresh, lazily mapped pages). Workspaces sized for the worst case
// (a whole prefill chunk, the whole context) then cost the memory of what a call touches: a decode-only run
// does not pay for the prefill chunk's rows. grow() does not keep the old contents.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace anelab {

template <typename T>
class Scratch {
  static_assert(std::is_trivially_default_constructible_v<T>);

 public:
  // At least n values (the old contents are not kept).
  void grow(int64_t n) {
    if (size_ >= n) return;
    data_.reset(new T[static_cast<size_t>(n)]);  // default-initialised: no value written
    size_ = n;
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  T& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }

 private:
  std::unique_ptr<T[]> data_;
  int64_t size_ = 0;
};

}  // namespace anelab
