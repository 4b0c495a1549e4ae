#include "framework/core/npy.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/fp16.h"

namespace anelab {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

// Value of 'key' in the header dict, as raw text up to the next top-level comma/brace.
std::string_view dict_value(std::string_view h, std::string_view key, const std::string& name) {
  std::string q1 = "'" + std::string(key) + "'";
  size_t p = h.find(q1);
  ANELAB_CHECK(p != std::string_view::npos, "npy", name, ": header has no '", key, "' field");
  p = h.find(':', p + q1.size());
  ANELAB_CHECK(p != std::string_view::npos, "npy", name, ": header field '", key, "' has no value");
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  size_t e = p;
  int depth = 0;
  while (e < h.size()) {
    char c = h[e];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    if (depth < 0) break;
    ++e;
    if (depth == 0 && c == ')') break;
  }
  return h.substr(p, e - p);
}

}  // namespace

NpyArray parse_npy(const uint8_t* b, size_t size, const std::string& name) {
  ANELAB_CHECK(size >= 10 && std::memcmp(b, "\x93NUMPY", 6) == 0, "npy", name, ": not a .npy file (bad magic)");
  int major = b[6];
  size_t hlen, hoff;
  if (major == 1) {
    hlen = b[8] | (b[9] << 8);
    hoff = 10;
  } else if (major == 2 || major == 3) {
    ANELAB_CHECK(size >= 12, "npy", name, ": truncated header");
    uint32_t l;
    std::memcpy(&l, b + 8, 4);
    hlen = l;
    hoff = 12;
  } else {
    fail("npy", name, ": unsupported format version ", major);
  }
  ANELAB_CHECK(hoff + hlen <= size, "npy", name, ": header length ", hlen, " runs past the end of the file");
  std::string_view h(reinterpret_cast<const char*>(b + hoff), hlen);
  NpyArray a;
  std::string_view descr = dict_value(h, "descr", name);
  ANELAB_CHECK(descr.size() >= 2, "npy", name, ": bad descr ", descr);
  a.dtype = std::string(descr.substr(1, descr.size() - 2));
  std::string_view fo = dict_value(h, "fortran_order", name);
  ANELAB_CHECK(fo.rfind("False", 0) == 0, "npy", name, ": fortran_order arrays are not supported; save with C order");
  std::string_view sh = dict_value(h, "shape", name);
  ANELAB_CHECK(!sh.empty() && sh.front() == '(', "npy", name, ": bad shape field ", sh);
  size_t i = 1;
  while (i < sh.size()) {
    while (i < sh.size() && (sh[i] == ' ' || sh[i] == ',')) ++i;
    if (i >= sh.size() || sh[i] == ')') break;
    int64_t v = 0;
    bool any = false;
    while (i < sh.size() && sh[i] >= '0' && sh[i] <= '9') {
      v = v * 10 + (sh[i] - '0');
      ANELAB_CHECK(v < (int64_t(1) << 40), "npy", name, ": absurd dimension in shape ", sh);
      ++i;
      any = true;
    }
    ANELAB_CHECK(any, "npy", name, ": bad shape field ", sh);
    a.shape.push_back(v);
  }
  size_t esz;
  if (a.dtype == "<f2")
    esz = 2;
  else if (a.dtype == "<f4")
    esz = 4;
  else if (a.dtype == "<f8")
    esz = 8;
  else
    fail("npy", name, ": dtype '", a.dtype, "' not supported (use float16 or float32)");
  // The element count, multiplied out with a cap at one more than the data holds, so a shape such as
  // (13333333332, 11111111119) is refused instead of overflowing. A 0 in the shape means no data.
  const size_t off = hoff + hlen;
  const size_t have = (size - off) / esz;
  size_t n = std::find(a.shape.begin(), a.shape.end(), 0) != a.shape.end() ? 0 : 1;
  for (int64_t d : a.shape)
    if (n != 0) n = static_cast<size_t>(d) > have / n ? have + 1 : n * static_cast<size_t>(d);
  ANELAB_CHECK(n <= have, "npy", name, ": data holds ", size - off, " bytes, too few for shape ", sh, " of ", a.dtype);
  a.data.resize(n);
  if (n == 0) return a;  // a 0 in the shape: no data (and no buffer to copy into)
  if (esz == 2) {
    std::vector<half_bits> t(n);
    std::memcpy(t.data(), b + off, n * 2);
    half_to_float(t.data(), a.data.data(), n);
  } else if (esz == 4) {
    std::memcpy(a.data.data(), b + off, n * 4);
  } else {
    for (size_t k = 0; k < n; ++k) {
      double d;
      std::memcpy(&d, b + off + k * 8, 8);
      a.data[k] = static_cast<float>(d);
    }
  }
  return a;
}

NpyArray read_npy(const std::string& path) {
  MappedFile m(path);
  return parse_npy(m.data(), m.size(), path);
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
    n *= shape[i];
  }
  dict += "), }";
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict += std::string(pad, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  uint16_t hl = static_cast<uint16_t>(dict.size());
  out += char(hl & 0xff);
  out += char(hl >> 8);
  out += dict;
  out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * 4);
  write_file_atomic(path, out);
}

}  // namespace anelab
