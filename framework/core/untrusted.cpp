#include "framework/core/untrusted.h"

#include <cstdint>
#include <cstdio>

namespace anelab {
namespace {

void put_byte(std::string& o, uint8_t b) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", b);
  o += buf;
}

void put_code_point(std::string& o, uint32_t cp) {
  char buf[12];
  std::snprintf(buf, sizeof buf, "\\u{%04x}", cp);
  o += buf;
}

// Length of the valid UTF-8 sequence at s[i] (2-4) and its code point, or 0 when it is not one.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t lead = b(0);
  size_t n;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cp = lead & 0x07;
  } else {
    return 0;  // ASCII (handled by the caller), a continuation byte, C0/C1 overlong leads, F5-FF
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;  // overlong, beyond Unicode, or a UTF-16 surrogate
  return n;
}

bool reorders_or_controls(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string quote_untrusted(std::string_view s, bool keep_newlines) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      const bool control = c < 0x20 || c == 0x7F;
      if (control && !(keep_newlines && (c == '\n' || c == '\t')))
        put_byte(o, c);
      else
        o += static_cast<char>(c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {
      put_byte(o, c);
      ++i;
    } else {
      if (reorders_or_controls(cp))
        put_code_point(o, cp);
      else
        o.append(s.substr(i, n));
      i += n;
    }
  }
  return o;
}

}  // namespace anelab
