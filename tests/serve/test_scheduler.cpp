// Scheduler of `anelab serve` with fake generators: FIFO on N workers, admission limit, streaming,
// cancellation at the next token, failures, graceful shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "infer/server/scheduler.h"

namespace anelab::serve {
namespace {

using namespace std::chrono_literals;

// Emits `tokens` pieces "t0 t1 ..." every `period`, stopping early when cancelled.
GenOutcome fake_run(Job& job, int tokens, std::chrono::milliseconds period) {
  GenOutcome o;
  o.usage.prompt_tokens = static_cast<int64_t>(job.params.prompt.size());
  for (int i = 0; i < tokens; ++i) {
    if (job.cancel.load()) {
      o.stop_reason = "cancelled";
      return o;
    }
    const std::string piece = "t" + std::to_string(i) + " ";
    o.text += piece;
    job.push_text(piece);
    ++o.usage.completion_tokens;
    std::this_thread::sleep_for(period);
  }
  o.stop_reason = "length";
  return o;
}

std::shared_ptr<Job> job(int n_prompt = 3) {
  GenParams p;
  p.prompt.assign(static_cast<size_t>(n_prompt), 1);
  return std::make_shared<Job>(p);
}

TEST(ServeScheduler, RunsJobsAndStreamsText) {
  Scheduler s(2, 4, [](size_t, Job& j) { return fake_run(j, 5, 1ms); });
  auto a = job(), b = job(7);
  ASSERT_EQ(s.submit(a), Scheduler::Admit::kOk);
  ASSERT_EQ(s.submit(b), Scheduler::Admit::kOk);
  std::string streamed;
  for (bool done = false; !done;) streamed += a->next(1000ms, done);
  EXPECT_EQ(streamed, "t0 t1 t2 t3 t4 ");
  EXPECT_EQ(a->wait().text, streamed);
  EXPECT_EQ(b->wait().usage.prompt_tokens, 7);
  EXPECT_EQ(b->wait().stop_reason, "length");
  EXPECT_EQ(s.stats().completed, 2u);
}

TEST(ServeScheduler, AdmitsWorkersPlusQueueThenFull) {
  std::atomic<bool> release{false};
  Scheduler s(1, 2, [&](size_t, Job& j) {
    while (!release.load()) std::this_thread::sleep_for(1ms);
    return fake_run(j, 1, 0ms);
  });
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(job());
    ASSERT_EQ(s.submit(jobs.back()), Scheduler::Admit::kOk) << i;
  }
  EXPECT_EQ(s.submit(job()), Scheduler::Admit::kFull);
  EXPECT_EQ(s.stats().rejected, 1u);
  release = true;
  for (auto& j : jobs) EXPECT_EQ(j->wait().stop_reason, "length");
  EXPECT_EQ(s.submit(job()), Scheduler::Admit::kOk);  // room again
}

TEST(ServeScheduler, QueueZeroStillRunsOnIdleWorkers) {
  Scheduler s(2, 0, [](size_t, Job& j) { return fake_run(j, 1, 0ms); });
  auto a = job();
  ASSERT_EQ(s.submit(a), Scheduler::Admit::kOk);
  EXPECT_EQ(a->wait().stop_reason, "length");
}

TEST(ServeScheduler, FifoOnOneWorker) {
  std::mutex mu;
  std::vector<int64_t> order;
  Scheduler s(1, 16, [&](size_t, Job& j) {
    std::lock_guard<std::mutex> lk(mu);
    order.push_back(static_cast<int64_t>(j.params.prompt.size()));
    return GenOutcome{};
  });
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 1; i <= 8; ++i) {
    jobs.push_back(job(i));
    ASSERT_EQ(s.submit(jobs.back()), Scheduler::Admit::kOk);
  }
  for (auto& j : jobs) j->wait();
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(ServeScheduler, CancelStopsAtNextToken) {
  Scheduler s(1, 1, [](size_t, Job& j) { return fake_run(j, 100000, 1ms); });
  auto a = job();
  ASSERT_EQ(s.submit(a), Scheduler::Admit::kOk);
  bool done = false;
  while (a->next(1000ms, done).empty() && !done) {
  }
  const auto t0 = Clock::now();
  a->cancel = true;
  const GenOutcome& o = a->wait();
  EXPECT_LT(Clock::now() - t0, 500ms);
  EXPECT_EQ(o.stop_reason, "cancelled");
  EXPECT_LT(o.usage.completion_tokens, 100000);
  EXPECT_EQ(s.stats().cancelled, 1u);
  // a job cancelled while queued never runs
  std::atomic<int> runs{0};
  Scheduler s2(1, 4, [&](size_t, Job& j) {
    ++runs;
    return fake_run(j, 20, 2ms);
  });
  auto first = job(), second = job();
  s2.submit(first);
  s2.submit(second);
  second->cancel = true;
  first->wait();
  EXPECT_EQ(second->wait().stop_reason, "cancelled");
  EXPECT_EQ(runs.load(), 1);
}

TEST(ServeScheduler, ExceptionBecomesServerError) {
  Scheduler s(1, 1, [](size_t, Job&) -> GenOutcome { throw std::runtime_error("engine exploded"); });
  auto a = job();
  s.submit(a);
  const GenOutcome& o = a->wait();
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->status, 500);
  EXPECT_NE(o.error->message.find("engine exploded"), std::string::npos);
  EXPECT_EQ(s.stats().failed, 1u);
  auto b = job();  // the worker survives
  s.submit(b);
  EXPECT_TRUE(b->wait().error.has_value());
}

TEST(ServeScheduler, ShutdownFinishesRunningAndRejectsQueued) {
  Scheduler s(1, 4, [](size_t, Job& j) { return fake_run(j, 20, 2ms); });
  auto running = job(), queued = job();
  s.submit(running);
  bool done = false;
  while (running->next(1000ms, done).empty() && !done) {
  }
  s.submit(queued);
  s.shutdown(5000ms);
  EXPECT_EQ(running->wait().stop_reason, "length");  // finished within the grace
  ASSERT_TRUE(queued->wait().error.has_value());
  EXPECT_EQ(queued->wait().error->status, 503);
  EXPECT_EQ(s.submit(job()), Scheduler::Admit::kStopping);
}

TEST(ServeScheduler, ShutdownCancelsAfterGrace) {
  Scheduler s(2, 0, [](size_t, Job& j) { return fake_run(j, 1000000, 1ms); });
  auto a = job(), b = job();
  s.submit(a);
  s.submit(b);
  bool done = false;
  while (a->next(1000ms, done).empty() && !done) {
  }
  const auto t0 = Clock::now();
  s.shutdown(50ms);
  EXPECT_LT(Clock::now() - t0, 2000ms);
  EXPECT_EQ(a->wait().stop_reason, "cancelled");
  EXPECT_EQ(b->wait().stop_reason, "cancelled");
}

}  // namespace
}  // namespace anelab::serve
