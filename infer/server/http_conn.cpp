#include "infer/server/http_conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "framework/core/error.h"
#include "framework/core/platform.h"
#include "framework/core/untrusted.h"

namespace anelab::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kReadChunk = 64 * 1024;
// After an error answer the connection is read (and the bytes dropped) for up to this long / this much, so
// that a client still sending its body gets to read the answer instead of a reset ("lingering close").
constexpr auto kLinger = std::chrono::milliseconds(2000);
constexpr size_t kLingerBytes = 16u << 20;
// A connection in a health slot (over the connection caps) must send its GET /health within this time.
constexpr auto kHealthSlotTimeout = std::chrono::milliseconds(1000);

// Writes to a peer that has gone must fail with EPIPE, not raise SIGPIPE: MSG_NOSIGNAL per send where it
// exists (Linux), SO_NOSIGPIPE per socket where it exists (macOS).
#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;
#endif

void set_socket_flags(int fd) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
#ifdef SO_NOSIGPIPE
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
}

int ms_until(Clock::time_point t) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(d, 0, 1000));
}

std::string head_text(int minor, int status, const HttpResponse& r, bool keep_alive, bool chunked, size_t length) {
  std::string h = "HTTP/1." + std::to_string(minor) + " " + std::to_string(status) + " " + http_reason(status) + "\r\n";
  if (!r.content_type.empty()) h += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [k, v] : r.headers) h += k + ": " + v + "\r\n";
  if (chunked)
    h += "Transfer-Encoding: chunked\r\n";
  else if (!r.stream)
    h += "Content-Length: " + std::to_string(length) + "\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

// True once the peer has closed its side: a peek reads end-of-file (0) or an error. Bytes still to read (a
// pipelined request) mean the peer may still be there.
bool peer_has_closed(int fd) {
  char b;
  const ssize_t n = ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::string peer_address(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, text, sizeof text);
  else if (ss.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, text, sizeof text);
  return text;
}

int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

bool is_health(const HttpRequest& q) { return (q.method == "GET" || q.method == "HEAD") && q.path == "/health"; }

// Binds and listens on the first address of `host` that works: the socket, or -1 with *err set (EADDRNOTAVAIL
// when the name does not resolve).
int try_listen(const std::string& host, int port_number, int* err) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port = std::to_string(port_number);
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) {
    *err = EADDRNOTAVAIL;
    return -1;
  }
  int listen_fd = -1;
  *err = 0;
  for (addrinfo* a = res; a && listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      *err = errno;
      continue;
    }
    // SO_REUSEADDR only (a restart may bind while old connections sit in TIME_WAIT); never SO_REUSEPORT,
    // with which a second server could bind a port that one already listens on.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd = fd;
    } else {
      *err = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  return listen_fd;
}

// Reads and drops what the peer has already sent, so that close() sends FIN rather than RST (an RST can
// make the peer drop the answer written just before).
void drain(int fd) {
  char buf[4096];
  for (int i = 0; i < 16 && ::recv(fd, buf, sizeof buf, 0) > 0; ++i) {
  }
}

}  // namespace

struct HttpConnServer::Conn {
  int fd = -1;
  std::string buf;             // received bytes not yet parsed into a request
  Clock::time_point deadline;  // the request (or the idle wait) ends then
  bool partial = false;        // bytes of the next request have arrived (deadline = request_timeout)
  bool sent_continue = false;  // "100 Continue" written for this request
  bool eof = false;            // the peer closed its side
  size_t scanned = 0;          // buf[0, scanned) has no line break that ends the head
  size_t need = 0;             // bytes the request needs before parsing again is worth it
  bool closing = false;        // answered with an error: what still arrives is read and dropped
  size_t dropped = 0;          // bytes dropped while closing
  std::string addr;            // the client's address ("127.0.0.1", "::1")
  bool health_slot = false;    // admitted over the caps: GET /health only
  bool expect_continue = false;
  bool parked = false;  // the head asks for more body than the budget has room for: not read until it has
  size_t reserved = 0;  // bytes of the body budget this request holds (head + body, its whole size)
  bool idle() const { return fd >= 0 && !partial && !closing && !health_slot && buf.empty(); }
};

HttpConnServer::HttpConnServer(HttpConnOptions o, Handler h, ErrorBody e)
    : opt_(std::move(o)),
      handler_(std::move(h)),
      error_body_(std::move(e)),
      body_budget_(std::max(opt_.max_buffered, opt_.limits.max_head + opt_.limits.max_body)) {
  if (opt_.per_client == 0) opt_.per_client = std::max<size_t>(1, opt_.max_connections / 2);
  int p[2];
  ANELAB_CHECK(::pipe(p) == 0, "serve", "pipe: ", std::strerror(errno));
  wake_rd_ = p[0], wake_wr_ = p[1];
  set_socket_flags(wake_rd_);
  set_socket_flags(wake_wr_);
}

HttpConnServer::~HttpConnServer() {
  stop();
  for (int fd : listen_fds_) ::close(fd);
  for (int fd : {wake_rd_, wake_wr_})
    if (fd >= 0) ::close(fd);
  for (auto& c : reading_)
    if (c) ::close(c->fd);
}

int listen_socket(const std::string& host, int port_number) {
  int err = 0;
  const int listen_fd = try_listen(host, port_number, &err);
  ANELAB_CHECK(listen_fd >= 0 || err != EADDRINUSE, "serve", "port ", port_number, " on ", host,
               " is already in use (another server?): pass another --port, or --port 0 for any free one");
  ANELAB_CHECK(listen_fd >= 0, "serve", "cannot listen on ", host, ":", port_number, " (",
               err ? std::strerror(err) : "bind failed", "; pass another --port / --host)");
  return listen_fd;
}

std::vector<int> listen_sockets(const std::string& host, int port) {
  const bool v4 = host == "localhost" || host == "127.0.0.1", v6 = host == "::1" || host == "[::1]";
  if (!v4 && !v6) return {listen_socket(host, port)};
  const std::string first = v6 ? "::1" : "127.0.0.1", other = v6 ? "127.0.0.1" : "::1";
  for (int attempt = 0;; ++attempt) {
    const int a = listen_socket(first, port);
    const int bound = bound_port(a);
    int err = 0;
    const int b = try_listen(other, bound, &err);
    if (b >= 0) return {a, b};
    if (err != EADDRINUSE) return {a};  // the machine has no loopback of the other family: that one only
    ::close(a);
    if (port == 0 && attempt < 16) continue;  // a free port on one family taken on the other: pick again
    fail("serve", "port ", bound, " is free on ", first, " but taken on ", other,
         " (another server?): clients of localhost could reach that one; pass another --port, or --port 0");
  }
}

void check_port_free(const std::string& host, int port) {
  if (port == 0) return;
  for (int fd : listen_sockets(host, port)) ::close(fd);
}

int HttpConnServer::bind() {
  listen_fds_ = listen_sockets(opt_.host, opt_.port);
  for (int fd : listen_fds_) set_socket_flags(fd);
  return bound_port(listen_fds_[0]);
}

void HttpConnServer::wake() {
  const char c = 1;
  (void)!::write(wake_wr_, &c, 1);
}

void HttpConnServer::run() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_.load() || listen_fds_.empty()) return;
    running_ = true;
  }
  for (size_t i = 0; i < std::max<size_t>(1, opt_.threads); ++i) workers_.emplace_back([this] { worker(); });
  poll_loop();
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (int fd : listen_fds_) ::close(fd);
    listen_fds_.clear();
    listen_closed_ = true;
    workers_done_ = true;
  }
  stopped_cv_.notify_all();
  work_cv_.notify_all();
  for (auto& c : reading_)
    if (c) close_conn(*c);
  reading_.clear();
  for (auto& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& c : returned_) close_conn(*c);
  returned_.clear();
  running_ = false;
}

void HttpConnServer::stop() {
  if (stopping_.exchange(true)) return;
  wake();
  std::unique_lock<std::mutex> lk(mu_);
  if (!running_.load()) return;  // never ran: the destructor closes the socket
  stopped_cv_.wait(lk, [this] { return listen_closed_; });
}

void HttpConnServer::poll_loop() {
  std::vector<pollfd> fds;
  const size_t base = 1 + listen_fds_.size();  // fds: the wake pipe, the listening sockets, then reading_
  while (!stopping_.load()) {
    fds.clear();
    fds.push_back({wake_rd_, POLLIN, 0});
    // After an accept error other than "none left" (EMFILE: out of descriptors) the listening socket stays
    // readable; it is left out of the poll for 100 ms rather than spinning on it.
    const bool accepting = Clock::now() >= accept_pause_until_;
    for (int fd : listen_fds_) fds.push_back({fd, static_cast<short>(accepting ? POLLIN : 0), 0});
    auto next = Clock::now() + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, accept_pause_until_);
    for (const auto& c : reading_) {
      if (c->parked) reserve_body(*c);  // oldest first: room freed since the last poll goes to them
      fds.push_back({c->fd, static_cast<short>(c->parked ? 0 : POLLIN), 0});
      next = std::min(next, c->deadline);
    }
    ::poll(fds.data(), static_cast<nfds_t>(fds.size()), ms_until(next));
    if (stopping_.load()) break;
    const size_t polled = reading_.size();  // connections added below were not in this poll
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = *reading_[i];
      const short ev = fds[i + base].revents;
      bool keep = true;
      if (c.parked && (ev & (POLLHUP | POLLERR | POLLNVAL))) {
        close_conn(c);
        keep = false;
      } else if (!c.parked && (ev & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
        keep = read_conn(c);
      }
      if (keep && Clock::now() >= c.deadline) {  // also for a socket that had bytes: they may trickle forever
        if (c.partial && !c.closing)
          answer_and_close(c, 408,
                           "the request did not arrive within " +
                               std::to_string((c.health_slot ? kHealthSlotTimeout : opt_.request_timeout).count()) +
                               " ms");
        else
          close_conn(c);
        keep = false;
      }
      if (!keep) reading_[i].reset();
    }
    reading_.erase(std::remove(reading_.begin(), reading_.end(), nullptr), reading_.end());
    if (fds[0].revents & POLLIN) {
      char b[256];
      while (::read(wake_rd_, b, sizeof b) > 0) {
      }
      std::vector<std::unique_ptr<Conn>> back;
      {
        std::lock_guard<std::mutex> lk(mu_);
        back.swap(returned_);
      }
      for (auto& c : back)  // a pipelined request may be buffered already
        if (advance(*c)) reading_.push_back(std::move(c));
    }
    for (size_t l = 0; l < listen_fds_.size(); ++l)
      if (fds[1 + l].revents & POLLIN) accept_all(listen_fds_[l]);
  }
}

void HttpConnServer::accept_all(int listen_fd) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        accept_pause_until_ = Clock::now() + std::chrono::milliseconds(100);
      break;
    }
    set_socket_flags(fd);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->addr = peer_address(ss);
    c->deadline = Clock::now() + opt_.idle_timeout;
    if (admit(*c)) reading_.push_back(std::move(c));
  }
  // Connections closed to make room (idle ones, the oldest health slot) leave the list.
  reading_.erase(std::remove_if(reading_.begin(), reading_.end(), [](const auto& c) { return c->fd < 0; }),
                 reading_.end());
}

HttpConnServer::Conn* HttpConnServer::oldest(const std::string* addr, bool idle) {
  Conn* best = nullptr;
  for (const auto& c : reading_) {
    if (c->fd < 0 || (addr && c->addr != *addr)) continue;
    if (idle ? !c->idle() : !(c->health_slot && !c->closing)) continue;
    if (!best || c->deadline < best->deadline) best = c.get();  // same timeout each: earliest deadline = oldest
  }
  return best;
}

void HttpConnServer::count_open(const Conn& c, int delta) {
  std::lock_guard<std::mutex> lk(count_mu_);
  if (delta > 0)
    open_ += 1;
  else
    open_ -= 1;
  if (c.health_slot) {
    in_health_slots_ = delta > 0 ? in_health_slots_ + 1 : in_health_slots_ - 1;
    return;
  }
  normal_ = delta > 0 ? normal_ + 1 : normal_ - 1;
  size_t& n = per_addr_[c.addr];
  n = delta > 0 ? n + 1 : n - 1;
  if (n == 0) per_addr_.erase(c.addr);
}

bool HttpConnServer::admit(Conn& c) {
  size_t total = 0, mine = 0, slots = 0;
  {
    std::lock_guard<std::mutex> lk(count_mu_);
    total = normal_, slots = in_health_slots_;
    auto it = per_addr_.find(c.addr);
    mine = it == per_addr_.end() ? 0 : it->second;
  }
  const bool over_client = mine >= opt_.per_client, over_total = total >= opt_.max_connections;
  if (over_client || over_total) {
    // Idle connections (no byte of a request) make room first: this address's when it is over its own cap.
    if (Conn* idle = oldest(over_client ? &c.addr : nullptr, true)) {
      close_conn(*idle);
    } else {
      c.health_slot = true;
      if (slots >= opt_.health_slots) {
        Conn* old = oldest(nullptr, false);
        const std::string why = "too many connections (" + std::to_string(total) + " open, " + std::to_string(mine) +
                                " from " + c.addr + "); retry later";
        if (!old) {  // every health slot is being answered: nothing to make room with
          c.health_slot = false;
          c.closing = true;  // not counted: close_conn must not count it out
          answer(c, 503, why);
          drain(c.fd);
          ::close(c.fd);
          c.fd = -1;
          return false;
        }
        answer_and_close(*old, 503, why);
      }
      c.deadline = Clock::now() + kHealthSlotTimeout;
    }
  }
  count_open(c, +1);
  return true;
}

void HttpConnServer::reserve_body(Conn& c) {
  if (!body_budget_.try_take(c.need)) {
    c.parked = true;
    return;
  }
  c.parked = false;
  c.reserved = c.need;
  c.buf.reserve(c.need);
  if (c.expect_continue && !c.sent_continue) {
    c.sent_continue = true;
    const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
    (void)!::send(c.fd, cont.data(), cont.size(), kSendFlags);
  }
}

bool HttpConnServer::read_conn(Conn& c) {
  char buf[kReadChunk];
  // Before the head is parsed at most max_head + 1 bytes are held (one more than a head may have, so an
  // oversized one is seen); after it, only the rest of this request, into its reservation.
  size_t want = sizeof buf;
  if (!c.closing && c.need > 0)
    want = c.need > c.buf.size() ? c.need - c.buf.size() : 1;
  else if (!c.closing)
    want = c.buf.size() <= opt_.limits.max_head ? opt_.limits.max_head + 1 - c.buf.size() : 1;
  const ssize_t n = ::recv(c.fd, buf, std::min(want, sizeof buf), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (c.closing) {
    c.dropped += n > 0 ? static_cast<size_t>(n) : 0;
    if (n > 0 && c.dropped < kLingerBytes) return true;
    close_conn(c);
    return false;
  }
  if (n <= 0) {
    c.eof = true;
    if (c.buf.empty() || n < 0) {
      close_conn(c);
      return false;
    }
  } else {
    if (!c.partial) c.partial = true, c.deadline = Clock::now() + opt_.request_timeout;
    c.buf.append(buf, static_cast<size_t>(n));
  }
  return advance(c);
}

void HttpConnServer::refuse(Conn& c, int status, const std::string& message) {
  answer(c, status, message);
  c.closing = true, c.buf.clear(), c.buf.shrink_to_fit();
  c.deadline = Clock::now() + kLinger;
}

bool HttpConnServer::advance(Conn& c) {
  if (c.buf.empty()) {
    if (c.eof) close_conn(c);
    return !c.eof;
  }
  if (!c.partial) c.partial = true, c.deadline = Clock::now() + opt_.request_timeout;
  if (c.parked) return true;
  // Parsing again only when it can end differently: a line break arrived while the head is incomplete (or
  // the head outgrew its limit), or the whole body is there. So a trickle costs O(bytes), not O(bytes^2).
  if (!c.eof && c.need == 0 && c.buf.find('\n', c.scanned) == std::string::npos &&
      c.buf.size() <= opt_.limits.max_head) {
    c.scanned = c.buf.size();
    return true;
  }
  if (!c.eof && c.need > 0 && c.buf.size() < c.need) return true;
  Work w;
  const HttpParse p = parse_http_request(c.buf, opt_.limits, w.req);
  c.scanned = c.buf.size(), c.need = 0;
  if (p.state == HttpParse::kError) {
    refuse(c, p.status, p.message);
    return true;
  }
  if (c.health_slot && (p.state == HttpParse::kComplete || p.head_done) && !is_health(w.req)) {
    refuse(c, 503,
           "too many connections from " + c.addr + ": only GET /health is answered beyond the cap; retry later");
    return true;
  }
  if (p.state == HttpParse::kIncomplete) {
    if (c.eof) {
      close_conn(c);
      return false;
    }
    if (p.head_done && c.reserved == 0) {
      c.need = p.consumed;
      c.expect_continue = w.req.expect_continue;
      reserve_body(c);
    } else if (p.head_done) {
      c.need = p.consumed;
    }
    return true;
  }
  c.buf.erase(0, p.consumed);
  if (c.buf.capacity() > 2 * (opt_.limits.max_head + 1)) c.buf.shrink_to_fit();  // a large body's room
  c.scanned = 0;
  if (c.health_slot) w.req.keep_alive = false;
  // Hand over: the Conn moves into the work item (its owner in reading_ is reset by the caller).
  auto owned = std::make_unique<Conn>(std::move(c));
  c.fd = -1, c.reserved = 0;
  w.conn = std::move(owned);
  {
    std::lock_guard<std::mutex> lk(mu_);
    work_.push_back(std::move(w));
  }
  work_cv_.notify_one();
  return false;
}

void HttpConnServer::answer_and_close(Conn& c, int status, const std::string& message) {
  answer(c, status, message);
  drain(c.fd);
  close_conn(c);
}

void HttpConnServer::answer(Conn& c, int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.set_content(error_body_(status, message), "application/json");
  if (status == 503) r.set_header("Retry-After", "1");
  const std::string out = head_text(1, status, r, false, false, r.body.size()) + r.body;
  (void)!::send(c.fd, out.data(), out.size(), kSendFlags);  // small: fits the socket buffer of a new connection
  if (opt_.log_requests)
    std::fprintf(stderr, "serve: connection answered %d: %s\n", status, quote_untrusted(message).c_str());
  ::shutdown(c.fd, SHUT_WR);
}

void HttpConnServer::close_conn(Conn& c) {
  if (c.fd < 0) return;
  ::close(c.fd);
  c.fd = -1;
  release_body(c);
  count_open(c, -1);
}

void HttpConnServer::release_body(Conn& c) {
  if (c.reserved == 0) return;
  const bool trim = body_budget_.give(c.reserved);
  c.reserved = 0;
  if (trim) (void)platform::release_free_memory();  // a burst of large bodies has ended: give the pages back
  wake();                                           // parked connections may fit now
}

void HttpConnServer::worker() {
  for (;;) {
    Work w;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [this] { return !work_.empty() || workers_done_; });
      if (work_.empty()) return;
      w = std::move(work_.front());
      work_.pop_front();
    }
    Conn& c = *w.conn;
    w.req.peer_closed = [fd = c.fd] { return peer_has_closed(fd); };
    const bool keep = respond(c, w.req) && w.req.keep_alive && !stopping_.load();
    w.req = HttpRequest{};  // the body's bytes go before its reservation does
    release_body(c);
    if (!keep) {
      close_conn(c);
      continue;
    }
    c.partial = false, c.sent_continue = false;
    c.deadline = Clock::now() + opt_.idle_timeout;
    {
      std::lock_guard<std::mutex> lk(mu_);
      returned_.push_back(std::move(w.conn));
    }
    wake();
  }
}

// Runs the handler and writes its answer; false when the connection cannot carry another request.
bool HttpConnServer::respond(Conn& c, const HttpRequest& q) {
  HttpResponse r;
  try {
    handler_(q, r);
  } catch (const std::exception& e) {
    r = HttpResponse{};
    r.status = 500;
    r.set_content(error_body_(500, e.what()), "application/json");
  }
  if (opt_.log_requests)
    std::fprintf(stderr, "serve: %s %s -> %d\n", quote_untrusted(q.method).c_str(), quote_untrusted(q.path).c_str(),
                 r.status);
  const bool head_only = q.method == "HEAD";
  const bool chunked = r.stream && q.minor == 1 && !head_only;
  const bool keep_alive = q.keep_alive && (!r.stream || chunked) && !stopping_.load();
  std::string out = head_text(q.minor, r.status, r, keep_alive, chunked, r.body.size());
  if (!r.stream) {
    if (!head_only) out += r.body;
    return write_all(c.fd, out) && keep_alive;
  }
  if (!write_all(c.fd, out)) return false;
  if (head_only) return false;
  const bool ok = r.stream([&](std::string_view s) {
    if (s.empty()) return true;
    if (!chunked) return write_all(c.fd, s);
    char len[24];
    std::snprintf(len, sizeof len, "%zx\r\n", s.size());
    std::string chunk = len;
    chunk.append(s);
    chunk += "\r\n";
    return write_all(c.fd, chunk);
  });
  if (!ok) return false;
  return chunked ? write_all(c.fd, "0\r\n\r\n") && keep_alive : false;
}

bool HttpConnServer::write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), kSendFlags);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, static_cast<int>(opt_.write_timeout.count()));
      if (r > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL))) continue;
    }
    return false;
  }
  return true;
}

}  // namespace anelab::serve
