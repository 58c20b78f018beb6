// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into a few
// contiguous chunks per thread that the calling thread and the workers claim from one atomic
// ticket: a worker the OS has not scheduled yet (the server's HTTP threads share the cores)
// delays nothing, because the others take its chunks, and the caller waits only for chunks
// already running. A call allocates nothing, so it can sit inside a decode step. A decode step
// makes dozens of short calls, so waiting threads spin briefly before sleeping: a futex
// wake-up costs as much as a small GEMM.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mx {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 means no workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end, thread_index), possibly several times per thread; ranges are disjoint and
  // cover [0, n) exactly, and a thread runs one at a time.
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(
        n, [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<F*>(ctx))(b, e, t); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Trampoline = void (*)(void*, int64_t, int64_t, int);
  void run(int64_t n, Trampoline fn, void* ctx);
  void worker_loop(int index);
  // Claims and runs chunks of job `gen` until none is left.
  void work(uint64_t gen, int thread);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};
  // The job's generation (high 32 bits) and its chunks not yet claimed (low 32): a claim
  // can only succeed for the job it was read for.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> done_chunks_{0};
  std::atomic<bool> stop_{false};
  Trampoline job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_n_ = 0, job_chunks_ = 0;
  std::mutex run_mu_;  // one parallel_for at a time
};

// fn(begin, end, thread) over [0, n) on the pool's threads, or on this one without a pool or
// below `min` items, where waking the pool would cost more than it shares.
template <typename Fn>
void for_ranges(ThreadPool* pool, int64_t n, Fn&& fn, int64_t min = 2) {
  if (pool == nullptr || n < min) {
    fn(int64_t{0}, n, 0);
    return;
  }
  pool->parallel_for(n, fn);
}
// Rows of a step from which the engine splits their row-by-row work (norms, RoPE, KV writes,
// routing, the MoE permutation and combine) over the threads: each row is computed alone, so
// the split changes no result.
inline constexpr int64_t kParallelRows = 8;

}  // namespace mx
