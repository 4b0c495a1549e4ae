#include "infer/server/scheduler.h"

#include <algorithm>
#include <exception>

namespace anelab::serve {

void Job::push_text(std::string_view s) {
  if (s.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.append(s);
  }
  cv_.notify_all();
}

void Job::finish(GenOutcome o) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    outcome_ = std::move(o);
    done_ = true;
  }
  cv_.notify_all();
}

void Job::push_logprob(TokenLogprobText t) {
  std::lock_guard<std::mutex> lk(mu_);
  pending_lp_.push_back(std::move(t));
}

std::vector<TokenLogprobText> Job::take_logprobs() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<TokenLogprobText> out;
  out.swap(pending_lp_);
  return out;
}

std::string Job::next(std::chrono::milliseconds timeout, bool& done) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return done_ || !pending_.empty(); });
  std::string out;
  out.swap(pending_);
  done = done_;
  return out;
}

const GenOutcome& Job::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  return outcome_;
}

bool Job::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return done_; });
}

bool Job::finished() const {
  std::lock_guard<std::mutex> lk(mu_);
  return done_;
}

Scheduler::Scheduler(size_t workers, size_t max_queue, RunFn run) : run_(std::move(run)), max_queue_(max_queue) {
  if (workers == 0) workers = 1;
  stats_.workers = workers;
  stats_.max_queue = max_queue;
  running_.resize(workers);
  for (size_t w = 0; w < workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

Scheduler::~Scheduler() { shutdown(std::chrono::milliseconds(0)); }

Scheduler::Admit Scheduler::submit(const std::shared_ptr<Job>& job) {
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) {
    ++stats_.rejected;
    return Admit::kStopping;
  }
  size_t busy = 0;
  for (const auto& r : running_) busy += r != nullptr;
  if (queue_.size() + busy >= running_.size() + max_queue_) {
    ++stats_.rejected;
    return Admit::kFull;
  }
  queue_.push_back(job);
  ++stats_.admitted;
  cv_.notify_one();
  return Admit::kOk;
}

void Scheduler::cancel(const std::shared_ptr<Job>& job) {
  job->cancel.store(true);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it == queue_.end()) return;  // running (it stops at its next token) or already done
    queue_.erase(it);
    ++stats_.cancelled;
  }
  GenOutcome o;
  o.stop_reason = "cancelled";
  job->finish(std::move(o));
}

void Scheduler::worker_loop(size_t w) {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      running_[w] = job;
    }
    job->started = Clock::now();
    GenOutcome o;
    if (job->cancel.load() || (job->client_gone && job->client_gone())) {
      o.stop_reason = "cancelled";
    } else {
      try {
        o = run_(w, *job);
      } catch (const std::exception& e) {
        o.error = ApiError{500, std::string("generation failed: ") + e.what(), "server_error", "", ""};
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_[w] = nullptr;
      if (o.error)
        ++stats_.failed;
      else if (o.stop_reason == "cancelled")
        ++stats_.cancelled;
      else
        ++stats_.completed;
    }
    idle_cv_.notify_all();
    job->finish(std::move(o));
  }
}

void Scheduler::shutdown(std::chrono::milliseconds grace) {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (threads_.empty()) return;
    stopping_ = true;
    dropped.swap(queue_);
    stats_.cancelled += dropped.size();
    cv_.notify_all();
    auto all_idle = [&] {
      for (const auto& r : running_)
        if (r) return false;
      return true;
    };
    if (!idle_cv_.wait_for(lk, grace, all_idle))
      for (const auto& r : running_)
        if (r) r->cancel.store(true);
  }
  for (auto& j : dropped) {
    GenOutcome o;
    o.stop_reason = "cancelled";
    o.error = ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
    j->finish(std::move(o));
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

Scheduler::Stats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  Stats s = stats_;
  s.waiting = queue_.size();
  s.running = 0;
  for (const auto& r : running_) s.running += r != nullptr;
  return s;
}

std::vector<Scheduler::Slot> Scheduler::slots() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Slot> out;
  for (size_t w = 0; w < running_.size(); ++w) {
    Slot s;
    s.id = w;
    if (const auto& j = running_[w]) {
      s.busy = true;
      s.prompt_tokens = static_cast<int64_t>(j->params.prompt.size());
      s.max_new_tokens = j->params.max_new_tokens;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace anelab::serve
