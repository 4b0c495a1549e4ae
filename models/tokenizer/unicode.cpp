#include "models/tokenizer/unicode.h"

#include <algorithm>
#include <vector>

namespace anelab::tok {
namespace {

using namespace unicode_tables;

constexpr char32_t kMaxCp = 0x110000;

// White_Space property (PropList.txt).
constexpr char32_t kWhiteSpace[] = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,   0x1680,
                                    0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
                                    0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};

// One byte of flags per code point, built once from the range tables (1.1 MB).
const std::vector<uint8_t>& class_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(kMaxCp, 0);
    for (size_t i = 0; i < kClassRangesSize; ++i)
      for (uint32_t c = kClassRanges[i].first; c <= kClassRanges[i].last; ++c) t[c] |= kClassRanges[i].value;
    for (char32_t c : kWhiteSpace) t[c] |= kClsSpace;
    for (size_t i = 0; i < kNfcUnsafeSize; ++i)
      for (uint32_t c = kNfcUnsafe[i].first; c <= kNfcUnsafe[i].last; ++c) t[c] |= kClsNfcUnsafe;
    return t;
  }();
  return table;
}

uint8_t ccc_of(char32_t cp) {
  auto it = std::upper_bound(kCccRanges, kCccRanges + kCccRangesSize, cp,
                             [](char32_t c, const Range8& r) { return c < r.first; });
  if (it == kCccRanges) return 0;
  --it;
  return cp <= it->last ? it->value : 0;
}

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto it = std::lower_bound(kNfdIndex, kNfdIndex + kNfdIndexSize, cp,
                             [](const NfdEntry& e, char32_t c) { return e.cp < c; });
  if (it != kNfdIndex + kNfdIndexSize && it->cp == cp) {
    out.insert(out.end(), kNfdData + it->offset, kNfdData + it->offset + it->len);
  } else {
    out.push_back(cp);
  }
}

// Returns the primary composite of (a, b) or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  auto it = std::lower_bound(kCompPairs, kCompPairs + kCompPairsSize, std::pair<char32_t, char32_t>(a, b),
                             [](const CompPair& p, const std::pair<char32_t, char32_t>& k) {
                               return p.first != k.first ? p.first < k.first : p.second < k.second;
                             });
  if (it != kCompPairs + kCompPairsSize && it->first == a && it->second == b) return it->composite;
  return 0;
}

}  // namespace

uint8_t char_class(char32_t cp) { return cp < kMaxCp ? class_table()[cp] : 0; }

int utf8_decode(std::string_view s, size_t i, char32_t* cp) {
  const size_t n = s.size();
  if (i >= n) return 0;
  const uint8_t b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  char32_t c, min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > n) return 0;
  for (int k = 1; k < len; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c >= kMaxCp || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_find_invalid(std::string_view s) {
  size_t i = 0;
  char32_t cp;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_decode(s, i, &cp);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  char32_t cp;
  while (i < s.size()) {
    const int len = utf8_decode(s, i, &cp);
    if (len == 0) {
      utf8_append(out, 0xFFFD);
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string nfc(std::string_view s) {
  const auto& table = class_table();
  bool unsafe = false;
  char32_t cp;
  for (size_t i = 0; i < s.size() && !unsafe;) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_decode(s, i, &cp);
    if (len == 0) return std::string(s);  // invalid input is the caller's business; leave it untouched
    unsafe = table[cp] & kClsNfcUnsafe;
    i += len;
  }
  if (!unsafe) return std::string(s);
  // Full algorithm: canonical decomposition, canonical ordering, canonical composition.
  std::vector<char32_t> d;
  d.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int len = utf8_decode(s, i, &cp);
    if (len == 0) return std::string(s);
    decompose(cp, d);
    i += len;
  }
  std::vector<uint8_t> ccc(d.size());
  for (size_t i = 0; i < d.size(); ++i) ccc[i] = ccc_of(d[i]);
  for (size_t i = 0; i < d.size();) {  // stable sort of each run of non-starters by ccc
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a)
      for (size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) std::swap(d[b - 1], d[b]), std::swap(ccc[b - 1], ccc[b]);
    i = j;
  }
  std::vector<char32_t> out;
  out.reserve(d.size());
  std::vector<uint8_t> occ;
  long starter = -1;  // index in out of the last starter
  for (size_t i = 0; i < d.size(); ++i) {
    const char32_t c = d[i];
    const uint8_t cc = ccc[i];
    if (starter >= 0) {
      const uint8_t last = out.size() > static_cast<size_t>(starter) + 1 ? occ.back() : 0;
      const bool blocked = out.size() > static_cast<size_t>(starter) + 1 && (last == 0 || last >= cc);
      if (!blocked) {
        if (char32_t comp = compose(out[starter], c)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out.size());
    out.push_back(c);
    occ.push_back(cc);
  }
  std::string r;
  r.reserve(s.size());
  for (char32_t c : out) utf8_append(r, c);
  return r;
}

}  // namespace anelab::tok
