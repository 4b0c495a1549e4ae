// Data-parallel training across processes: the trainer's whole view of the process group. Every MPI call
// of anelab lives in train/dist_mpi.cpp (built when CMake finds MPI); train/dist_nompi.cpp is the stub of a
// build without MPI. A group of one process (no launcher) is the plain single-process trainer.
//
// Deterministic reduction: accumulate_ordered adds the ranks' buffers into an accumulator one rank after
// the other, acc[i] = (((acc[i] + x_0[i]) + x_1[i]) + ...), the same additions in the same order on every
// host, so N ranks each contributing one micro-batch give the bits of one process accumulating the N
// micro-batches in rank order. MPI_Allreduce is not used: its summation order is the library's choice.
// The MPI version is a reduce-scatter + allgather of fixed-size chunks: rank s sums segment s of each
// chunk (receiving it from every rank with MPI_Alltoallv, adding in rank order) and MPI_Allgatherv hands
// the summed segments to every rank; each rank sends and receives about 2 * n * (N-1)/N floats.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace anelab::train::dist {

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // true when the process runs under an MPI launcher (then it must not exec() itself: see trainer.h).
  virtual bool mpi() const = 0;
  // true when any one thread at a time may call the group (MPI_THREAD_SERIALIZED or more was granted), so
  // the gradient sum can run on a communication thread (train/dist_overlap.h); false: the main thread only.
  virtual bool any_thread() const = 0;
  // acc[i] += x_0[i] + x_1[i] + ... (x_r = x on rank r), added in rank order; acc must be equal on every
  // rank before the call and is equal (bitwise) after it.
  virtual void accumulate_ordered(const float* x, float* acc, int64_t n) = 0;
  // all[r * n + i] = mine[i] of rank r, on every rank.
  virtual void allgather(const double* mine, int64_t n, double* all) = 0;
  virtual void barrier() = 0;
  // bytes of data on rank root -> data on every rank.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
};

// The group one process of `anelab train --launcher L` belongs to:
//   none  a group of one (no MPI call);
//   mpi   the MPI world (MPI_Init here, MPI_Finalize when the group is destroyed; an error without MPI);
//   auto  mpi when an MPI launcher started this process (its environment says so), else none.
std::unique_ptr<Group> open_group(const std::string& launcher);

// Whether this build has MPI, and (when it has) the library's version line.
bool mpi_built();
std::string mpi_version();

// Implemented by dist_mpi.cpp or dist_nompi.cpp; open_group calls it for mpi.
std::unique_ptr<Group> open_mpi_group();

}  // namespace anelab::train::dist
