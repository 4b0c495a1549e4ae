// Older anelab model files for reader tests: the bytes of a version-5 file (as write_anelab_file makes them)
// rewritten as format version 1 to 4 would have held them (no checksums, JSON header at offset 24), so a test
// can check that those versions are still read, or how their rules (dtype_min_version) are enforced.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "models/formats/anelab_file.h"
#include "models/formats/byte_reader.h"

namespace anelab::test {

inline std::vector<uint8_t> anelab_as_version(const std::vector<uint8_t>& v5, uint32_t version) {
  uint64_t hlen = 0;
  std::memcpy(&hlen, v5.data() + 16, 8);
  std::string h(v5.begin() + 40, v5.begin() + 40 + static_cast<long>(hlen));
  const size_t at = h.find("\"version\":5");
  if (at == std::string::npos || version < 1 || version > 4) return {};  // the caller's ASSERT sees an empty file
  h[at + 10] = static_cast<char>('0' + version);
  const int64_t data_v5 = models::round_up(40 + static_cast<int64_t>(hlen), models::kAnelabAlign);
  const int64_t data_old = models::round_up(24 + static_cast<int64_t>(hlen), models::kAnelabAlign);
  std::vector<uint8_t> b(v5.begin(), v5.begin() + 24);
  std::memcpy(b.data() + 8, &version, 4);
  b.insert(b.end(), h.begin(), h.end());
  b.resize(static_cast<size_t>(data_old), 0);
  b.insert(b.end(), v5.begin() + data_v5, v5.end());
  return b;
}

}  // namespace anelab::test
