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
//   max_connections  open connections (reading, queued and being answered), and per_client of them from one
//                    client address. A connection over either cap first closes the oldest idle connection
//                    (accepted or kept alive, no byte of a request yet) of that address (per-client cap) or of
//                    any (total cap); with none idle it gets one of health_slots extra slots, where only
//                    GET /health is answered (anything else 503 + Retry-After) within 1 s; with those full the
//                    oldest such slot is answered 503 and closed to make room, so /health always gets in
//   body budget      a request whose Content-Length is known reserves its bytes from one budget shared by
//                    all connections (max_buffered) before its body is read; without room the connection is
//                    not read (TCP holds the bytes) until room is freed, or its deadline answers 408
//   peer_closed      while a request is answered, HttpRequest::peer_closed says whether the client has closed
//                    its side, so the handler can stop work for a client that left
//   pipelining       requests sent back to back on one connection are answered one after the other, in
//                    order (the next is parsed from what is left once the previous answer is written)
//   head/body limits a bad or too long head or a bad Content-Length is answered (400/413/431/501/505)
//                    as soon as the head arrives, before any body is waited for; what the client still
//                    sends is then read and dropped for up to 2 s / 16 MiB before the close, so that it
//                    reads the answer rather than a connection reset
//
// Memory: a connection reads at most max_head + 1 bytes before its head is parsed, and its body only into a
// reservation of the body budget (the exact size, no growth), so the request bytes held at once are at most
// max_buffered (never less than max_head + max_body) + 2 x (max_head + 1) per connection (string capacity).
// Listening: a loopback host ("localhost", "127.0.0.1", "::1") is served on both 127.0.0.1 and ::1 (where the
// machine has IPv6), so a client of "localhost" cannot reach another server on the other family's port.
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
#include <unordered_map>
#include <utility>
#include <vector>

#include "infer/server/byte_budget.h"
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
  size_t per_client = 0;                   // connections of one client address; 0: max_connections / 2 (>= 1)
  size_t health_slots = 32;                // extra connections beyond the caps, GET /health only
  size_t max_buffered = size_t(32) << 20;  // request bytes reserved at once (raised to max_head + max_body)
  std::chrono::milliseconds request_timeout{10000}, idle_timeout{2000}, write_timeout{10000};
  HttpParseLimits limits;
  bool log_requests = true;  // "serve: METHOD PATH -> STATUS" on stderr
};

// A listening socket on host:port (SO_REUSEADDR, never SO_REUSEPORT); throws "[serve] port P on H is already
// in use ..." or naming the host and the reason.
int listen_socket(const std::string& host, int port);
// The sockets a server on host:port listens on: for a loopback host both 127.0.0.1 and ::1 on one port (::1
// left out where the machine has no IPv6; with port 0 the pair is retried until one port is free on both),
// else the one of listen_socket. A port taken on either family throws naming that address.
std::vector<int> listen_sockets(const std::string& host, int port);
// The same check without keeping the sockets (port 0: nothing to check), so that `anelab serve` refuses a
// taken port before it spends the time to load the model.
void check_port_free(const std::string& host, int port);

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
  const ByteBudget& body_budget() const { return body_budget_; }

 private:
  struct Conn;
  // A complete request handed to a worker with its connection (defined here: std::deque needs the type).
  struct Work {
    std::unique_ptr<Conn> conn;
    HttpRequest req;
  };
  void poll_loop();
  void accept_all(int listen_fd);
  // Admits a new connection under the caps (see the header comment); false when it was answered 503.
  bool admit(Conn& c);
  Conn* oldest(const std::string* addr, bool idle);  // in reading_: oldest idle / health-slot connection
  void count_open(const Conn& c, int delta);
  bool read_conn(Conn& c);  // false: the connection is closed or handed to a worker
  bool advance(Conn& c);    // parses what is buffered; false: closed or handed to a worker
  void answer(Conn& c, int status, const std::string& message);  // writes the error, ends our side
  void answer_and_close(Conn& c, int status, const std::string& message);
  void refuse(Conn& c, int status, const std::string& message);  // answers, then reads and drops (lingers)
  void reserve_body(Conn& c);  // takes c.need bytes of the body budget, else parks the connection
  void close_conn(Conn& c);
  void release_body(Conn& c);  // gives the connection's body reservation back
  void worker();
  bool respond(Conn& c, const HttpRequest& q);
  bool write_all(int fd, std::string_view data);
  void wake();

  HttpConnOptions opt_;
  Handler handler_;
  ErrorBody error_body_;
  std::vector<int> listen_fds_;
  int wake_rd_ = -1, wake_wr_ = -1;
  std::atomic<bool> running_{false}, stopping_{false};
  std::atomic<size_t> open_{0};
  ByteBudget body_budget_;
  std::mutex count_mu_;  // guards the counts below (connections close on any thread)
  size_t normal_ = 0, in_health_slots_ = 0;
  std::unordered_map<std::string, size_t> per_addr_;            // connections under the caps, by client address
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
