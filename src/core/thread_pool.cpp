#include "core/thread_pool.h"

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
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::range_of(int t, int64_t* b, int64_t* e) const {
  const int64_t nt = num_threads();
  *b = job_n_ * t / nt;
  *e = job_n_ * (t + 1) / nt;
}

void ThreadPool::run(int64_t n, Trampoline fn, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_fn_ = fn;
    job_ctx_ = ctx;
    job_n_ = n;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  int64_t b, e;
  range_of(0, &b, &e);
  if (b < e) fn(ctx, b, e, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    Trampoline fn;
    void* ctx;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = job_fn_;
      ctx = job_ctx_;
    }
    int64_t b, e;
    range_of(index, &b, &e);
    if (b < e) fn(ctx, b, e, index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace mx
