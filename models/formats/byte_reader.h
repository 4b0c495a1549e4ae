// Bounds-checked little-endian cursor over a byte range, shared by every model-file reader.
// Every read names the file and the field on failure ("truncated while reading FIELD at offset N").
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/core/error.h"

namespace anelab::models {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string where) : p_(data), n_(size), where_(std::move(where)) {}

  size_t pos() const { return pos_; }
  size_t size() const { return n_; }
  size_t remaining() const { return n_ - pos_; }
  const uint8_t* data() const { return p_; }
  const std::string& where() const { return where_; }

  void need(size_t bytes, const char* field) const {
    if (bytes > n_ - pos_)
      fail("model", where_, ": truncated while reading ", field, " at offset ", pos_, " (needs ", bytes, " bytes, ",
           n_ - pos_, " left); the file is incomplete or corrupt");
  }
  template <typename T>
  T get(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const uint8_t* take(size_t bytes, const char* field) {
    need(bytes, field);
    const uint8_t* r = p_ + pos_;
    pos_ += bytes;
    return r;
  }
  // A string with a length prefix of type L; lengths above max_len are rejected before reading.
  template <typename L>
  std::string str(const char* field, uint64_t max_len = 1u << 20) {
    const uint64_t len = get<L>(field);
    if (len > max_len)
      fail("model", where_, ": ", field, " length ", len, " at offset ", pos_ - sizeof(L), " exceeds the limit ",
           max_len, "; the file is corrupt");
    const uint8_t* s = take(static_cast<size_t>(len), field);
    return std::string(reinterpret_cast<const char*>(s), static_cast<size_t>(len));
  }
  void seek(size_t pos, const char* field) {
    if (pos > n_) fail("model", where_, ": ", field, " offset ", pos, " is past the end of the file (", n_, " bytes)");
    pos_ = pos;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  std::string where_;
};

inline int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Of byte ranges [begin, end) (a file's tensors), the indices (i, j) of two non-empty ones that overlap, i's
// range starting first; nullopt when none do. Readers refuse such files: one tensor's bytes must never be
// another's.
inline std::optional<std::pair<size_t, size_t>> first_overlap(const std::vector<std::pair<uint64_t, uint64_t>>& r) {
  std::vector<size_t> order;
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].second > r[i].first) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r[a] < r[b]; });
  for (size_t k = 1; k < order.size(); ++k)
    if (r[order[k]].first < r[order[k - 1]].second) return std::pair{order[k - 1], order[k]};
  return std::nullopt;
}

}  // namespace anelab::models
