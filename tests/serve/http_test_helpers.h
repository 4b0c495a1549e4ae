// Shared by the in-process HTTP tests of `anelab serve`: a fake Generator (a slow token source), raw
// loopback sockets, and a server running on its own thread on a free port.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "infer/server/http_server.h"

// Linux has MSG_NOSIGNAL; macOS sockets get SO_NOSIGPIPE per socket in connect_to().
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

namespace anelab::serve::test {

using namespace std::chrono_literals;
using nlohmann::json;

class FakeGen final : public Generator {
 public:
  std::atomic<int> cancelled{0}, started{0};
  std::atomic<bool> hold{false};  // runs block until released
  std::chrono::milliseconds period{2ms};
  std::string script;  // non-empty: the answer's text, one byte per token (else "x" per token)
  int64_t context() const override { return 64; }
  std::optional<ApiError> prepare(const CompletionRequest& r, GenParams& out) const override {
    out.prompt = {1, 2, 3};
    out.max_new_tokens = r.max_tokens;
    return std::nullopt;
  }
  GenOutcome run(size_t, Job& job) override {
    ++started;
    while (hold.load() && !job.cancel.load()) std::this_thread::sleep_for(1ms);
    GenOutcome o;
    o.usage.prompt_tokens = 3;
    const int64_t n = script.empty() ? job.params.max_new_tokens : static_cast<int64_t>(script.size());
    for (int64_t i = 0; i < n; ++i) {
      if (job.cancel.load()) {
        ++cancelled;
        o.stop_reason = "cancelled";
        return o;
      }
      const std::string t = script.empty() ? "x" : script.substr(static_cast<size_t>(i), 1);
      job.push_text(t);
      o.text += t;
      ++o.usage.completion_tokens;
      std::this_thread::sleep_for(period);
    }
    o.stop_reason = script.empty() ? "length" : "eos";
    return o;
  }
  json info() const override { return json{{"id", "fake"}, {"object", "model"}}; }
};

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
#ifdef SO_NOSIGPIPE
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline std::string request(const std::string& method, const std::string& path, const std::string& body) {
  return method + " " + path +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Sends a request with Connection: close and reads the whole answer.
inline std::string roundtrip(int port, const std::string& raw) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  (void)!::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

inline int status_of(const std::string& resp) { return resp.size() > 12 ? std::atoi(resp.c_str() + 9) : 0; }
inline json body_json(const std::string& resp) {
  const size_t at = resp.find("\r\n\r\n");
  return at == std::string::npos ? json() : json::parse(resp.substr(at + 4), nullptr, false);
}

struct Running {
  FakeGen gen;
  std::unique_ptr<HttpServer> srv;
  std::thread th;
  int port = 0;
  explicit Running(ServerOptions o) {
    o.port = 0;
    o.log_requests = false;
    srv = std::make_unique<HttpServer>(gen, o);
    port = srv->bind();
    th = std::thread([this] { srv->run(); });
    while (!srv->running()) std::this_thread::sleep_for(1ms);
  }
  ~Running() {
    gen.hold = false;
    srv->stop();
    th.join();
  }
};

}  // namespace anelab::serve::test
