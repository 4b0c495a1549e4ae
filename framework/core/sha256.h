// SHA-256 (FIPS 180-4), for content keys: the native backend's compiled-program cache and the fake
// shim's hexStringIdentifier (digest §1.4: SHA256(mil)_SHA256(weights)_SHA256(options)).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace anelab {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t n);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();  // finalises; the object must not be updated afterwards
  std::string hex();                 // lowercase hex of digest()

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

inline std::string sha256_hex(std::string_view s) { return Sha256().update(s).hex(); }

}  // namespace anelab
