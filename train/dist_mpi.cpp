// The MPI process group (train/dist.h): the only file of anelab that calls MPI. It asks for
// MPI_THREAD_SERIALIZED: the gradient sum may run on a communication thread while the backward runs, and the
// training thread calls MPI only when that thread is idle (train/dist_overlap.h); a library granting less
// keeps every call on the main thread (any_thread() false: no overlap).
#include <mpi.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "framework/core/error.h"
#include "train/dist.h"

namespace anelab::train::dist {
namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("train", "MPI: ", call, " failed: ", std::string(msg, size_t(len)));
}

class MpiGroup final : public Group {
 public:
  MpiGroup() {
    int init = 0, done = 0;
    check(MPI_Initialized(&init), "MPI_Initialized");
    check(MPI_Finalized(&done), "MPI_Finalized");
    if (init || done) fail("train", "MPI: this process already started MPI once (one training run per MPI process)");
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    any_thread_ = provided >= MPI_THREAD_SERIALIZED;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // errors become "[train] MPI: ..." exceptions
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  // An exception on its way out (this rank failed): no MPI_Finalize, which could wait for ranks that are
  // inside a collective; the process exits non-zero and the launcher ends the whole job.
  ~MpiGroup() override {
    if (std::uncaught_exceptions() == 0) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool mpi() const override { return true; }
  bool any_thread() const override { return any_thread_; }
  void accumulate_ordered(const float* x, float* acc, int64_t n) override;
  void allgather(const double* mine, int64_t n, double* all) override {
    check(MPI_Allgather(mine, int(n), MPI_DOUBLE, all, int(n), MPI_DOUBLE, MPI_COMM_WORLD), "MPI_Allgather");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  void broadcast(void* data, int64_t bytes, int root) override {
    for (int64_t o = 0; o < bytes; o += kMaxBytes)
      check(
          MPI_Bcast(static_cast<char*>(data) + o, int(std::min(kMaxBytes, bytes - o)), MPI_BYTE, root, MPI_COMM_WORLD),
          "MPI_Bcast");
  }

 private:
  static constexpr int64_t kChunk = int64_t(1) << 22;     // floats per reduce-scatter + allgather round (16 MiB)
  static constexpr int64_t kMaxBytes = int64_t(1) << 30;  // MPI counts are int
  int rank_ = 0, size_ = 1;
  bool any_thread_ = false;
  std::vector<float> recv_;       // [size, chunk segment] this rank's segment from every rank
  std::vector<int> cnt_, off_;    // [size] segment lengths / offsets within a chunk
  std::vector<int> rcnt_, roff_;  // [size] this rank's segment length from each rank / offsets in recv_
};

void MpiGroup::accumulate_ordered(const float* x, float* acc, int64_t n) {
  const int N = size_;
  cnt_.resize(size_t(N)), off_.resize(size_t(N)), rcnt_.resize(size_t(N)), roff_.resize(size_t(N));
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int len = int(std::min(kChunk, n - c0));
    for (int s = 0, o = 0; s < N; ++s) {  // segment s = [off, off + cnt) of the chunk, summed by rank s
      cnt_[size_t(s)] = len / N + (s < len % N ? 1 : 0);
      off_[size_t(s)] = o;
      o += cnt_[size_t(s)];
    }
    const int mine = cnt_[size_t(rank_)];
    for (int r = 0; r < N; ++r) rcnt_[size_t(r)] = mine, roff_[size_t(r)] = r * mine;
    recv_.resize(size_t(N) * size_t(mine));
    check(MPI_Alltoallv(x + c0, cnt_.data(), off_.data(), MPI_FLOAT, recv_.data(), rcnt_.data(), roff_.data(),
                        MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Alltoallv");
    float* a = acc + c0 + off_[size_t(rank_)];
    for (int r = 0; r < N; ++r) {  // rank order: acc + x_0 + x_1 + ...
      const float* p = recv_.data() + size_t(r) * size_t(mine);
      for (int i = 0; i < mine; ++i) a[i] += p[i];
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, acc + c0, cnt_.data(), off_.data(), MPI_FLOAT,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }
}

}  // namespace

bool mpi_built() { return true; }

std::string mpi_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, size_t(len));
  return s.substr(0, s.find('\n'));
}

std::unique_ptr<Group> open_mpi_group() { return std::make_unique<MpiGroup>(); }

}  // namespace anelab::train::dist
