#include "core/thread_pool.h"

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

void ThreadPool::range_of(int t, int64_t* b, int64_t* e) const {
  const int64_t nt = num_threads();
  *b = job_n_ * t / nt;
  *e = job_n_ * (t + 1) / nt;
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

void ThreadPool::run(int64_t n, Trampoline fn, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_n_ = n;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Under the lock, so that a worker about to sleep sees the new generation or the wake-up.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  int64_t b, e;
  range_of(0, &b, &e);
  if (b < e) fn(ctx, b, e, 0);
  auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
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
    int64_t b, e;
    range_of(index, &b, &e);
    if (b < e) job_fn_(job_ctx_, b, e, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace mx
