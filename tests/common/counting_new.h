// Counting allocator for the tests that prove a path allocates nothing (g_allocations) or that count the bytes a path
// keeps (g_live_bytes): the global operator new replaced in every form, in portable C++ (no glibc-only __libc_* entry
// points, so the tests link on macOS too). Counting is on while anelab::test::g_counting is true: g_allocations counts
// the blocks allocated then, g_live_bytes the bytes of those blocks not yet freed. Each block carries a header (its
// size, and whether it was allocated while counting), so a block allocated while counting and freed later is
// subtracted, and one allocated before is not. Plain malloc calls are not counted.
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
inline std::atomic<int64_t> g_live_bytes{0};
constexpr std::size_t kCountedHeader = 2 * alignof(std::max_align_t);  // keeps the block's alignment

struct CountedHeader {
  std::size_t n;
  bool counted;
};

inline std::size_t counted_pad(std::size_t align) { return align > kCountedHeader ? align : kCountedHeader; }

inline void* counted_new(std::size_t n, std::size_t align) {
  const std::size_t pad = counted_pad(align);
  const std::size_t total = (n + pad + pad - 1) / pad * pad;
  void* raw = pad > alignof(std::max_align_t) ? std::aligned_alloc(pad, total) : std::malloc(total);
  if (!raw) throw std::bad_alloc();
  char* p = static_cast<char*>(raw) + pad;
  const bool counted = g_counting.load(std::memory_order_relaxed);
  new (p - sizeof(CountedHeader)) CountedHeader{n, counted};
  if (counted) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    g_live_bytes.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  }
  return p;
}

inline void counted_delete(void* p, std::size_t align) {
  if (!p) return;
  const std::size_t pad = counted_pad(align);
  const auto* h = reinterpret_cast<const CountedHeader*>(static_cast<char*>(p) - sizeof(CountedHeader));
  if (h->counted) g_live_bytes.fetch_sub(static_cast<int64_t>(h->n), std::memory_order_relaxed);
  std::free(static_cast<char*>(p) - pad);
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
ANELAB_COUNTING_NEW void operator delete(void* p) noexcept { anelab::test::counted_delete(p, 0); }
ANELAB_COUNTING_NEW void operator delete[](void* p) noexcept { anelab::test::counted_delete(p, 0); }
ANELAB_COUNTING_NEW void operator delete(void* p, std::size_t) noexcept { anelab::test::counted_delete(p, 0); }
ANELAB_COUNTING_NEW void operator delete[](void* p, std::size_t) noexcept { anelab::test::counted_delete(p, 0); }
ANELAB_COUNTING_NEW void operator delete(void* p, std::align_val_t a) noexcept {
  anelab::test::counted_delete(p, static_cast<std::size_t>(a));
}
ANELAB_COUNTING_NEW void operator delete[](void* p, std::align_val_t a) noexcept {
  anelab::test::counted_delete(p, static_cast<std::size_t>(a));
}
ANELAB_COUNTING_NEW void operator delete(void* p, std::size_t, std::align_val_t a) noexcept {
  anelab::test::counted_delete(p, static_cast<std::size_t>(a));
}
ANELAB_COUNTING_NEW void operator delete[](void* p, std::size_t, std::align_val_t a) noexcept {
  anelab::test::counted_delete(p, static_cast<std::size_t>(a));
}
