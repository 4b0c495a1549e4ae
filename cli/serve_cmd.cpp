// anelab serve: OpenAI-style HTTP server (infer/server/, docs/server.md). The model is loaded and its
// prefill kernels compiled once at start-up; SIGINT / SIGTERM stop it gracefully (exit 0).
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/options.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "infer/engine.h"
#include "infer/server/engine_adapter.h"
#include "infer/server/http_conn.h"
#include "infer/server/http_server.h"

namespace anelab::cli {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct ServeArgs {
  serve::ModelOptions model;
  serve::ServerOptions server;
  double grace_s = 10, request_timeout_s = 10;
  int64_t max_tokens_cap = serve::kDefaultMaxTokensCap;
  std::string port_file;
  bool quiet = false;
};

// The --port-file must be writable: checked before the model loads, so a bad path fails at once.
void check_port_file(const std::string& path) {
  if (path.empty()) return;
  const std::string probe = path + ".tmp." + std::to_string(platform::process_id());
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) fail("serve", "cannot write --port-file ", path, ": ", std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}

void run_serve(ServeArgs& a) {
  // SIGINT/SIGTERM blocked in this thread and so in every thread started after (the signal thread below takes
  // them); SIGPIPE ignored: writes to a closed socket must fail with EPIPE, not kill the server.
  platform::block_stop_signals();
  platform::ignore_broken_pipe_signal();
  if (a.server.api_key.empty())
    if (const char* k = std::getenv("ANELAB_API_KEY")) a.server.api_key = k;
  if (const std::string w = serve::exposure_warning(a.server.host, a.server.api_key); !w.empty())
    std::fprintf(stderr, "%s\n", w.c_str());
  check_port_file(a.port_file);
  if (!a.model.slot_save_path.empty() && !std::filesystem::is_directory(a.model.slot_save_path))
    fail("serve", "--slot-save-path ", a.model.slot_save_path, " is not a directory");
  serve::check_port_free(a.server.host, a.server.port);  // before the model loads; bind() below keeps it
  const auto t0 = std::chrono::steady_clock::now();
  if (!a.quiet) a.model.progress = [](const std::string& line) { std::fprintf(stderr, "serve: %s\n", line.c_str()); };
  serve::ModelPool pool(a.model, a.server.parallel);
  const int64_t ctx = pool.context();
  a.server.limits.max_tokens_cap = serve::effective_max_tokens_cap(a.max_tokens_cap, ctx);
  a.server.shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(a.grace_s * 1000));
  a.server.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.request_timeout_s * 1000));
  serve::HttpServer srv(pool, a.server);
  const int port = srv.bind();
  std::fprintf(stderr, "serve: %s (%s), context %lld, %zu worker(s), queue %zu; loaded in %.0f ms, warm-up %.0f ms\n",
               pool.info()["id"].get<std::string>().c_str(), pool.info()["arch"].get<std::string>().c_str(),
               static_cast<long long>(ctx), a.server.parallel, a.server.queue, pool.load_ms(), pool.warmup_ms());
  std::printf("listening on http://%s:%d (ready after %.0f ms)\n", a.server.host.c_str(), port,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  std::fflush(stdout);
  if (!a.port_file.empty()) write_file_atomic(a.port_file, std::to_string(port) + "\n");

  std::atomic<bool> done{false};
  std::thread sig([&] {
    for (;;) {  // take SIGINT/SIGTERM once pending, else poll at 10 Hz
      const int s = platform::take_stop_signal();
      if (s == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (s == SIGINT || s == SIGTERM) {
        std::fprintf(stderr, "serve: %s received, shutting down\n", s == SIGINT ? "SIGINT" : "SIGTERM");
        // stop() only works once the listen loop runs.
        while (!srv.running() && !done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        srv.stop();
        return;
      }
      if (done.load()) return;
    }
  });
  srv.run();
  done.store(true);
  sig.join();
  const auto st = srv.scheduler().stats();
  std::fprintf(stderr, "serve: stopped (%llu completed, %llu cancelled, %llu rejected, %llu failed)\n",
               static_cast<unsigned long long>(st.completed), static_cast<unsigned long long>(st.cancelled),
               static_cast<unsigned long long>(st.rejected), static_cast<unsigned long long>(st.failed));
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* s = app.add_subcommand(
      "serve", "OpenAI-style HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health");
  add_model_options(s, a->model.load);
  add_context_option(s, a->model.load.ctx);
  add_chat_template_option(s, a->model.load.chat_template, ", and chat requests get 400");
  s->add_option("--name", a->model.name, "Model id in responses (default: the model file's name)");
  s->add_option("--warmup", a->model.warmup_tokens,
                "Compile the prefill kernels for prompts up to this many tokens at start-up (0: none)")
      ->capture_default_str()
      ->check(number_in(0, kInf));
  s->add_option("--draft-max", a->model.draft_max,
                "Speculative decoding with prompt-lookup drafts: up to N drafted tokens checked per batched pass "
                "(0 = off; answers are plain decoding's)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  s->add_option("--model-draft", a->model.draft_model,
                "Speculative decoding with this draft model (llama.cpp's --model-draft): a smaller model of the same "
                "vocabulary, a slot per --parallel slot, drafts --draft-max tokens (0: 16) verified in one batched "
                "pass; greedy answers are plain decoding's, sampled ones follow the model's distribution");
  s->add_option("--host", a->server.host,
                "Address to bind (loopback by default; another one without --api-key prints a warning)")
      ->capture_default_str();
  s->add_option("--port", a->server.port, "TCP port (0: any free port, printed on stdout)")
      ->capture_default_str()
      ->check(number_in(0, 65535));
  s->add_option("--port-file", a->port_file,
                "Write the bound port to this file once listening (checked writable at start)");
  s->add_option("--api-key", a->server.api_key,
                "Require 'Authorization: Bearer KEY' on every route but /health (else 401); default: $ANELAB_API_KEY");
  s->add_option("--parallel", a->server.parallel,
                "Generation slots: one engine whose decode steps run the active slots together (continuous "
                "batching), a KV cache per slot (cache memory x N); a model with linear-attention layers gets an "
                "engine per slot")
      ->capture_default_str()
      ->check(number_in(1, 256));
  s->add_option("--queue", a->server.queue, "Requests that may wait beyond the running ones (then 503)")
      ->capture_default_str()
      ->check(number_in(0, 65536));
  s->add_option("--http-threads", a->server.http_threads,
                "HTTP worker threads answering complete requests (0: 2*(parallel+queue)+8, >= 16)")
      ->capture_default_str()
      ->check(number_in(0, 4096));
  s->add_option("--max-connections", a->server.max_connections,
                "Open connections; beyond it idle ones are closed first, then only /health is answered")
      ->capture_default_str()
      ->check(number_in(1, 65536));
  s->add_option("--max-connections-per-client", a->server.per_client,
                "Open connections of one client address (0: half of --max-connections)")
      ->capture_default_str()
      ->check(number_in(0, 65536));
  s->add_option("--max-buffered", a->server.max_buffered,
                "Request bytes all connections may hold at once (at least --max-body); others wait unread")
      ->capture_default_str()
      ->check(number_in(1, 1ll << 40));
  s->add_option("--parse-budget", a->server.parse_budget,
                "JSON body bytes parsed at once (at least --max-body); others wait for their turn")
      ->capture_default_str()
      ->check(number_in(1, 1ll << 40));
  s->add_option("--request-timeout", a->request_timeout_s,
                "Seconds a whole request (head + body) may take from its first byte (then 408, closed)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600));
  s->add_option("--max-body", a->server.max_body, "Largest request body in bytes (then 413)")
      ->capture_default_str()
      ->check(number_in(1, 1 << 30));
  s->add_option("--max-tokens-cap", a->max_tokens_cap,
                "Largest max_tokens a request may ask for, at most the context (0: the whole context)")
      ->capture_default_str()
      ->check(number_in(0, kInf));
  s->add_option("--default-max-tokens", a->server.limits.default_max_tokens, "max_tokens when a request has none")
      ->capture_default_str()
      ->check(number_in(1, kInf));
  s->add_option("--shutdown-grace", a->grace_s,
                "Seconds running requests may finish after SIGINT/SIGTERM before they are cancelled")
      ->capture_default_str()
      ->check(number_in(0, 3600));
  s->add_option("--cache-ram", a->model.cache_ram_mib,
                "Prompt store in host RAM, MiB (llama.cpp's --cache-ram): a slot taken for another prompt moves its "
                "cached sequence there (K/V, and recurrent states), an LRU bounded in bytes; 0: off, -1: no bound")
      ->capture_default_str()
      ->check(number_in(-1, 1 << 24));
  s->add_option("--slot-save-path", a->model.slot_save_path,
                "Directory of slot files for POST /slots/{id}?action=save|restore (llama.cpp's; default: off)");
  s->add_flag("!--no-log", a->server.log_requests, "Do not log one line per request on stderr");
  s->add_flag("--quiet,-q", a->quiet, "No start-up progress lines on stderr (model load, warm-up)");
  s->callback([a] { run_serve(*a); });
}

}  // namespace anelab::cli
