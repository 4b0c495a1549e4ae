#include "train/dist.h"

#include <cstdlib>
#include <cstring>

#include "framework/core/error.h"

namespace anelab::train::dist {
namespace {

// A group of one process: the plain trainer.
class LocalGroup final : public Group {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool mpi() const override { return false; }
  bool any_thread() const override { return true; }
  void accumulate_ordered(const float* x, float* acc, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
  }
  void allgather(const double* mine, int64_t n, double* all) override {
    std::memcpy(all, mine, size_t(n) * sizeof(double));
  }
  void barrier() override {}
  void broadcast(void*, int64_t, int) override {}
};

// Set by the MPI launchers in each process they start: Open MPI's mpirun, MPICH/Intel MPI's Hydra (PMI),
// and PMIx-based launchers (Open MPI 5, Slurm's srun --mpi=pmix).
bool started_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

std::unique_ptr<Group> open_group(const std::string& launcher) {
  if (launcher == "none") return std::make_unique<LocalGroup>();
  if (launcher == "mpi" || (launcher == "auto" && started_by_mpi_launcher())) return open_mpi_group();
  if (launcher == "auto") return std::make_unique<LocalGroup>();
  fail("train", "--launcher ", launcher, ": unknown (auto, mpi or none)");
}

}  // namespace anelab::train::dist
