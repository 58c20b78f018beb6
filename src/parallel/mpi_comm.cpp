// The MPI world as a Comm: the only file that includes <mpi.h>. Byte counts travel as MPI
// ints, so one message is capped below 2 GiB; a step's rows are far below that.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "parallel/comm.h"

namespace mx {
namespace {

Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status(StatusCode::kIoError, std::string(what) + ": " + std::string(text, len));
}

Status to_int(int64_t v, int* out, const char* what) {
  if (v < 0 || v > INT_MAX) {
    return invalid_argument(std::string(what) + ": " + std::to_string(v) +
                            " bytes do not fit one MPI message");
  }
  *out = static_cast<int>(v);
  return Status::ok();
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  Status all_to_all(const void* send, void* recv, int64_t bytes) override {
    int n = 0;
    MX_RETURN_IF_ERROR(to_int(bytes, &n, "all_to_all"));
    return mpi_status(MPI_Alltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD),
                      "MPI_Alltoall");
  }

  Status all_to_all_v(const void* send, const int64_t* send_bytes, const int64_t* send_offsets,
                      void* recv, const int64_t* recv_bytes, const int64_t* recv_offsets) override {
    const size_t n = static_cast<size_t>(size_);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    for (size_t q = 0; q < n; ++q) {
      MX_RETURN_IF_ERROR(to_int(send_bytes[q], &sc[q], "all_to_all_v"));
      MX_RETURN_IF_ERROR(to_int(send_offsets[q], &sd[q], "all_to_all_v"));
      MX_RETURN_IF_ERROR(to_int(recv_bytes[q], &rc[q], "all_to_all_v"));
      MX_RETURN_IF_ERROR(to_int(recv_offsets[q], &rd[q], "all_to_all_v"));
    }
    return mpi_status(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(),
                                    rd.data(), MPI_BYTE, MPI_COMM_WORLD),
                      "MPI_Alltoallv");
  }

  Status all_reduce_sum(double* data, int64_t n) override {
    // MPI's reduction order is its own; summing gathered values in rank order keeps every
    // rank's result identical whatever the implementation does.
    return gather_sum(data, n, MPI_DOUBLE);
  }
  Status all_reduce_sum(int64_t* data, int64_t n) override {
    return gather_sum(data, n, MPI_INT64_T);
  }
  Status all_reduce_sum(float* data, int64_t n) override {
    // Each rank sums one chunk of the rows (every rank's copy of it, in rank order), then the
    // summed chunks go to every rank: the same bits everywhere, 2 (size - 1) / size of the data
    // on the wire from each rank, and buffers the size of the data, kept from step to step.
    const int64_t c = (n + size_ - 1) / size_;
    int chunk = 0;
    MX_RETURN_IF_ERROR(to_int(c, &chunk, "all_reduce_sum"));
    const auto padded = static_cast<size_t>(c * size_);
    if (rows_.size() < padded) rows_.resize(padded);
    if (copies_.size() < padded) copies_.resize(padded);
    if (sum_.size() < static_cast<size_t>(c)) sum_.resize(static_cast<size_t>(c));
    std::copy(data, data + n, rows_.begin());
    std::fill(rows_.begin() + n, rows_.begin() + static_cast<int64_t>(padded), 0.0f);
    MX_RETURN_IF_ERROR(mpi_status(MPI_Alltoall(rows_.data(), chunk, MPI_FLOAT, copies_.data(),
                                               chunk, MPI_FLOAT, MPI_COMM_WORLD),
                                  "MPI_Alltoall"));
    for (int64_t i = 0; i < c; ++i) {
      float v = copies_[static_cast<size_t>(i)];
      for (int q = 1; q < size_; ++q) v += copies_[static_cast<size_t>(q * c + i)];
      sum_[static_cast<size_t>(i)] = v;
    }
    MX_RETURN_IF_ERROR(mpi_status(MPI_Allgather(sum_.data(), chunk, MPI_FLOAT, rows_.data(), chunk,
                                                MPI_FLOAT, MPI_COMM_WORLD),
                                  "MPI_Allgather"));
    std::copy(rows_.begin(), rows_.begin() + n, data);
    return Status::ok();
  }

  Status broadcast(void* data, int64_t bytes, int root) override {
    int n = 0;
    MX_RETURN_IF_ERROR(to_int(bytes, &n, "broadcast"));
    return mpi_status(MPI_Bcast(data, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

  Status broadcast_idle(void* data, int64_t bytes, int root) override {
    int n = 0;
    MX_RETURN_IF_ERROR(to_int(bytes, &n, "broadcast"));
    MPI_Request req;
    MX_RETURN_IF_ERROR(
        mpi_status(MPI_Ibcast(data, n, MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast"));
    // Polls briefly at first (a decode step follows the last within microseconds), then
    // backs off to 1 ms.
    for (int spins = 0;; ++spins) {
      int done = 0;
      MX_RETURN_IF_ERROR(mpi_status(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test"));
      if (done) return Status::ok();
      if (spins > 2000) {
        const timespec ts{0, spins > 20000 ? 1000000 : 50000};
        nanosleep(&ts, nullptr);
      }
    }
  }

  Status barrier() override { return mpi_status(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  [[noreturn]] void abort(const std::string& why) override {
    std::fprintf(stderr, "rank %d: %s; ending the job\n", rank_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

 private:
  template <typename T>
  Status gather_sum(T* data, int64_t n, MPI_Datatype type) {
    int count = 0;
    MX_RETURN_IF_ERROR(to_int(n * size_, &count, "all_reduce_sum"));
    std::vector<T> all(static_cast<size_t>(n * size_));
    MX_RETURN_IF_ERROR(mpi_status(MPI_Allgather(data, static_cast<int>(n), type, all.data(),
                                                static_cast<int>(n), type, MPI_COMM_WORLD),
                                  "MPI_Allgather"));
    for (int64_t i = 0; i < n; ++i) {
      T s{};
      for (int q = 0; q < size_; ++q) s += all[static_cast<size_t>(q * n + i)];
      data[i] = s;
    }
    return Status::ok();
  }

  int rank_ = 0, size_ = 1;
  std::vector<float> rows_, copies_, sum_;  // all_reduce_sum(float)'s, kept
};

std::mutex g_mu;
std::unique_ptr<MpiComm> g_world;
bool g_finalized = false;

}  // namespace

bool mpi_available() { return true; }

Result<Comm*> mpi_world() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_world) return static_cast<Comm*>(g_world.get());
  if (g_finalized) return invalid_argument("MPI was already finalized");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return Status(StatusCode::kIoError, "MPI_Init_thread failed");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return unimplemented("the MPI library does not allow calls from more than one thread");
  }
  // Errors come back as codes, so a failed collective is reported with its cause.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_world = std::make_unique<MpiComm>();
  return static_cast<Comm*>(g_world.get());
}

void mpi_finalize() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_world) return;
  g_world.reset();
  MPI_Finalize();
  g_finalized = true;
}

}  // namespace mx
