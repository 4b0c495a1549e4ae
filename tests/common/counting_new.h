// Counting allocator for the tests that prove a path allocates nothing: the global operator new replaced in every
// form, in portable C++ (no glibc-only __libc_* entry points, so the tests link on macOS too). Counting is on while
// anelab::test::g_counting is true; anelab::test::g_allocations is the count. Plain malloc calls are not counted.
// Include it from exactly one translation unit of a test binary (the replacement functions are defined here).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace anelab::test {
inline std::atomic<bool> g_counting{false};
inline std::atomic<int64_t> g_allocations{0};

inline void* counted_new(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p =
      align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace anelab::test

// Not inlined: GCC would otherwise see std::free applied (inlined) to what `new` returned in the same translation unit
// and report -Wmismatched-new-delete, although the two replacements are a matched malloc / free pair.
#define ANELAB_COUNTING_NEW [[gnu::noinline]]

ANELAB_COUNTING_NEW void* operator new(std::size_t n) { return anelab::test::counted_new(n, 0); }
ANELAB_COUNTING_NEW void* operator new[](std::size_t n) { return anelab::test::counted_new(n, 0); }
ANELAB_COUNTING_NEW void* operator new(std::size_t n, std::align_val_t a) {
  return anelab::test::counted_new(n, static_cast<std::size_t>(a));
}
ANELAB_COUNTING_NEW void* operator new[](std::size_t n, std::align_val_t a) {
  return anelab::test::counted_new(n, static_cast<std::size_t>(a));
}
ANELAB_COUNTING_NEW void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return anelab::test::counted_new(n, 0);
  } catch (...) {
    return nullptr;
  }
}
ANELAB_COUNTING_NEW void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return anelab::test::counted_new(n, 0);
  } catch (...) {
    return nullptr;
  }
}
ANELAB_COUNTING_NEW void operator delete(void* p) noexcept { std::free(p); }
ANELAB_COUNTING_NEW void operator delete[](void* p) noexcept { std::free(p); }
ANELAB_COUNTING_NEW void operator delete(void* p, std::size_t) noexcept { std::free(p); }
ANELAB_COUNTING_NEW void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
ANELAB_COUNTING_NEW void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
ANELAB_COUNTING_NEW void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
ANELAB_COUNTING_NEW void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
ANELAB_COUNTING_NEW void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
