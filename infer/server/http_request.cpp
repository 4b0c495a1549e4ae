#include "infer/server/http_request.h"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace anelab::serve {
namespace {

HttpParse error(int status, std::string msg) {
  HttpParse p;
  p.state = HttpParse::kError;
  p.status = status;
  p.message = std::move(msg);
  return p;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool is_token_char(char c) {  // RFC 9110 tchar
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      r += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      r += s[i];
    }
  }
  return r;
}

// The end of the head (index just past the empty line) and the line breaks inside it, or npos.
size_t head_end(std::string_view b) {
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] != '\n') continue;
    if (i + 1 < b.size() && b[i + 1] == '\n') return i + 2;
    if (i + 2 < b.size() && b[i + 1] == '\r' && b[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

// "METHOD SP target SP HTTP/1.x"
std::optional<HttpParse> parse_request_line(std::string_view line, HttpRequest& out) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return error(400, "malformed request line");
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), is_token_char))
    return error(400, "malformed method");
  if (target.empty() || target[0] != '/') return error(400, "request target must start with '/'");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return error(400, "control character in the request target");
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1.") {
    if (version.substr(0, 5) == "HTTP/") return error(505, "only HTTP/1.0 and HTTP/1.1 are supported");
    return error(400, "malformed HTTP version");
  }
  if (version[7] != '0' && version[7] != '1') return error(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  out.method = method;
  out.target = target;
  out.path = percent_decode(target.substr(0, target.find('?')));
  out.minor = version[7] - '0';
  return std::nullopt;
}

// Content-Length: decimal digits only, at most 18 of them (fits int64); -1 when not a length.
int64_t parse_length(std::string_view v) {
  if (v.empty() || v.size() > 18) return -1;
  int64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::optional<HttpParse> parse_headers(std::string_view head, const HttpParseLimits& lim, HttpRequest& out) {
  size_t pos = 0;
  while (pos < head.size()) {
    size_t eol = head.find('\n', pos);
    if (eol == std::string_view::npos) eol = head.size();
    const std::string_view line = trim(head.substr(pos, eol - pos));
    pos = eol + 1;
    if (line.empty()) break;
    if (out.headers.size() >= lim.max_headers)
      return error(431, "more than " + std::to_string(lim.max_headers) + " header lines");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return error(400, "malformed header line");
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_token_char)) return error(400, "malformed header name");
    const std::string_view value = trim(line.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
        return error(400, "control character in a header value");
    out.headers.emplace_back(lower(name), std::string(value));
  }
  return std::nullopt;
}

}  // namespace

std::string_view HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return v;
  return {};
}

HttpParse parse_http_request(std::string_view bytes, const HttpParseLimits& lim, HttpRequest& out) {
  out = HttpRequest{};
  // Leading empty lines before a request are ignored (RFC 9112 2.2).
  size_t skip = 0;
  while (skip < bytes.size() && (bytes[skip] == '\r' || bytes[skip] == '\n')) ++skip;
  const std::string_view b = bytes.substr(skip);
  const size_t end = head_end(b);
  if (end == std::string_view::npos) {
    if (b.size() > lim.max_head)
      return error(431, "request head longer than " + std::to_string(lim.max_head) + " bytes");
    return HttpParse{};
  }
  if (end > lim.max_head) return error(431, "request head longer than " + std::to_string(lim.max_head) + " bytes");
  const std::string_view head = b.substr(0, end);
  const size_t eol = head.find('\n');
  if (auto e = parse_request_line(trim(head.substr(0, eol)), out)) return *e;
  if (auto e = parse_headers(head.substr(eol + 1), lim, out)) return *e;
  if (!out.header("transfer-encoding").empty())
    return error(501, "Transfer-Encoding request bodies are not supported; send Content-Length");
  int64_t length = 0;
  bool have_length = false;
  for (const auto& [k, v] : out.headers) {
    if (k != "content-length") continue;
    const int64_t n = parse_length(v);
    if (n < 0) {
      if (!v.empty() && v[0] == '-') return error(400, "negative Content-Length '" + v + "'");
      if (std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) && !v.empty())
        return error(413,
                     "Content-Length " + v + " is larger than the limit of " + std::to_string(lim.max_body) + " bytes");
      return error(400, "Content-Length '" + v.substr(0, 40) + "' is not a decimal number");
    }
    if (have_length && n != length) return error(400, "two different Content-Length values");
    length = n, have_length = true;
  }
  if (static_cast<uint64_t>(length) > lim.max_body)
    return error(413, "Content-Length " + std::to_string(length) + " is larger than the limit of " +
                          std::to_string(lim.max_body) + " bytes");
  const std::string_view conn = out.header("connection");
  const std::string c = lower(conn);
  out.keep_alive = out.minor == 1 ? c.find("close") == std::string::npos : c.find("keep-alive") != std::string::npos;
  out.expect_continue = lower(out.header("expect")) == "100-continue";
  const size_t total = skip + end + static_cast<size_t>(length);
  if (bytes.size() < total) {
    HttpParse p;
    p.head_done = true;
    p.consumed = total;
    return p;
  }
  out.body.assign(bytes.substr(skip + end, static_cast<size_t>(length)));
  HttpParse p;
  p.state = HttpParse::kComplete;
  p.consumed = total;
  return p;
}

const char* http_reason(int s) {
  switch (s) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 499:  // nginx's: the client closed the connection before the answer (never read by anyone)
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

}  // namespace anelab::serve
