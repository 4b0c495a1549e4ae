// Continuous batching: one Engine with S slots (EngineOptions::slots), S generations at once. Each generation runs
// on its own thread through a Slot (infer::Forward, GenerateOptions::forward: sampling, stop strings, grammar stay
// per generation), and the Batcher's stepping thread runs the engine:
//
//   - a step starts when every active slot (begin() .. end()) has a request waiting: the slots waiting for a decode
//     run together in one Engine::decode_batch (every weight matrix applied once to their rows), then each slot
//     waiting for a prefill gets its next chunk of at most prefill_chunk tokens (so a long prompt does not stall the
//     others for its whole length: they decode a token between two of its chunks); the chunks of several slots run
//     together in one Engine::prefill_batch (each weight matrix read once for all their rows);
//   - a slot that begins between two steps joins the next one; a slot that ends (its generation finished or was
//     cancelled) is no longer waited for, so its place is free at the next step;
//   - a decode run (Forward::decode_run: speculative drafts verified) puts its tokens as rows of its slot at
//     consecutive positions into the step's batch (in decode_batch calls of at most Engine::max_batch_rows rows).
//
// A decode row of a step is bit for bit the engine's single-sequence decode (Engine::decode_batch), and a prefill
// chunk's logits are Engine::prefill's bits whatever else runs (Engine::prefill_batch), so a generation gives the
// same tokens next to others as alone (given the same prompt-cache reuse).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "infer/engine.h"
#include "infer/generate.h"

namespace anelab::infer {

class Batcher {
 public:
  // prefill_chunk: the most prompt tokens of one slot in a step (>= 1).
  Batcher(Engine& e, int64_t prefill_chunk);
  ~Batcher();  // stops the stepping thread (no slot may be active)
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
  // Slot s as a Forward for generate_tokens, between begin(s) and end(s) (one generation at a time per slot).
  Forward& slot(int64_t s);
  void begin(int64_t s);
  void end(int64_t s);
  // begin on construction, end on destruction.
  class Active {
   public:
    Active(Batcher& b, int64_t s) : b_(b), s_(s) { b_.begin(s_); }
    ~Active() { b_.end(s_); }
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;

   private:
    Batcher& b_;
    int64_t s_;
  };

  enum class SlotState { kIdle, kPrefill, kDecode, kSampling };  // kSampling: active, between two requests
  struct SlotInfo {
    SlotState state = SlotState::kIdle;
    int64_t pos = 0;                      // the next position the slot's sequence fills
    uint64_t decoded = 0, prefilled = 0;  // tokens, since start
  };
  struct Stats {
    uint64_t steps = 0;           // steps with at least one decode row
    uint64_t decode_tokens = 0;   // rows of those steps (decode_tokens / steps: the mean batch)
    uint64_t prefill_tokens = 0;  // prompt tokens prefilled
    uint64_t prefill_chunks = 0;
    // Seconds of the stepping thread: in the decode steps' Engine::decode_batch calls, in the prompt chunks' prefills,
    // and in the rest of its steps (while at least one slot is active: waiting for the slots' next requests, handing
    // results back). Their shares of a busy period split its time into the engine's and the server's.
    double decode_s = 0, prefill_s = 0, between_s = 0;
    int64_t last_batch = 0;             // rows of the latest step
    std::vector<uint64_t> batch_sizes;  // [slots + 1, more with decode runs]: steps of each batch size (rows)
    std::vector<SlotInfo> slots;        // [slots]
  };
  Stats stats() const;
  static const char* state_name(SlotState s);

 private:
  class SlotForward final : public Forward {
   public:
    SlotForward(Batcher& b, int64_t s) : b_(b), s_(s) {}
    const float* prefill(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits) override;
    const float* decode(int32_t token, int64_t pos) override;
    const float* decode_run(std::span<const int32_t> tokens, int64_t pos) override;
    PrefillStats last_prefill() const override;

   private:
    Batcher& b_;
    int64_t s_;
  };
  enum class Kind { kNone, kDecode, kPrefill };
  struct Request {
    Kind kind = Kind::kNone;
    bool complete = false;
    int32_t token = 0;
    int64_t pos = 0;
    std::span<const int32_t> tokens;  // prefill: all of them; done: how many ran. decode: a run (empty: token)
    int64_t done = 0;
    std::vector<float>* all_logits = nullptr;
    std::exception_ptr error;
  };
  struct Slot {
    bool active = false;
    Request req;
    std::vector<float> logits;      // [vocab] the latest result
    std::vector<float> run_logits;  // [run tokens, vocab] the latest decode run's (grown by decode_run)
    // The latest request's logits: its rows of the step's Engine::decode_batch result when the step's rows took one
    // call (valid until the next step, which waits for this slot's next request), else logits / run_logits.
    const float* result = nullptr;
    PrefillStats prefill_stats;
    SlotInfo info;
    std::unique_ptr<SlotForward> forward;
  };
  const float* submit(int64_t s, const Request& r);
  bool ready() const;  // under mu_: a step can start
  void loop();

  Engine& e_;
  int64_t chunk_;
  mutable std::mutex mu_;
  std::condition_variable step_cv_, done_cv_;
  std::vector<Slot> slots_;
  bool stop_ = false;
  Stats stats_;
  // The stepping thread's lists for one step (sized once: a step allocates nothing).
  std::vector<int32_t> dec_tok_;
  std::vector<int64_t> dec_pos_, dec_slot_, pre_slot_;
  std::vector<Engine::PrefillSeg> pre_seg_;  // the step's prompt chunks for Engine::prefill_batch
  // The end of the latest step while a slot is active (Stats::between_s from there; reset when none is).
  std::optional<std::chrono::steady_clock::time_point> step_end_;
  std::thread thread_;
};

}  // namespace anelab::infer
