// Ranks as threads of one process: each publishes its buffers, a barrier, each reads what
// the others published, a second barrier before anyone may reuse its buffers.
#include <barrier>
#include <cstdio>
#include <cstring>

#include "parallel/comm.h"

namespace mx {
namespace {

struct Published {
  const void* send = nullptr;
  const int64_t* send_bytes = nullptr;
  const int64_t* send_offsets = nullptr;
  int64_t bytes = 0;
  void* data = nullptr;
};

struct Hub {
  explicit Hub(int n) : size(n), sync(n), slots(static_cast<size_t>(n)) {}
  int size;
  std::barrier<> sync;
  std::vector<Published> slots;
};

class LocalComm final : public Comm {
 public:
  LocalComm(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_->size; }
  std::string name() const override { return "local"; }

  Status all_to_all(const void* send, void* recv, int64_t bytes) override {
    mine() = {send, nullptr, nullptr, bytes, nullptr};
    hub_->sync.arrive_and_wait();
    for (int q = 0; q < size(); ++q) {
      const Published& p = peer(q);
      std::memcpy(static_cast<char*>(recv) + q * bytes,
                  static_cast<const char*>(p.send) + rank_ * p.bytes, static_cast<size_t>(bytes));
    }
    hub_->sync.arrive_and_wait();
    return Status::ok();
  }

  Status all_to_all_v(const void* send, const int64_t* send_bytes, const int64_t* send_offsets,
                      void* recv, const int64_t* recv_bytes, const int64_t* recv_offsets) override {
    mine() = {send, send_bytes, send_offsets, 0, nullptr};
    hub_->sync.arrive_and_wait();
    Status st = Status::ok();
    for (int q = 0; q < size(); ++q) {
      const Published& p = peer(q);
      if (p.send_bytes[rank_] != recv_bytes[q]) {
        st = invalid_argument("all_to_all_v: rank " + std::to_string(q) + " sends " +
                              std::to_string(p.send_bytes[rank_]) + " bytes, rank " +
                              std::to_string(rank_) + " expects " + std::to_string(recv_bytes[q]));
        continue;
      }
      if (recv_bytes[q] == 0) continue;
      std::memcpy(static_cast<char*>(recv) + recv_offsets[q],
                  static_cast<const char*>(p.send) + p.send_offsets[rank_],
                  static_cast<size_t>(recv_bytes[q]));
    }
    hub_->sync.arrive_and_wait();
    return st;
  }

  Status all_reduce_sum(double* data, int64_t n) override { return reduce(data, n); }
  Status all_reduce_sum(int64_t* data, int64_t n) override { return reduce(data, n); }
  Status all_reduce_sum(float* data, int64_t n) override { return reduce(data, n); }

  Status broadcast(void* data, int64_t bytes, int root) override {
    mine() = {nullptr, nullptr, nullptr, bytes, data};
    hub_->sync.arrive_and_wait();
    if (rank_ != root) std::memcpy(data, peer(root).data, static_cast<size_t>(bytes));
    hub_->sync.arrive_and_wait();
    return Status::ok();
  }

  Status barrier() override {
    hub_->sync.arrive_and_wait();
    return Status::ok();
  }

  [[noreturn]] void abort(const std::string& why) override {
    std::fprintf(stderr, "rank %d: %s\n", rank_, why.c_str());
    std::abort();
  }

 private:
  Published& mine() { return hub_->slots[static_cast<size_t>(rank_)]; }
  const Published& peer(int q) const { return hub_->slots[static_cast<size_t>(q)]; }

  template <typename T>
  Status reduce(T* data, int64_t n) {
    // Kept from call to call: a tensor-parallel step sums every block's rows.
    const size_t words = (static_cast<size_t>(n) * sizeof(T) + 7) / 8;
    if (scratch_.size() < words) scratch_.resize(words);
    T* sum = reinterpret_cast<T*>(scratch_.data());
    std::fill(sum, sum + n, T{});
    mine() = {nullptr, nullptr, nullptr, n, data};
    hub_->sync.arrive_and_wait();
    for (int q = 0; q < size(); ++q) {
      const T* d = static_cast<const T*>(peer(q).data);
      for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += d[i];
    }
    hub_->sync.arrive_and_wait();
    std::memcpy(data, sum, static_cast<size_t>(n) * sizeof(T));
    return Status::ok();
  }

  std::shared_ptr<Hub> hub_;
  int rank_;
  // Bytes of reduce()'s sums; 8-byte elements, so any T's alignment holds.
  std::vector<uint64_t> scratch_;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> make_local_comms(int n) {
  auto hub = std::make_shared<Hub>(n);
  std::vector<std::unique_ptr<Comm>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<LocalComm>(hub, i));
  return out;
}

Result<std::vector<int64_t>> all_gather_one(Comm& comm, int64_t value) {
  std::vector<int64_t> v(static_cast<size_t>(comm.size()), 0);
  v[static_cast<size_t>(comm.rank())] = value;
  MX_RETURN_IF_ERROR(comm.all_reduce_sum(v.data(), comm.size()));
  return v;
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

}  // namespace mx
