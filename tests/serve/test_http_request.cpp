// The HTTP/1.x request parser of `anelab serve` (infer/server/http_request.h) as a pure function: complete,
// incomplete and pipelined requests, keep-alive rules, and each error status with its cause.
#include <gtest/gtest.h>

#include <random>

#include "infer/server/http_request.h"

namespace anelab::serve {
namespace {

HttpParse parse(std::string_view s, HttpRequest& r, HttpParseLimits lim = {}) { return parse_http_request(s, lim, r); }

TEST(ServeHttpParser, CompleteRequestWithBody) {
  HttpRequest r;
  const std::string raw = "POST /v1/models/a%2Fb?x=1 HTTP/1.1\r\nHost: h\r\ncontent-LENGTH: 5\r\nX-A:  v \r\n\r\nhello";
  const HttpParse p = parse(raw, r);
  ASSERT_EQ(p.state, HttpParse::kComplete) << p.message;
  EXPECT_EQ(p.consumed, raw.size());
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/models/a%2Fb?x=1");
  EXPECT_EQ(r.path, "/v1/models/a/b");
  EXPECT_EQ(r.header("x-a"), "v");
  EXPECT_EQ(r.body, "hello");
  EXPECT_TRUE(r.keep_alive);
}

TEST(ServeHttpParser, IncompleteThenHeadDoneThenComplete) {
  HttpRequest r;
  const std::string raw = "POST / HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc";
  for (size_t n = 0; n < raw.size(); ++n) {
    const HttpParse p = parse(std::string_view(raw).substr(0, n), r);
    ASSERT_EQ(p.state, HttpParse::kIncomplete) << n;
    EXPECT_EQ(p.head_done, n >= raw.size() - 3) << n;
  }
  EXPECT_TRUE(r.expect_continue);
  EXPECT_EQ(parse(raw, r).state, HttpParse::kComplete);
}

TEST(ServeHttpParser, PipelinedRequestsAreConsumedOneByOne) {
  const std::string one = "GET /health HTTP/1.1\r\n\r\n", two = "GET /metrics HTTP/1.1\nConnection: close\n\n";
  HttpRequest r;
  HttpParse p = parse(one + two, r);
  ASSERT_EQ(p.state, HttpParse::kComplete);
  EXPECT_EQ(p.consumed, one.size());
  EXPECT_EQ(r.path, "/health");
  p = parse(two, r);  // bare LF line ends
  ASSERT_EQ(p.state, HttpParse::kComplete);
  EXPECT_EQ(r.path, "/metrics");
  EXPECT_FALSE(r.keep_alive);
}

TEST(ServeHttpParser, KeepAliveRules) {
  HttpRequest r;
  parse("GET / HTTP/1.0\r\n\r\n", r);
  EXPECT_FALSE(r.keep_alive);
  parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", r);
  EXPECT_TRUE(r.keep_alive);
  parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", r);
  EXPECT_FALSE(r.keep_alive);
}

TEST(ServeHttpParser, ErrorsAndTheirStatus) {
  HttpParseLimits lim;
  lim.max_head = 200;
  lim.max_headers = 3;
  lim.max_body = 100;
  const std::pair<std::string, int> cases[] = {
      {"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / FTP/1.1\r\n\r\n", 400},
      {"GET http://x/ HTTP/1.1\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nNo colon here\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", 431},
      {"GET / HTTP/1.1\r\nA: " + std::string(300, 'a') + "\r\n\r\n", 431},
      {"GET / HTTP/1.1\r\nA: " + std::string(300, 'a'), 431},  // too long before the head even ends
      {"GET / HTTP/1.1\r\nA: x\x01y\r\n\r\n", 400},
  };
  for (const auto& [raw, status] : cases) {
    HttpRequest r;
    const HttpParse p = parse(raw, r, lim);
    EXPECT_EQ(p.state, HttpParse::kError) << raw;
    EXPECT_EQ(p.status, status) << raw << ": " << p.message;
    EXPECT_FALSE(p.message.empty());
  }
}

// Random bytes and mutations of a valid request: never a crash; a complete parse consumes at most the input
// and its body respects the limit; every shorter prefix of a complete request is incomplete.
TEST(ServeHttpParser, RandomInputs) {
  std::mt19937 rng(7);
  const std::string valid = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
  HttpParseLimits lim;
  lim.max_body = 64;
  int complete = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = valid;
    const int edits = static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    if (i % 2) s.resize(rng() % (s.size() + 1));
    HttpRequest r;
    const HttpParse p = parse(s, r, lim);
    if (p.state != HttpParse::kComplete) continue;
    ++complete;
    ASSERT_LE(p.consumed, s.size());
    ASSERT_LE(r.body.size(), lim.max_body);
    HttpRequest shorter;
    ASSERT_NE(parse(std::string_view(s).substr(0, p.consumed - 1), shorter, lim).state, HttpParse::kComplete) << s;
  }
  EXPECT_GT(complete, 1000);
}

}  // namespace
}  // namespace anelab::serve
