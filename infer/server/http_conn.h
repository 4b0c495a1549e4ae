// The connection layer of `anelab serve`: POSIX sockets and poll(), no HTTP library.
//
// One poller thread (the caller of run()) accepts connections and reads every socket that is waiting for
// a request, without blocking on any of them; it parses with parse_http_request (http_request.h) and hands
// each complete request to a pool of worker threads, which run the handler and write the response. So a
// worker is only ever held by a complete request: clients that trickle bytes cost the poller one read
// each and never starve the others.
//
//   request_timeout  a request's head and body must arrive within this time of its first byte, else
//                    408 and the connection is closed (a slow client is cut off, however it trickles)
//   idle_timeout     a kept-alive connection waiting for its next request is closed after this
//   write_timeout    a response write that makes no progress for this long closes the connection
//   max_connections  open connections (reading, queued and being answered); one more is answered 503
//                    (JSON error, Retry-After) and closed at once
//   pipelining       requests sent back to back on one connection are answered one after the other, in
//                    order (the next is parsed from what is left once the previous answer is written)
//   head/body limits a bad or too long head or a bad Content-Length is answered (400/413/431/501/505)
//                    as soon as the head arrives, before any body is waited for; what the client still
//                    sends is then read and dropped for up to 2 s / 16 MiB before the close, so that it
//                    reads the answer rather than a connection reset
//
// Memory: a connection holds at most max_head + max_body + 64 KiB (one read) of request bytes.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "infer/server/http_request.h"

namespace anelab::serve {

struct HttpResponse {
  int status = 200;
  std::string content_type, body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Allow, Retry-After, ...)
  // A streamed body: called once on the worker with a writer of body bytes (chunked transfer on HTTP/1.1);
  // returns false when the stream ended early (the connection is then closed).
  std::function<bool(const std::function<bool(std::string_view)>& write)> stream;

  void set_content(std::string b, std::string type) { body = std::move(b), content_type = std::move(type); }
  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
};

struct HttpConnOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t threads = 16;
  size_t max_connections = 256;
  std::chrono::milliseconds request_timeout{10000}, idle_timeout{2000}, write_timeout{10000};
  HttpParseLimits limits;
  bool log_requests = true;  // "serve: METHOD PATH -> STATUS" on stderr
};

class HttpConnServer {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  // Body of the answers the layer gives itself (400/408/413/431/503/...): (status, message) -> JSON.
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;

  HttpConnServer(HttpConnOptions o, Handler h, ErrorBody e);
  ~HttpConnServer();
  // Binds and listens; returns the port. Throws anelab::Error naming host and port when it cannot.
  int bind();
  // Accepts and serves until stop(); returns once every worker has finished its response.
  void run();
  // Thread-safe, idempotent: stops accepting (the listening socket is closed when this returns), closes
  // connections that wait for a request; responses being written finish, then run() returns.
  void stop();
  bool running() const { return running_.load(); }
  size_t open_connections() const { return open_.load(); }

 private:
  struct Conn;
  // A complete request handed to a worker with its connection (defined here: std::deque needs the type).
  struct Work {
    std::unique_ptr<Conn> conn;
    HttpRequest req;
  };
  void poll_loop();
  void accept_all();
  bool read_conn(Conn& c);  // false: the connection is closed or handed to a worker
  bool advance(Conn& c);    // parses what is buffered; false: closed or handed to a worker
  void answer(Conn& c, int status, const std::string& message);  // writes the error, ends our side
  void answer_and_close(Conn& c, int status, const std::string& message);
  void close_conn(Conn& c);
  void worker();
  bool respond(Conn& c, const HttpRequest& q);
  bool write_all(int fd, std::string_view data);
  void wake();

  HttpConnOptions opt_;
  Handler handler_;
  ErrorBody error_body_;
  int listen_fd_ = -1, wake_rd_ = -1, wake_wr_ = -1;
  std::atomic<bool> running_{false}, stopping_{false};
  std::atomic<size_t> open_{0};
  std::vector<std::unique_ptr<Conn>> reading_;                  // poller thread only
  std::chrono::steady_clock::time_point accept_pause_until_{};  // poller thread only
  std::mutex mu_;                                               // guards the fields below
  std::condition_variable work_cv_, stopped_cv_;
  std::deque<Work> work_;
  std::vector<std::unique_ptr<Conn>> returned_;  // kept-alive connections back from workers
  bool listen_closed_ = false, workers_done_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace anelab::serve
