#include "infer/server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>

#include "framework/core/error.h"

namespace anelab::serve {
namespace {

constexpr const char* kJson = "application/json";

// httplib::Server whose listening socket can be reached: cpp-httplib 0.11 listens with a backlog of 5
// (compiled into Debian's library), which drops connections under bursts of clients; bind() raises it.
class Server : public httplib::Server {
 public:
  int listen_fd() const { return svr_sock_; }
};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), kJson);
}

ApiError error_for_status(int status, const httplib::Request& req) {
  switch (status) {
    case 404: return {404, "Unknown path " + req.method + " " + req.path, "invalid_request_error", "", "not_found"};
    case 405: return {405, "Method " + req.method + " is not allowed on " + req.path, "invalid_request_error", "", "method_not_allowed"};
    case 413: return {413, "Request body too large", "invalid_request_error", "", "payload_too_large"};
    case 503: return {503, "The server is busy; retry later", "server_error", "", "overloaded"};
    default:
      return {status, "HTTP error " + std::to_string(status), status < 500 ? "invalid_request_error" : "server_error", "", ""};
  }
}

// Listening socket options: SO_REUSEADDR only (a restart may bind while old connections sit in TIME_WAIT).
// cpp-httplib's default also sets SO_REUSEPORT, which lets a second server bind a port that one is already
// listening on, and the kernel then splits the connections between the two.
void exclusive_socket_options(socket_t sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<void*>(&yes), sizeof yes);
}

// Response ids ("chatcmpl-" + 24 hex digits): random, so they differ across requests, workers and processes.
std::string random_response_id(Endpoint ep) {
  static std::mutex mu;
  static std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), static_cast<unsigned>(::getpid()),
                      static_cast<unsigned>(Clock::now().time_since_epoch().count())};
    return std::mt19937_64(seq);
  }();
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lk(mu);
    a = rng();
    b = rng();
  }
  char id[48];
  std::snprintf(id, sizeof id, "%s-%016llx%08llx", ep == Endpoint::kChat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(a), static_cast<unsigned long long>(b >> 32));
  return id;
}

// Streams a job's text as SSE; true when the stream ended normally.
bool stream_job(const std::shared_ptr<Job>& job, const ResponseMeta& meta, bool include_usage, httplib::DataSink& sink) {
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  if (meta.endpoint == Endpoint::kChat && !write(sse_role(meta))) return false;
  std::string held;  // bytes of an incomplete UTF-8 character
  auto last_write = Clock::now();
  for (bool done = false; !done;) {
    held += job->next(std::chrono::milliseconds(200), done);
    const size_t k = done ? held.size() : utf8_complete_prefix(held);
    if (k > 0) {
      if (!write(sse_delta(meta, std::string_view(held).substr(0, k)))) return false;
      held.erase(0, k);
      last_write = Clock::now();
    } else if (Clock::now() - last_write > std::chrono::seconds(2)) {
      if (!write(": keep-alive\n\n")) return false;  // notices a client that left while queued
      last_write = Clock::now();
    }
  }
  const GenOutcome& o = job->wait();
  if (o.error) {
    if (!write(sse_error(*o.error))) return false;
  } else if (o.stop_reason != "cancelled") {
    if (!write(sse_final(meta, finish_reason(o.stop_reason), o.usage, include_usage))) return false;
  }
  if (!write(std::string(kSseDone))) return false;
  sink.done();
  return true;
}

}  // namespace

HttpServer::HttpServer(Generator& gen, const ServerOptions& o) : gen_(gen), opt_(o) {
  svr_ = std::make_unique<Server>();
  if (opt_.http_threads == 0) opt_.http_threads = std::max<size_t>(16, 2 * (opt_.parallel + opt_.queue) + 8);
  const size_t nthreads = opt_.http_threads;
  svr_->new_task_queue = [nthreads] { return new httplib::ThreadPool(nthreads); };
  svr_->set_socket_options(exclusive_socket_options);
  svr_->set_payload_max_length(opt_.max_body);
  svr_->set_keep_alive_timeout(opt_.keep_alive_s);
  svr_->set_read_timeout(10);
  svr_->set_write_timeout(10);
  sched_ = std::make_unique<Scheduler>(opt_.parallel, opt_.queue, [this](size_t w, Job& job) {
    GenOutcome o = gen_.run(w, job);
    prompt_tokens_ += uint64_t(std::max<int64_t>(0, o.usage.prompt_tokens));
    completion_tokens_ += uint64_t(std::max<int64_t>(0, o.usage.completion_tokens));
    return o;
  });
  started_ = Clock::now();
  meter_ = std::make_unique<power::Meter>(opt_.power ? opt_.power() : power::select_source());
  try {
    if (meter_->available()) energy0_ = meter_->energy();
  } catch (const std::exception&) {
    // A failed read shows at the next scrape of /metrics (metrics() reads again and reports the error).
  }
  routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::routes() {
  httplib::Server& s = *svr_;
  s.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
    handle_generate(Endpoint::kCompletions, &q, &r);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
    handle_generate(Endpoint::kChat, &q, &r);
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
    r.set_content(dump(nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({gen_.info()})}}), kJson);
  });
  // OpenAI's models.retrieve: the one model by its id (ids may contain '/', e.g. "Qwen/Qwen2.5-0.5B").
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& q, httplib::Response& r) {
    const nlohmann::json info = gen_.info();
    const std::string id = q.matches[1];
    if (id == info["id"].get<std::string>()) return r.set_content(dump(info), kJson);
    send_error(r, ApiError{404, "The model '" + id + "' does not exist (this server has '" +
                                    info["id"].get<std::string>() + "')",
                           "invalid_request_error", "model", "model_not_found"});
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    const auto st = sched_->stats();
    nlohmann::json j{{"status", stopping_ ? "stopping" : "ok"},
                     {"mode", "http"},
                     {"model", gen_.info()["id"]},
                     {"uptime_s", std::chrono::duration<double>(Clock::now() - started_).count()},
                     {"workers", st.workers},
                     {"queue_max", st.max_queue},
                     {"running", st.running},
                     {"waiting", st.waiting},
                     {"admitted", st.admitted},
                     {"rejected", st.rejected},
                     {"completed", st.completed},
                     {"cancelled", st.cancelled},
                     {"failed", st.failed}};
    r.set_content(dump(j), kJson);
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    r.set_content(prometheus_metrics(metrics()), kPrometheusContentType);
  });
  // Wrong methods on known paths.
  auto not_allowed = [](const char* allow) {
    return [allow](const httplib::Request& q, httplib::Response& r) {
      send_error(r, error_for_status(405, q));
      r.set_header("Allow", allow);
    };
  };
  for (const char* p : {"/v1/completions", "/v1/chat/completions"}) {
    s.Get(p, not_allowed("POST"));
    s.Put(p, not_allowed("POST"));
    s.Delete(p, not_allowed("POST"));
    s.Patch(p, not_allowed("POST"));
  }
  for (const char* p : {"/v1/models", "/health", "/metrics"}) {
    s.Post(p, not_allowed("GET, HEAD"));
    s.Put(p, not_allowed("GET, HEAD"));
    s.Delete(p, not_allowed("GET, HEAD"));
    s.Patch(p, not_allowed("GET, HEAD"));
  }
  // Everything else that ends >= 400 with no body (404 routing, 413, 400 from the parser) gets JSON.
  s.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
    if (r.body.empty()) r.set_content(error_json(error_for_status(r.status, q)), kJson);
  });
  s.set_exception_handler([](const httplib::Request& q, httplib::Response& r, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(r, ApiError{500, what, "server_error", "", ""});
  });
  if (opt_.log_requests)
    s.set_logger([](const httplib::Request& q, const httplib::Response& r) {
      std::fprintf(stderr, "serve: %s %s -> %d\n", q.method.c_str(), q.path.c_str(), r.status);
    });
}

MetricsSnapshot HttpServer::metrics() {
  const auto st = sched_->stats();
  MetricsSnapshot m;
  m.uptime_s = std::chrono::duration<double>(Clock::now() - started_).count();
  m.workers = st.workers, m.queue_max = st.max_queue, m.running = st.running, m.waiting = st.waiting;
  m.admitted = st.admitted, m.rejected = st.rejected, m.completed = st.completed, m.cancelled = st.cancelled;
  m.failed = st.failed;
  m.prompt_tokens = prompt_tokens_.load(), m.completion_tokens = completion_tokens_.load();
  m.power_available = meter_->available();
  m.power_reason = meter_->reason();
  if (m.power_available) {
    try {
      const power::Sample since = power::difference(energy0_, meter_->energy());
      m.power_source = meter_->source_name();
      for (power::Rail r : meter_->rails()) m.energy_j.push_back({power::rail_name(r), since.joules[r]});
    } catch (const std::exception& e) {
      m.power_available = false;
      m.power_reason = e.what();
    }
  }
  return m;
}

void HttpServer::handle_generate(Endpoint ep, const void* qp, void* rp) {
  const auto& q = *static_cast<const httplib::Request*>(qp);
  auto& res = *static_cast<httplib::Response*>(rp);
  CompletionRequest cr;
  Limits lim = opt_.limits;
  if (auto e = parse_request(ep, q.body, lim, cr)) return send_error(res, *e);
  GenParams gp;
  if (auto e = gen_.prepare(cr, gp)) return send_error(res, *e);
  auto job = std::make_shared<Job>(std::move(gp));
  switch (sched_->submit(job)) {
    case Scheduler::Admit::kOk: break;
    case Scheduler::Admit::kFull:
      res.set_header("Retry-After", std::to_string(opt_.retry_after_s));
      return send_error(res, ApiError{503, "The server is busy (" + std::to_string(opt_.parallel) + " running, " +
                                               std::to_string(opt_.queue) + " waiting); retry later",
                                      "server_error", "", "overloaded"});
    case Scheduler::Admit::kStopping:
      return send_error(res, ApiError{503, "The server is shutting down", "server_error", "", "shutting_down"});
  }
  ResponseMeta meta;
  meta.endpoint = ep;
  meta.model = gen_.info()["id"].get<std::string>();
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.id = random_response_id(ep);
  if (!cr.stream) {
    const GenOutcome& o = job->wait();
    if (o.error) {
      if (o.error->status == 503) res.set_header("Retry-After", std::to_string(opt_.retry_after_s));
      return send_error(res, *o.error);
    }
    res.set_content(dump(completion_json(meta, o.text, finish_reason(o.stop_reason), o.usage)), kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  const bool include_usage = cr.include_usage;
  {
    std::lock_guard<std::mutex> lk(streams_mu_);
    ++streams_;
  }
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, meta, include_usage](size_t, httplib::DataSink& sink) {
        if (stream_job(job, meta, include_usage, sink)) return true;
        job->cancel.store(true);
        return false;
      },
      [this, job](bool ok) {  // httplib calls this once, when the response is destroyed
        if (!ok) job->cancel.store(true);
        std::lock_guard<std::mutex> lk(streams_mu_);
        if (--streams_ == 0) streams_cv_.notify_all();
      });
}

int HttpServer::bind() {
  errno = 0;
  const int port = opt_.port == 0 ? svr_->bind_to_any_port(opt_.host)
                                  : (svr_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
  const int err = errno;
  ANELAB_CHECK(port > 0 || err != EADDRINUSE, "serve", "port ", opt_.port, " on ", opt_.host,
               " is already in use (another server?): pass another --port, or --port 0 for any free one");
  ANELAB_CHECK(port > 0, "serve", "cannot listen on ", opt_.host, ":", opt_.port, " (",
               err ? std::strerror(err) : "bind failed", "; pass another --port / --host)");
  // Re-listening on a listening socket only changes its backlog (Linux).
  ::listen(static_cast<Server*>(svr_.get())->listen_fd(), SOMAXCONN);
  return port;
}

void HttpServer::run() { svr_->listen_after_bind(); }

bool HttpServer::running() const { return svr_->is_running(); }

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  const auto deadline = Clock::now() + opt_.shutdown_grace;
  sched_->shutdown(opt_.shutdown_grace);  // new and queued -> 503, running finish (or are cancelled after the grace)
  {
    // Every job has ended: its stream writes what is left (at least 1 s for that, the grace permitting more).
    std::unique_lock<std::mutex> lk(streams_mu_);
    streams_cv_.wait_until(lk, std::max(deadline, Clock::now() + std::chrono::seconds(1)),
                           [this] { return streams_ == 0; });
  }
  svr_->stop();  // no new connections; listen_after_bind() joins the HTTP threads
}

}  // namespace anelab::serve
