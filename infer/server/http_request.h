// HTTP/1.x request parsing for `anelab serve` as a pure function (bytes -> request or error; no sockets),
// so that the connection layer (http_conn.h), its unit test and the fuzz harness share one parser.
//
// Accepted: "METHOD SP target SP HTTP/1.0|1.1 CRLF", header lines "Name: value CRLF" (names matched
// case-insensitively; a bare LF ends lines too), an empty line, then exactly Content-Length body bytes
// (no Content-Length: no body). Rejected with the status a client should see:
//   400  malformed request line or header, Content-Length negative / not decimal / given twice with
//        different values, a target that does not start with '/'
//   413  Content-Length above max_body: decided from the head alone, before any body byte is waited for
//   431  head (request line + headers) longer than max_head, or more than max_headers header lines
//   501  Transfer-Encoding (chunked request bodies are not supported: send Content-Length)
//   505  an HTTP version other than 1.0 / 1.1
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anelab::serve {

struct HttpRequest {
  std::string method;                                        // as sent ("GET", "POST", ...)
  std::string target;                                        // as sent ("/v1/models/a%2Fb?x=1")
  std::string path;                                          // target before '?', percent-decoded ("/v1/models/a/b")
  int minor = 1;                                             // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;
  bool keep_alive = true;        // 1.1 unless "Connection: close"; 1.0 only with "Connection: keep-alive"
  bool expect_continue = false;  // "Expect: 100-continue"
  // Set by the connection layer while the request is being answered (empty elsewhere): true once the client
  // has closed its side of the connection, so that work for a client that left can be cancelled.
  std::function<bool()> peer_closed;

  // The first header of that (lower-case) name, or "" when absent.
  std::string_view header(std::string_view lower_name) const;
};

struct HttpParseLimits {
  size_t max_head = 16 * 1024;  // bytes of request line + headers + the empty line
  size_t max_headers = 100;
  size_t max_body = 1 << 20;
};

struct HttpParse {
  enum State { kIncomplete, kComplete, kError } state = kIncomplete;
  size_t consumed = 0;     // kComplete: bytes of this request (head + body); the rest is the next request;
                           // kIncomplete with head_done: the bytes the whole request will take
  bool head_done = false;  // kIncomplete: the head parsed (out has it), body bytes still missing
  int status = 0;          // kError: HTTP status to answer (400, 413, 431, 501, 505)
  std::string message;     // kError: why, for the error JSON
};

// Parses the request at the start of `bytes` into `out`. kIncomplete: more bytes needed (the limits are
// already checked on what is there, so waiting cannot overrun them). Never throws.
HttpParse parse_http_request(std::string_view bytes, const HttpParseLimits& lim, HttpRequest& out);

// The reason phrase of a status code ("Not Found"); "Unknown" for codes not listed.
const char* http_reason(int status);

}  // namespace anelab::serve
