// Request scheduling for `anelab serve`: a bounded queue in front of N generation workers.
//
//   - submit() admits a job while (waiting + running) < workers + max_queue, else answers kFull (the
//     HTTP layer turns that into 503 + Retry-After) or kStopping after shutdown() began.
//   - Each worker owns one generation context (for the model: one Engine + KV cache, see
//     engine_adapter.h) and runs one job at a time through the RunFn; jobs are taken FIFO.
//   - A job streams text through Job::push_text; the HTTP side reads it with Job::next(). Setting
//     Job::cancel (client gone, shutdown) makes the RunFn stop at its next token; cancel() also takes a
//     queued job out of the queue.
//   - shutdown(grace): stop admitting, finish queued jobs with a 503 error, let running jobs run for up
//     to `grace`, then cancel them, and join the workers.
// The scheduler knows nothing about HTTP or models, so it is tested with a fake RunFn.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "infer/server/api.h"

namespace anelab::grammar {
class Grammar;
}

namespace anelab::serve {

using Clock = std::chrono::steady_clock;

// What the worker is asked to generate (prepared from a CompletionRequest by the engine adapter).
struct GenParams {
  std::vector<int32_t> prompt;  // token ids, BOS included where the tokenizer wants it
  int64_t max_new_tokens = 16;
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f, presence_penalty = 0.0f;
  int32_t top_k = 0;
  uint64_t seed = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_tokens;
  bool echo = false;                                // emit the prompt's pieces first (run.c's output)
  std::shared_ptr<const grammar::Grammar> grammar;  // structured output (CompletionRequest::grammar) or null
  std::string note;          // said in the answer (ResponseMeta::note): e.g. max_tokens clamped to the context
  int32_t logprobs = -1;     // CompletionRequest::logprobs
  bool cache_prompt = true;  // CompletionRequest::cache_prompt
  bool stream = false;       // CompletionRequest::stream: logprob entries go to the job as they come
  std::vector<float> lora;   // the scale of each runtime LoRA adapter ([adapters]: the request's, else the global ones)
  tok::ToolCallForm tool_form = tok::ToolCallForm::kTagged;  // the chat template's form of a tool call
};

struct GenOutcome {
  std::string text;         // everything emitted
  std::string stop_reason;  // generation's ("eos", "length", ...), or "cancelled"
  Usage usage;
  std::optional<ApiError> error;           // set when the job failed (status 500 / 503)
  std::vector<TokenLogprobText> logprobs;  // per generated token when GenParams::logprobs >= 0, not streamed
};

class Job {
 public:
  explicit Job(GenParams p) : params(std::move(p)), enqueued(Clock::now()) {}
  const GenParams params;
  std::atomic<bool> cancel{false};
  // Set before submit (optional): whether the client has gone. A worker asks it before starting the job, so a
  // queued job of a client that left is not started even before its HTTP thread has noticed.
  std::function<bool()> client_gone;
  const Clock::time_point enqueued;
  Clock::time_point started{};

  // Worker side.
  void push_text(std::string_view s);
  void push_logprob(TokenLogprobText t);  // streamed logprobs: read with take_logprobs
  void finish(GenOutcome o);
  // Reader side: waits up to `timeout` for text or the end. Returns the text that arrived (possibly
  // empty on timeout); sets done when the job has finished and everything was read.
  std::string next(std::chrono::milliseconds timeout, bool& done);
  // The logprob entries pushed since the last call.
  std::vector<TokenLogprobText> take_logprobs();
  // Waits for the end (non-streamed answers).
  const GenOutcome& wait();
  // Waits up to `timeout` for the end; true when the job has finished.
  bool wait_for(std::chrono::milliseconds timeout);
  bool finished() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  std::vector<TokenLogprobText> pending_lp_;
  bool done_ = false;
  GenOutcome outcome_;
};

class Scheduler {
 public:
  // Runs a job on worker `w` (0 <= w < workers): pushes text, polls job.cancel, returns the outcome.
  using RunFn = std::function<GenOutcome(size_t w, Job& job)>;
  Scheduler(size_t workers, size_t max_queue, RunFn run);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Admit { kOk, kFull, kStopping };
  Admit submit(const std::shared_ptr<Job>& job);
  // Sets the job's cancel flag (a running job stops at its next token); a job still queued leaves the queue
  // at once and finishes as "cancelled", so that it holds no queue slot.
  void cancel(const std::shared_ptr<Job>& job);
  void shutdown(std::chrono::milliseconds grace);

  struct Stats {
    size_t workers = 0, max_queue = 0, waiting = 0, running = 0;
    uint64_t admitted = 0, rejected = 0, completed = 0, cancelled = 0, failed = 0;
  };
  Stats stats() const;
  // Per worker (llama.cpp's /slots): whether it runs a job, and that job's prompt length and token budget.
  struct Slot {
    size_t id = 0;
    bool busy = false;
    int64_t prompt_tokens = 0, max_new_tokens = 0;
  };
  std::vector<Slot> slots() const;

 private:
  void worker_loop(size_t w);
  RunFn run_;
  size_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> running_;  // [workers], null when idle
  bool stopping_ = false;
  Stats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace anelab::serve
