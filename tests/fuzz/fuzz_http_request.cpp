// libFuzzer harness for the HTTP/1.x request parser of `anelab serve` (infer/server/http_request.h; clang
// only). Run: build-clang/bin/fuzz_http_request -max_total_time=60 [CORPUS_DIR]
// The parser must never throw or crash; what it accepts must respect the limits, and a complete request must
// stay the same when more bytes follow it (pipelining) and be incomplete for every shorter prefix.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "infer/server/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace anelab::serve;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  HttpParseLimits lim;
  lim.max_head = 2048;
  lim.max_headers = 16;
  lim.max_body = 4096;
  HttpRequest req;
  const HttpParse p = parse_http_request(bytes, lim, req);
  if (p.state == HttpParse::kError) {
    if (p.status < 400 || p.status > 505 || p.message.empty()) std::abort();
    return 0;
  }
  if (p.state == HttpParse::kIncomplete) return 0;
  if (p.consumed == 0 || p.consumed > size || req.body.size() > lim.max_body) std::abort();
  if (req.headers.size() > lim.max_headers || req.path.empty() || req.method.empty()) std::abort();
  HttpRequest again;
  const std::string more = std::string(bytes) + "GET / HTTP/1.1\r\n\r\n";
  const HttpParse q = parse_http_request(more, lim, again);
  if (q.state != HttpParse::kComplete || q.consumed != p.consumed || again.body != req.body) std::abort();
  if (p.consumed > 0) {
    HttpRequest shorter;
    if (parse_http_request(bytes.substr(0, p.consumed - 1), lim, shorter).state == HttpParse::kComplete) std::abort();
  }
  return 0;
}
