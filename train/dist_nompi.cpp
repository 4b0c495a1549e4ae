// The process group of a build without MPI: only the single-process trainer (train/dist.h).
#include "framework/core/error.h"
#include "train/dist.h"

namespace anelab::train::dist {

bool mpi_built() { return false; }
std::string mpi_version() { return ""; }

std::unique_ptr<Group> open_mpi_group() {
  fail("train",
       "this anelab was built without MPI, so it cannot train across processes (--launcher mpi, or started "
       "by mpirun): install Open MPI (Debian: libopenmpi-dev openmpi-bin; Homebrew: open-mpi) and reconfigure with "
       "CMake");
}

}  // namespace anelab::train::dist
