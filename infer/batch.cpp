#include "infer/batch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "framework/core/error.h"

namespace anelab::infer {

namespace {
using BatchClock = std::chrono::steady_clock;
double batch_seconds(BatchClock::time_point a, BatchClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

Batcher::Batcher(Engine& e, int64_t prefill_chunk)
    : e_(e), chunk_(std::max<int64_t>(1, prefill_chunk)), slots_(static_cast<size_t>(e.options().slots)) {
  const auto n = slots_.size();
  for (size_t s = 0; s < n; ++s) {
    slots_[s].logits.resize(static_cast<size_t>(e.config().vocab_size));
    slots_[s].forward = std::make_unique<SlotForward>(*this, static_cast<int64_t>(s));
  }
  stats_.batch_sizes.assign(n + 1, 0);
  stats_.slots.resize(n);
  dec_tok_.reserve(n), dec_pos_.reserve(n), dec_slot_.reserve(n), pre_slot_.reserve(n), pre_seg_.reserve(n);
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  step_cv_.notify_all();
  thread_.join();
}

Forward& Batcher::slot(int64_t s) {
  ANELAB_CHECK(s >= 0 && s < slots(), "batch", "slot ", s, " outside the ", slots(), " slots");
  return *slots_[static_cast<size_t>(s)].forward;
}

void Batcher::begin(int64_t s) {
  ANELAB_CHECK(s >= 0 && s < slots(), "batch", "slot ", s, " outside the ", slots(), " slots");
  std::lock_guard<std::mutex> lk(mu_);
  Slot& sl = slots_[static_cast<size_t>(s)];
  ANELAB_CHECK(!sl.active, "batch", "slot ", s, " is already running a generation");
  sl.active = true;
  sl.req = Request{};
  sl.info.state = SlotState::kSampling;
}

void Batcher::end(int64_t s) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    Slot& sl = slots_[static_cast<size_t>(s)];
    sl.active = false;
    sl.info.state = SlotState::kIdle;
    if (std::none_of(slots_.begin(), slots_.end(), [](const Slot& o) { return o.active; }) && step_end_) {
      stats_.between_s += batch_seconds(*step_end_, BatchClock::now());  // the last active slot: idle from here
      step_end_.reset();
    }
  }
  step_cv_.notify_all();  // the others no longer wait for this slot
}

const char* Batcher::state_name(SlotState s) {
  switch (s) {
    case SlotState::kIdle:
      return "idle";
    case SlotState::kPrefill:
      return "prefill";
    case SlotState::kDecode:
      return "decode";
    case SlotState::kSampling:
      return "sampling";
  }
  return "?";
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  Stats st = stats_;
  for (size_t s = 0; s < slots_.size(); ++s) st.slots[s] = slots_[s].info;
  return st;
}

const float* Batcher::submit(int64_t s, const Request& r) {
  std::unique_lock<std::mutex> lk(mu_);
  Slot& sl = slots_[static_cast<size_t>(s)];
  ANELAB_CHECK(sl.active, "batch", "slot ", s, " runs a forward outside begin() .. end()");
  sl.req = r;
  sl.info.state = r.kind == Kind::kDecode ? SlotState::kDecode : SlotState::kPrefill;
  step_cv_.notify_all();
  done_cv_.wait(lk, [&] { return sl.req.complete; });
  sl.req.kind = Kind::kNone;
  sl.info.state = SlotState::kSampling;
  if (sl.req.error) std::rethrow_exception(sl.req.error);
  return sl.result;
}

const float* Batcher::SlotForward::prefill(std::span<const int32_t> tokens, int64_t pos,
                                           std::vector<float>* all_logits) {
  ANELAB_CHECK(!tokens.empty(), "batch", "prefill needs at least one token");
  Request r;
  r.kind = Kind::kPrefill;
  r.tokens = tokens;
  r.pos = pos;
  r.all_logits = all_logits;
  return b_.submit(s_, r);
}

const float* Batcher::SlotForward::decode(int32_t token, int64_t pos) {
  Request r;
  r.kind = Kind::kDecode;
  r.token = token;
  r.pos = pos;
  return b_.submit(s_, r);
}

const float* Batcher::SlotForward::decode_run(std::span<const int32_t> tokens, int64_t pos) {
  ANELAB_CHECK(!tokens.empty(), "batch", "a decode run needs at least one token");
  {
    std::lock_guard<std::mutex> lk(b_.mu_);
    std::vector<float>& out = b_.slots_[static_cast<size_t>(s_)].run_logits;
    const auto need = tokens.size() * static_cast<size_t>(b_.e_.config().vocab_size);
    if (out.size() < need) out.resize(need);
  }
  Request r;
  r.kind = Kind::kDecode;
  r.tokens = tokens;
  r.pos = pos;
  return b_.submit(s_, r);
}

PrefillStats Batcher::SlotForward::last_prefill() const {
  std::lock_guard<std::mutex> lk(b_.mu_);
  return b_.slots_[static_cast<size_t>(s_)].prefill_stats;
}

bool Batcher::ready() const {
  bool any = false;
  for (const Slot& sl : slots_) {
    if (!sl.active) continue;
    if (sl.req.kind == Kind::kNone || sl.req.complete) return false;
    any = true;
  }
  return any;
}

void Batcher::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  const int64_t V = e_.config().vocab_size;
  for (;;) {
    step_cv_.wait(lk, [&] { return stop_ || ready(); });
    if (stop_) return;
    const BatchClock::time_point t0 = BatchClock::now();
    if (step_end_) stats_.between_s += batch_seconds(*step_end_, t0);
    dec_tok_.clear(), dec_pos_.clear(), dec_slot_.clear(), pre_slot_.clear();
    for (size_t s = 0; s < slots_.size(); ++s) {
      const Slot& sl = slots_[s];
      if (!sl.active) continue;
      if (sl.req.kind == Kind::kDecode && sl.req.tokens.empty()) {
        dec_tok_.push_back(sl.req.token), dec_pos_.push_back(sl.req.pos);
        dec_slot_.push_back(static_cast<int64_t>(s));
      } else if (sl.req.kind == Kind::kDecode) {  // a run: rows at consecutive positions
        for (size_t i = 0; i < sl.req.tokens.size(); ++i) {
          dec_tok_.push_back(sl.req.tokens[i]), dec_pos_.push_back(sl.req.pos + static_cast<int64_t>(i));
          dec_slot_.push_back(static_cast<int64_t>(s));
        }
      } else {
        pre_slot_.push_back(static_cast<int64_t>(s));
      }
    }
    lk.unlock();
    // The requests are not touched by their threads while incomplete, so the step reads and writes them unlocked.
    if (!dec_tok_.empty()) {
      try {
        const size_t rows = dec_tok_.size(), most = static_cast<size_t>(e_.max_batch_rows());
        for (size_t b = 0; b < rows; b += most) {
          const size_t m = std::min(most, rows - b);
          const float* l = e_.decode_batch(std::span(dec_tok_).subspan(b, m), std::span(dec_pos_).subspan(b, m),
                                           std::span(dec_slot_).subspan(b, m));
          for (size_t i = b; i < b + m; ++i) {
            Slot& sl = slots_[static_cast<size_t>(dec_slot_[i])];
            const float* row = l + static_cast<int64_t>(i - b) * V;
            if (rows <= most) {  // one call: each slot reads its rows in place (a run's are consecutive)
              if (dec_pos_[i] == sl.req.pos) sl.result = row;
              continue;
            }
            float* out =
                sl.req.tokens.empty() ? sl.logits.data() : sl.run_logits.data() + (dec_pos_[i] - sl.req.pos) * V;
            std::memcpy(out, row, static_cast<size_t>(V) * sizeof(float));
            sl.result = sl.req.tokens.empty() ? sl.logits.data() : sl.run_logits.data();
          }
        }
      } catch (...) {
        for (int64_t s : dec_slot_) slots_[static_cast<size_t>(s)].req.error = std::current_exception();
      }
    }
    const BatchClock::time_point t1 = BatchClock::now();
    int64_t prefilled = 0;
    // A slot's next chunk of its prompt; done: the chunk ran (l: the logits of its last token).
    const auto chunk_done = [&](int64_t s, int64_t m, const float* l) {
      Slot& sl = slots_[static_cast<size_t>(s)];
      sl.req.done += m;
      if (sl.req.done == static_cast<int64_t>(sl.req.tokens.size())) {
        std::memcpy(sl.logits.data(), l, static_cast<size_t>(V) * sizeof(float));
        sl.result = sl.logits.data();
      }
      prefilled += m;
    };
    // Chunks of 2 or more tokens go through one Engine::prefill_batch per group of at most max_batch_rows rows (every
    // weight matrix read once for all of them, each chunk's logits prefill's bits); a chunk alone, one token, or a
    // request for every position's logits through Engine::prefill.
    pre_seg_.clear();
    for (int64_t s : pre_slot_) {
      Request& r = slots_[static_cast<size_t>(s)].req;
      const int64_t n = static_cast<int64_t>(r.tokens.size());
      const int64_t m = r.all_logits ? n : std::min(chunk_, n - r.done);
      if (e_.prefill_batch_takes() && !r.all_logits && m >= 2 && m <= e_.max_batch_rows()) {
        pre_seg_.push_back({s, r.tokens.subspan(static_cast<size_t>(r.done), static_cast<size_t>(m)), r.pos + r.done});
        continue;
      }
      try {
        e_.use_slot(s);
        chunk_done(s, m,
                   e_.prefill(r.tokens.subspan(static_cast<size_t>(r.done), static_cast<size_t>(m)), r.pos + r.done,
                              r.all_logits));
      } catch (...) {
        r.error = std::current_exception();
      }
    }
    for (size_t b = 0, e = 0; b < pre_seg_.size(); b = e) {
      int64_t rows = 0;
      for (e = b; e < pre_seg_.size() && rows + static_cast<int64_t>(pre_seg_[e].tokens.size()) <= e_.max_batch_rows();)
        rows += static_cast<int64_t>(pre_seg_[e++].tokens.size());
      const std::span<const Engine::PrefillSeg> group = std::span(pre_seg_).subspan(b, e - b);
      try {
        if (group.size() == 1) {
          e_.use_slot(group[0].slot);
          chunk_done(group[0].slot, rows, e_.prefill(group[0].tokens, group[0].pos));
        } else {
          const float* l = e_.prefill_batch(group);
          for (size_t i = 0; i < group.size(); ++i)
            chunk_done(group[i].slot, static_cast<int64_t>(group[i].tokens.size()), l + static_cast<int64_t>(i) * V);
        }
      } catch (...) {
        for (const Engine::PrefillSeg& g : group)
          slots_[static_cast<size_t>(g.slot)].req.error = std::current_exception();
      }
    }
    const BatchClock::time_point t2 = BatchClock::now();
    lk.lock();
    stats_.decode_s += batch_seconds(t0, t1), stats_.prefill_s += batch_seconds(t1, t2);
    const auto B = static_cast<int64_t>(dec_slot_.size());
    if (B > 0) {
      ++stats_.steps;
      stats_.decode_tokens += static_cast<uint64_t>(B);
      if (stats_.batch_sizes.size() <= static_cast<size_t>(B)) stats_.batch_sizes.resize(static_cast<size_t>(B) + 1);
      ++stats_.batch_sizes[static_cast<size_t>(B)];
      stats_.last_batch = B;
    }
    stats_.prefill_tokens += static_cast<uint64_t>(prefilled);
    stats_.prefill_chunks += pre_slot_.size();
    for (size_t i = 0; i < dec_slot_.size(); ++i) {
      Slot& sl = slots_[static_cast<size_t>(dec_slot_[i])];
      sl.req.complete = true;
      ++sl.info.decoded;
      sl.info.pos = dec_pos_[i] + 1;
    }
    for (int64_t s : pre_slot_) {
      Slot& sl = slots_[static_cast<size_t>(s)];
      Request& r = sl.req;
      sl.info.prefilled += static_cast<uint64_t>(r.done - sl.info.pos + r.pos);
      sl.info.pos = r.pos + r.done;
      if (r.error || r.done == static_cast<int64_t>(r.tokens.size())) {
        r.complete = true;
        sl.prefill_stats = e_.last_prefill();
      }
    }
    step_end_.reset();
    for (const Slot& sl : slots_)
      if (sl.active) step_end_ = BatchClock::now();
    if (step_end_) stats_.between_s += batch_seconds(t2, *step_end_);
    done_cv_.notify_all();
  }
}

}  // namespace anelab::infer
