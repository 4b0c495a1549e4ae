#include "infer/server/http_server.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>

#include "framework/core/error.h"
#include "framework/core/platform.h"

namespace anelab::serve {
namespace {

constexpr const char* kJson = "application/json";

void send_error(HttpResponse& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), kJson);
}

// The error the connection layer answers itself (bad head, deadline, too many connections, ...).
ApiError layer_error(int status, const std::string& message) {
  switch (status) {
    case 413:
      return {413, "Request body too large: " + message, "invalid_request_error", "", "payload_too_large"};
    case 408:
      return {408, "Request timeout: " + message, "invalid_request_error", "", "request_timeout"};
    case 503:
      return {503, "The server is busy: " + message, "server_error", "", "overloaded"};
    default:
      return {status, message, status < 500 ? "invalid_request_error" : "server_error", "", ""};
  }
}

ApiError not_found(const HttpRequest& q) {
  return {404, "Unknown path " + q.method + " " + q.path, "invalid_request_error", "", "not_found"};
}

void not_allowed(const HttpRequest& q, HttpResponse& r, const char* allow) {
  send_error(r, {405, "Method " + q.method + " is not allowed on " + q.path, "invalid_request_error", "",
                 "method_not_allowed"});
  r.set_header("Allow", allow);
}

// Compares in a time that does not depend on where the strings differ (the key is not leaked byte by byte).
bool same_secret(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max<size_t>(1, b.size());
  for (size_t i = 0; i < a.size(); ++i)
    diff |=
        static_cast<unsigned>(static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b.empty() ? 0 : b[i % n]));
  return diff == 0;
}

// Response ids ("chatcmpl-" + 24 hex digits): random, so they differ across requests, workers and processes.
std::string random_response_id(Endpoint ep) {
  static std::mutex mu;
  static std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(),
                      rd(),
                      rd(),
                      rd(),
                      static_cast<unsigned>(platform::process_id()),
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

// How often a request waiting for its job asks whether its client has left.
constexpr auto kPeerCheck = std::chrono::milliseconds(100);

bool peer_closed(const HttpRequest& q) { return q.peer_closed && q.peer_closed(); }

// Streams a job's text as SSE; true when the stream ended normally, false when a write failed or the client
// closed its side (checked every kPeerCheck, also while the job is queued or in its prefill).
bool stream_job(const std::shared_ptr<Job>& job, const ResponseMeta& meta, bool include_usage,
                const std::function<bool(std::string_view)>& write, const std::function<bool()>& gone) {
  const bool llama = meta.endpoint == Endpoint::kLlama;  // llama.cpp's events: {content, stop}, no [DONE]
  if (meta.endpoint == Endpoint::kChat && !write(sse_role(meta))) return false;
  std::string held;  // bytes not yet sent: an incomplete UTF-8 character, or (with tools) a possible tool call
  auto last_write = Clock::now();
  for (bool done = false; !done;) {
    held += job->next(kPeerCheck, done);
    if (!done && gone && gone()) return false;
    size_t k = done ? held.size() : utf8_complete_prefix(held);
    if (meta.tools) {  // text that may be a call (tool_call_holdback) waits for the end, where it is parsed
      k = std::min(k, tool_call_holdback(held, meta.tool_form));
      if (done) {
        const ParsedToolCalls p = parse_tool_calls(held, meta.tool_form);
        if (!p.calls.empty()) {
          const std::string before = text_before_calls(held, meta.tool_form);
          if (!before.empty() && !write(sse_delta(meta, before))) return false;
          if (!write(sse_tool_calls(meta, p.calls))) return false;
          held.clear();
          const GenOutcome& o = job->wait();
          if (!o.error && o.stop_reason != "cancelled" && !write(sse_final(meta, "tool_calls", o.usage, include_usage)))
            return false;
          if (o.error && !write(sse_error(*o.error))) return false;
          return write(kSseDone);
        }
        k = held.size();
      }
    }
    if (k > 0) {
      const std::string_view piece = std::string_view(held).substr(0, k);
      nlohmann::json lps = nullptr;  // the logprob entries produced so far (a token's may precede its text)
      if (meta.logprobs)
        if (auto t = job->take_logprobs(); !t.empty()) lps = logprobs_json(meta.endpoint, t);
      if (!write(llama ? llama_sse_delta(piece) : sse_delta(meta, piece, lps))) return false;
      held.erase(0, k);
      last_write = Clock::now();
    } else if (Clock::now() - last_write > std::chrono::seconds(2)) {
      if (!write(": keep-alive\n\n")) return false;  // notices a client that left while queued
      last_write = Clock::now();
    }
  }
  if (meta.logprobs)  // entries whose text went out with an earlier chunk than they did
    if (auto t = job->take_logprobs(); !t.empty() && !write(sse_delta(meta, "", logprobs_json(meta.endpoint, t))))
      return false;
  const GenOutcome& o = job->wait();
  if (o.error) {
    if (!write(sse_error(*o.error))) return false;
  } else if (o.stop_reason != "cancelled") {
    if (!write(llama ? llama_sse_final(meta, o.stop_reason, o.usage)
                     : sse_final(meta, finish_reason(o.stop_reason), o.usage, include_usage)))
      return false;
  }
  return llama || write(kSseDone);
}

}  // namespace

// Allocations of at least this size get their own mapping and a free arena top above it goes back to the OS,
// so that a burst of large bodies does not stay resident in the HTTP threads' arenas.
constexpr size_t kHeapRetention = 128 * 1024;
// A body at least this large has its parsed document's memory given back as soon as it is parsed.
constexpr size_t kLargeBody = 64 * 1024;

HttpServer::HttpServer(Generator& gen, const ServerOptions& o) : gen_(gen), opt_(o) {
  (void)platform::limit_heap_retention(kHeapRetention);
  if (opt_.http_threads == 0) opt_.http_threads = std::max<size_t>(16, 2 * (opt_.parallel + opt_.queue) + 8);
  HttpConnOptions co;
  co.host = opt_.host;
  co.port = opt_.port;
  co.threads = opt_.http_threads;
  co.max_connections = opt_.max_connections;
  co.per_client = opt_.per_client;
  co.max_buffered = opt_.max_buffered;
  parse_budget_ = std::make_unique<ByteBudget>(std::max(opt_.parse_budget, opt_.max_body));
  co.request_timeout = opt_.request_timeout;
  co.idle_timeout = std::chrono::seconds(opt_.keep_alive_s);
  co.limits.max_body = opt_.max_body;
  co.log_requests = opt_.log_requests;
  conn_ = std::make_unique<HttpConnServer>(
      co, [this](const HttpRequest& q, HttpResponse& r) { route(q, r); },
      [](int status, const std::string& message) { return error_json(layer_error(status, message)); });
  sched_ = std::make_unique<Scheduler>(opt_.parallel, opt_.queue, [this](size_t w, Job& job) {
    GenOutcome o = gen_.run(w, job);
    prompt_tokens_ += uint64_t(std::max<int64_t>(0, o.usage.prompt_tokens));
    cached_tokens_ += uint64_t(std::max<int64_t>(0, o.usage.cached_tokens));
    drafted_ += uint64_t(std::max<int64_t>(0, o.usage.drafted));
    accepted_ += uint64_t(std::max<int64_t>(0, o.usage.accepted));
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
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(const HttpRequest& q, HttpResponse& r) {
  const std::string& p = q.path;
  if (!opt_.api_key.empty() && p != "/health") {
    const std::string_view auth = q.header("authorization");
    if (auth.substr(0, 7) != "Bearer " || !same_secret(auth.substr(7), opt_.api_key)) {
      r.set_header("WWW-Authenticate", "Bearer");
      return send_error(r, {401,
                            auth.empty() ? "Missing API key: send the header 'Authorization: Bearer KEY'"
                                         : "Incorrect API key provided",
                            "invalid_request_error", "", "invalid_api_key"});
    }
  }
  const bool get = q.method == "GET" || q.method == "HEAD";
  if (p == "/v1/completions" || p == "/v1/chat/completions" || p == "/completion") {
    if (q.method != "POST") return not_allowed(q, r, "POST");
    return handle_generate(p == "/v1/completions" ? Endpoint::kCompletions
                           : p == "/completion"   ? Endpoint::kLlama
                                                  : Endpoint::kChat,
                           q, r);
  }
  if (p == "/tokenize" || p == "/detokenize") {
    if (q.method != "POST") return not_allowed(q, r, "POST");
    return p == "/tokenize" ? handle_tokenize(q, r) : handle_detokenize(q, r);
  }
  if (p == "/lora-adapters") {  // llama.cpp's: GET the adapters, POST [{id, scale}] their global scales
    if (get) return r.set_content(dump(gen_.lora_adapters()), kJson);
    if (q.method != "POST") return not_allowed(q, r, "GET, HEAD, POST");
    std::vector<LoraScale> scales;
    if (auto e = parse_lora_adapters(q.body, opt_.limits, scales)) return send_error(r, *e);
    if (auto e = gen_.set_lora(scales)) return send_error(r, *e);
    return r.set_content(dump(nlohmann::json{{"success", true}}), kJson);
  }
  if (p.rfind("/slots/", 0) == 0) {  // llama.cpp's POST /slots/{id}?action=save|restore|erase
    if (q.method != "POST") return not_allowed(q, r, "POST");
    SlotActionRequest a;
    if (auto e = parse_slot_action(p, q.target, q.body, opt_.limits, a)) return send_error(r, *e);
    nlohmann::json out;
    if (auto e = gen_.slot_action(a.slot, a.action, a.filename, out)) return send_error(r, *e);
    return r.set_content(dump(out), kJson);
  }
  if (p == "/props" || p == "/slots") {
    if (!get) return not_allowed(q, r, "GET, HEAD");
    return p == "/props" ? props(r) : slots(r);
  }
  const bool model_by_id = p.rfind("/v1/models/", 0) == 0 && p.size() > 11;
  if (p != "/v1/models" && p != "/health" && p != "/metrics" && !model_by_id) return send_error(r, not_found(q));
  if (!get) return not_allowed(q, r, "GET, HEAD");
  const nlohmann::json info = gen_.info();
  if (p == "/v1/models") {
    r.set_content(dump(nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({info})}}), kJson);
  } else if (model_by_id) {  // OpenAI's models.retrieve (ids may contain '/', e.g. "Qwen/Qwen2.5-0.5B")
    const std::string id = p.substr(11);
    if (id == info["id"].get<std::string>()) return r.set_content(dump(info), kJson);
    send_error(
        r,
        ApiError{404, "The model '" + id + "' does not exist (this server has '" + info["id"].get<std::string>() + "')",
                 "invalid_request_error", "model", "model_not_found"});
  } else if (p == "/health") {
    health(r);
  } else {
    r.set_content(prometheus_metrics(metrics()), kPrometheusContentType);
  }
}

void HttpServer::handle_tokenize(const HttpRequest& q, HttpResponse& r) {
  TokenizeRequest t;
  if (auto e = parse_tokenize(q.body, opt_.limits, t)) return send_error(r, *e);
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  if (auto e = gen_.tokenize(t.content, t.add_special, ids, t.with_pieces ? &pieces : nullptr))
    return send_error(r, *e);
  nlohmann::json tokens = nlohmann::json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!t.with_pieces) {
      tokens.push_back(ids[i]);
      continue;
    }
    // llama.cpp: the piece as a string when it is whole UTF-8, else its bytes.
    const std::string& pc = pieces[i];
    nlohmann::json piece;
    if (utf8_complete_prefix(pc) == pc.size() && nlohmann::json::accept("\"" + pc + "\"")) {
      piece = pc;
    } else {
      piece = nlohmann::json::array();
      for (unsigned char c : pc) piece.push_back(c);
    }
    tokens.push_back({{"id", ids[i]}, {"piece", piece}});
  }
  r.set_content(dump(nlohmann::json{{"tokens", tokens}}), kJson);
}

void HttpServer::handle_detokenize(const HttpRequest& q, HttpResponse& r) {
  std::vector<int64_t> ids;
  if (auto e = parse_detokenize(q.body, opt_.limits, ids)) return send_error(r, *e);
  std::string text;
  if (auto e = gen_.detokenize(ids, text)) return send_error(r, *e);
  r.set_content(dump(nlohmann::json{{"content", text}}), kJson);
}

namespace {
// [{id, scale}] of a GET /lora-adapters list (llama.cpp's params.lora).
nlohmann::json lora_scales(const nlohmann::json& adapters) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : adapters) out.push_back({{"id", a["id"]}, {"scale", a["scale"]}});
  return out;
}
}  // namespace

// llama.cpp's /props: the defaults a request starts from, the slots and the model.
void HttpServer::props(HttpResponse& r) {
  const nlohmann::json info = gen_.info();
  const Limits& l = opt_.limits;
  nlohmann::json params{{"n_predict", l.default_max_tokens},
                        {"temperature", 1.0},
                        {"top_k", 0},
                        {"top_p", 1.0},
                        {"min_p", 0.0},
                        {"repeat_penalty", 1.0},
                        {"repeat_last_n", 64},
                        {"frequency_penalty", 0.0},
                        {"presence_penalty", 0.0},
                        {"seed", -1},
                        {"max_tokens_cap", l.max_tokens_cap},
                        {"lora", lora_scales(gen_.lora_adapters())}};
  const PromptCacheFigures c = gen_.prompt_cache();
  r.set_content(dump(nlohmann::json{{"default_generation_settings", {{"n_ctx", gen_.context()}, {"params", params}}},
                                    {"total_slots", opt_.parallel},
                                    {"model_path", info.value("id", "")},
                                    {"chat_template", info.value("chat_template", nlohmann::json(nullptr))},
                                    {"modalities", {{"vision", false}, {"audio", false}}},
                                    {"build_info", "anelab"},
                                    // anelab's: the adapters of --lora (GET /lora-adapters) and the prompt store
                                    {"lora_adapters", gen_.lora_adapters()},
                                    {"cache_ram_bytes", c.enabled ? c.capacity_bytes : 0}}),
                kJson);
}

void HttpServer::slots(HttpResponse& r) {
  nlohmann::json out = nlohmann::json::array();
  const BatchFigures b = gen_.batch();
  for (const auto& s : sched_->slots()) {
    nlohmann::json j{{"id", s.id},
                     {"n_ctx", gen_.context()},
                     {"is_processing", s.busy},
                     {"n_prompt_tokens", s.prompt_tokens},
                     {"n_predict", s.max_new_tokens}};
    const nlohmann::json st = gen_.slot_state(s.id);  // its LoRA scales (llama.cpp's params.lora) and cached tokens
    if (st.contains("lora")) j["params"] = {{"lora", st["lora"]}};
    if (st.contains("n_cached")) j["n_cached"] = st["n_cached"];
    if (s.id < b.slots.size()) {  // continuous batching: where the slot's sequence is
      const BatchFigures::Slot& x = b.slots[s.id];
      j["state"] = x.state, j["n_past"] = x.pos, j["n_decoded_total"] = x.decoded, j["n_prefilled_total"] = x.prefilled;
    }
    out.push_back(std::move(j));
  }
  r.set_content(dump(out), kJson);
}

void HttpServer::health(HttpResponse& r) {
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
                   {"failed", st.failed},
                   {"connections", conn_->open_connections()}};
  r.set_content(dump(j), kJson);
}

MetricsSnapshot HttpServer::metrics() {
  const auto st = sched_->stats();
  MetricsSnapshot m;
  m.uptime_s = std::chrono::duration<double>(Clock::now() - started_).count();
  m.workers = st.workers, m.queue_max = st.max_queue, m.running = st.running, m.waiting = st.waiting;
  m.admitted = st.admitted, m.rejected = st.rejected, m.completed = st.completed, m.cancelled = st.cancelled;
  m.failed = st.failed;
  for (const auto& slot : sched_->slots()) m.slot_busy.push_back(slot.busy ? 1 : 0);
  m.batch = gen_.batch();
  m.prompt_cache = gen_.prompt_cache();
  m.prompt_tokens = prompt_tokens_.load(), m.completion_tokens = completion_tokens_.load();
  m.cached_tokens = cached_tokens_.load();
  m.drafted = drafted_.load(), m.accepted = accepted_.load();
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

namespace {
// Cancels the job when the response is dropped before its stream ended (client gone, write failed).
struct CancelUnlessDone {
  Scheduler* sched = nullptr;
  std::shared_ptr<Job> job;
  bool done = false;
  ~CancelUnlessDone() {
    if (!done) sched->cancel(job);
  }
};
}  // namespace

void HttpServer::handle_generate(Endpoint ep, const HttpRequest& q, HttpResponse& res) {
  CompletionRequest cr;
  Limits lim = opt_.limits;
  if (!parse_budget_->take(q.body.size(), opt_.request_timeout)) {
    res.set_header("Retry-After", std::to_string(opt_.retry_after_s));
    return send_error(
        res, ApiError{503, "The server is busy parsing other requests; retry later", "server_error", "", "overloaded"});
  }
  auto parsed = parse_request(ep, q.body, lim, cr);  // the document is freed on return; cr keeps what it needs
  // A large document's memory goes back at once, from this thread's arena; a burst of smaller ones when it ends.
  if (parse_budget_->give(q.body.size()) || q.body.size() >= kLargeBody) (void)platform::release_free_memory();
  if (parsed) return send_error(res, *parsed);
  GenParams gp;
  if (auto e = gen_.prepare(cr, gp)) return send_error(res, *e);
  const std::string note = gp.note;
  const tok::ToolCallForm tool_form = gp.tool_form;
  auto job = std::make_shared<Job>(std::move(gp));
  job->client_gone = q.peer_closed;
  switch (sched_->submit(job)) {
    case Scheduler::Admit::kOk:
      break;
    case Scheduler::Admit::kFull:
      res.set_header("Retry-After", std::to_string(opt_.retry_after_s));
      return send_error(res, ApiError{503,
                                      "The server is busy (" + std::to_string(opt_.parallel) + " running, " +
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
  meta.note = note;
  meta.tools = ep == Endpoint::kChat && !cr.tools.empty();
  meta.tool_form = tool_form;
  meta.logprobs = cr.logprobs >= 0 && ep != Endpoint::kLlama;
  if (!cr.stream) {
    // The client is watched while the job waits or runs: one that has closed its side gets no more work (a
    // queued job leaves the queue, a running one stops at its next token) and no answer.
    while (!job->wait_for(kPeerCheck)) {
      if (!peer_closed(q)) continue;
      sched_->cancel(job);
      return send_error(
          res, ApiError{499, "the client closed the connection", "invalid_request_error", "", "client_closed_request"});
    }
    const GenOutcome& o = job->wait();
    if (o.error) {
      if (o.error->status == 503) res.set_header("Retry-After", std::to_string(opt_.retry_after_s));
      return send_error(res, *o.error);
    }
    res.set_content(
        dump(ep == Endpoint::kLlama ? llama_completion_json(meta, o.text, o.stop_reason, o.usage)
                                    : completion_json(meta, o.text, finish_reason(o.stop_reason), o.usage,
                                                      job->params.logprobs >= 0 ? logprobs_json(ep, o.logprobs)
                                                                                : nlohmann::json(nullptr))),
        kJson);
    return;
  }
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  const bool include_usage = cr.include_usage;
  auto guard = std::make_shared<CancelUnlessDone>();
  guard->sched = sched_.get();
  guard->job = job;
  res.stream = [guard, meta, include_usage, gone = q.peer_closed](const std::function<bool(std::string_view)>& write) {
    guard->done = stream_job(guard->job, meta, include_usage, write, gone);
    return guard->done;
  };
}

int HttpServer::bind() { return conn_->bind(); }

void HttpServer::run() { conn_->run(); }

bool HttpServer::running() const { return conn_->running(); }

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  sched_->shutdown(opt_.shutdown_grace);  // new and queued -> 503, running finish (or are cancelled after the grace)
  conn_->stop();  // no new connections; run() returns once the streams still writing have finished
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

std::string exposure_warning(const std::string& host, const std::string& api_key) {
  if (!api_key.empty() || is_loopback_host(host)) return "";
  return "serve: warning: --host " + host +
         " without an api key: anyone who can reach this machine can use the model (pass --api-key KEY or set "
         "ANELAB_API_KEY)";
}

}  // namespace anelab::serve
