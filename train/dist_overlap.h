// OverlappedSum: one micro-batch round's gradient sum over the ranks (Group::accumulate_ordered), started
// while the backward of the lower layers still runs.
//
// The flat gradient buffer holds [tok_embeddings, layer 0, ..., layer L-1, norm, output] (train/params.h) and
// the backward finishes it from the end: after the head grads[norm, P) are final, after layer l
// grads[layer l, P), the embedding last (with tied embeddings the classifier adds into it first and the
// token rows last). The engine reports each such point (StepEngine::set_grads_final_hook); every bucket
// [bound k+1, bound k) that is then complete goes to a communication thread, which runs
// accumulate_ordered on it while the engine computes the layers below. finish() hands over what is left
// (the embedding always) and waits.
//
// The same bits as one accumulate_ordered over the whole buffer: the sum is elementwise (acc[i] + x_0[i] +
// x_1[i] + ... in rank order), so cutting the buffer into buckets changes no addition. Every rank submits
// the same buckets in the same order whatever the timing of its reports (the bounds are fixed by the
// layout), so the ranks' collectives always match. MPI calls come from the communication thread while the
// backward runs and from the training thread otherwise, never at once (MPI_THREAD_SERIALIZED).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "train/dist.h"
#include "train/params.h"
#include "train/serial_queue.h"

namespace anelab::train::dist {

// The points where the backward has finished a suffix of the gradients, descending:
// {P, norm, layer L-1, ..., layer 0, 0}.
std::vector<int64_t> backward_bounds(const ParamLayout& layout);

struct SumTimes {    // ms of one round
  double total = 0;  // the reduction's own time (on the communication thread when overlapped)
  double wait = 0;   // the training thread blocked in finish(): the part not hidden behind the backward
};

class OverlappedSum {
 public:
  // bounds: backward_bounds. overlap false: finish() does the whole sum on the calling thread, in one call.
  OverlappedSum(Group& group, std::vector<int64_t> bounds, bool overlap);
  bool overlap() const { return overlap_; }
  // A new round: acc += x of every rank, bucket by bucket. x and acc stay alive until finish() returns; the
  // caller writes no part of x after reporting it final and reads no part of acc before finish().
  void begin(const float* x, float* acc);
  // x[from, P) is final on this rank: its complete buckets start (any one thread at a time may call this).
  void final_from(int64_t from);
  // Starts the rest and waits for the whole round (rethrows an error of the communication thread).
  SumTimes finish();

 private:
  void submit_through(int64_t from);  // mu_ held

  Group& group_;
  std::vector<int64_t> bounds_;
  bool overlap_;
  std::mutex mu_;
  size_t next_ = 0;  // buckets [bounds_[k + 1], bounds_[k]) with k < next_ are submitted
  const float* x_ = nullptr;
  float* acc_ = nullptr;
  double busy0_ = 0;                   // comm_->busy_ms() at begin()
  std::unique_ptr<SerialQueue> comm_;  // the communication thread (overlap only)
};

}  // namespace anelab::train::dist
