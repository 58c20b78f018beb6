#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace mx {

ThreadPool::ThreadPool(int num_threads) {
  MX_CHECK(num_threads >= 1);
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

namespace {

// Spins until done() or about 50 microseconds have passed; true when done() held.
template <typename Done>
bool spin_until(Done done) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (int i = 0;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > limit) return false;
  }
}

}  // namespace

void ThreadPool::work(uint64_t gen, int thread) {
  for (;;) {
    uint64_t cur = ticket_.load(std::memory_order_acquire);
    do {
      if ((cur >> 32) != (gen & 0xffffffffu) || (cur & 0xffffffffu) == 0) return;
    } while (!ticket_.compare_exchange_weak(cur, cur - 1, std::memory_order_acq_rel,
                                            std::memory_order_acquire));
    // A claimed chunk keeps the job from completing, so its fields stay put until it is done.
    const int64_t idx = static_cast<int64_t>(cur & 0xffffffffu) - 1;
    const int64_t n = job_n_, chunks = job_chunks_;
    job_fn_(job_ctx_, n * idx / chunks, n * (idx + 1) / chunks, thread);
    if (done_chunks_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t n, Trampoline fn, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  const int64_t chunks = std::min<int64_t>(n, 3 * num_threads());
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_n_ = n;
  job_chunks_ = chunks;
  done_chunks_.store(0, std::memory_order_relaxed);
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  ticket_.store(((gen & 0xffffffffu) << 32) | static_cast<uint64_t>(chunks),
                std::memory_order_release);
  {
    // Under the lock, so that a worker about to sleep sees the new generation or the wake-up.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(gen, std::memory_order_release);
  }
  wake_.notify_all();
  work(gen, 0);
  auto all_done = [this, chunks] { return done_chunks_.load(std::memory_order_acquire) == chunks; };
  if (spin_until(all_done)) return;
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, all_done);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto woken = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(woken)) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, woken);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    work(seen, index);
  }
}

}  // namespace mx
