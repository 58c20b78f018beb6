// How ranks talk: the collectives expert parallelism needs, over threads of one process
// (LocalComm, for tests) or MPI processes (MpiComm, the only code that sees <mpi.h>). Every
// call is collective: each rank of the group makes it, in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace mx {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local", "mpi"
  // Rank r gets `bytes` from every rank q, from q's send + r * bytes, at recv + q * bytes.
  virtual Status all_to_all(const void* send, void* recv, int64_t bytes) = 0;
  // Rank r sends send_bytes[q] bytes from send + send_offsets[q] to each rank q and receives
  // recv_bytes[q] bytes from q at recv + recv_offsets[q].
  virtual Status all_to_all_v(const void* send, const int64_t* send_bytes,
                              const int64_t* send_offsets, void* recv, const int64_t* recv_bytes,
                              const int64_t* recv_offsets) = 0;
  // Element-wise sums over the ranks, summed in rank order on every rank (identical results).
  virtual Status all_reduce_sum(double* data, int64_t n) = 0;
  virtual Status all_reduce_sum(int64_t* data, int64_t n) = 0;
  // Tensor parallelism's partial sums: the same fixed order, so that every rank holds the
  // same rows after each block and results do not depend on timing.
  virtual Status all_reduce_sum(float* data, int64_t n) = 0;
  virtual Status broadcast(void* data, int64_t bytes, int root) = 0;
  // The same for a rank that may wait long (a worker between steps): it sleeps while it
  // waits instead of spinning on a core the busy ranks need.
  virtual Status broadcast_idle(void* data, int64_t bytes, int root) {
    return broadcast(data, bytes, root);
  }
  virtual Status barrier() = 0;
  // Ends every rank of the job now (a collective failed: the peers cannot go on).
  [[noreturn]] virtual void abort(const std::string& why) = 0;
};

// Every rank's value at its own index: a gather built from all_reduce_sum.
Result<std::vector<int64_t>> all_gather_one(Comm& comm, int64_t value);

// `n` communicators joined in this process, one per thread: rank i is comms[i].
std::vector<std::unique_ptr<Comm>> make_local_comms(int n);

// True when this process was started by mpirun (or another MPI launcher).
bool launched_by_mpi();
// Whether this build has MPI.
bool mpi_available();
// The MPI world, initialized on first call (MPI_THREAD_SERIALIZED: one thread at a time calls
// MPI, not always the main one). Fails with the reason when the build has no MPI.
Result<Comm*> mpi_world();
// Finalizes MPI if mpi_world() initialized it; a no-op otherwise.
void mpi_finalize();

}  // namespace mx
