// A build without MPI: one process only.
#include "parallel/comm.h"

namespace mx {

bool mpi_available() { return false; }

Result<Comm*> mpi_world() {
  return unimplemented(
      "this mxserve was built without MPI (install libopenmpi-dev and rebuild); --ep-size 1 "
      "only");
}

void mpi_finalize() {}

}  // namespace mx
