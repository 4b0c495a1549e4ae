// The HTTP front of `anelab serve`: routing over the connection layer (http_conn.h: POSIX sockets + poll,
// whole-request deadlines, a connection cap, pipelining; no HTTP library).
//
// Bodies are parsed under a budget of bytes being parsed at once (parse_budget: a parsed document takes several
// times its text), so a burst of large bodies is parsed a few at a time, not one per HTTP thread.
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id} (404
// model_not_found for another id), GET /health, GET /metrics; llama.cpp's POST /completion (its fields and
// answer), POST /tokenize, POST /detokenize, GET /props, GET /slots, POST /slots/{id}?action=save|restore|erase (slot
// files, Generator::slot_action), GET / POST /lora-adapters (the runtime LoRA adapters and their global scales)
// (Prometheus text: request counters, tokens, and energy per rail when the machine has a power source,
// framework/core/power.h); another method
// on those paths -> 405 (+ Allow), any other path -> 404, bodies over max_body -> 413, all as
// OpenAI-style error JSON. With an api key every route but /health needs "Authorization: Bearer KEY"
// (else 401 invalid_api_key). Generation requests are prepared on the HTTP thread (parse + tokenize, so
// bad input is answered 4xx before anything is queued), then submitted to the Scheduler: full queue
// -> 503 + Retry-After. Streams are Server-Sent Events; a failed write (client gone) cancels the job.
// Response ids are random ("cmpl-"/"chatcmpl-" + 24 hex digits), unique across processes. The port is
// bound exclusively (no SO_REUSEPORT): a port another server listens on is an error naming the port.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "framework/core/power.h"
#include "infer/server/api.h"
#include "infer/server/engine_adapter.h"
#include "infer/server/http_conn.h"
#include "infer/server/scheduler.h"

namespace anelab::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                         // 0: any free port (see bound_port())
  size_t parallel = 1;                     // generation workers (the Generator must have as many)
  size_t queue = 16;                       // requests waiting beyond the running ones
  size_t max_body = 1 << 20;               // bytes; larger -> 413
  size_t http_threads = 0;                 // 0: 2 * (parallel + queue) + 8, at least 16
  size_t max_connections = 256;            // open connections; beyond it idle ones are closed first, then /health only
  size_t per_client = 0;                   // open connections of one client address; 0: max_connections / 2
  size_t max_buffered = size_t(32) << 20;  // request bytes held at once by all connections (body budget)
  size_t parse_budget = size_t(1) << 20;   // JSON bytes being parsed at once (at least one max_body)
  int retry_after_s = 1;
  std::chrono::milliseconds shutdown_grace{10000};
  std::chrono::milliseconds request_timeout{10000};  // whole request (head + body) from its first byte
  int keep_alive_s = 2;                              // idle kept-alive connections are closed after this
  std::string api_key;                               // non-empty: "Authorization: Bearer KEY" on all but /health
  bool log_requests = true;                          // one line per request on stderr
  // The power source for /metrics; empty: power::select_source() for this machine.
  std::function<power::Selection()> power;
  Limits limits;
};

class HttpServer {
 public:
  HttpServer(Generator& gen, const ServerOptions& o);
  ~HttpServer();
  // Binds the socket; returns the port (throws anelab::Error when it cannot bind).
  int bind();
  // Serves until stop(); returns after in-flight requests finished (or were cancelled).
  void run();
  // Thread-safe; idempotent. Drains the scheduler (see Scheduler::shutdown: new requests get 503, running
  // ones finish within the grace), then stops accepting connections; run() returns once the streams still
  // writing their last chunks have finished.
  void stop();
  bool running() const;
  Scheduler& scheduler() { return *sched_; }
  const ByteBudget& parse_budget() const { return *parse_budget_; }
  const ByteBudget& body_budget() const { return conn_->body_budget(); }

 private:
  void route(const HttpRequest& q, HttpResponse& r);
  void health(HttpResponse& r);
  void props(HttpResponse& r);
  void slots(HttpResponse& r);
  void handle_tokenize(const HttpRequest& q, HttpResponse& r);
  void handle_detokenize(const HttpRequest& q, HttpResponse& r);
  void handle_generate(Endpoint ep, const HttpRequest& q, HttpResponse& res);
  MetricsSnapshot metrics();
  Generator& gen_;
  ServerOptions opt_;
  std::unique_ptr<HttpConnServer> conn_;
  std::unique_ptr<ByteBudget> parse_budget_;
  std::unique_ptr<Scheduler> sched_;
  std::atomic<bool> stopping_{false};
  Clock::time_point started_;
  std::unique_ptr<power::Meter> meter_;
  power::Reading energy0_;  // at start: /metrics reports energy since then
  std::atomic<uint64_t> prompt_tokens_{0}, completion_tokens_{0}, cached_tokens_{0}, drafted_{0}, accepted_{0};
};

// True for loopback hosts ("127.x.x.x", "::1", "localhost").
bool is_loopback_host(const std::string& host);
// The one-line warning for a server reachable from other machines without an api key, or "" when there is
// nothing to warn about.
std::string exposure_warning(const std::string& host, const std::string& api_key);

}  // namespace anelab::serve
