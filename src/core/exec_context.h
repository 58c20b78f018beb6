// What a caller lends the layers it runs: the thread pool, a workspace for buffers that live
// across a parallel loop (activations, quantized activation rows), and one arena per pool
// thread for the scratch of a loop body. Whoever runs a model builds one and passes it down to
// every linear and expert bank, so that no layer keeps buffers of its own per thread and a
// step after the first allocates nothing.
//
// One caller at a time: the workspace's slots are handed out without locks, and the arena a
// body uses is the one for the thread index the pool passes it (ThreadPool::parallel_for).
#pragma once

#include <vector>

#include "core/thread_pool.h"
#include "core/workspace.h"

namespace mx {

class ExecContext {
 public:
  // pool null: everything runs on the calling thread, with one arena.
  explicit ExecContext(ThreadPool* pool)
      : pool_(pool), arenas_(static_cast<size_t>(pool != nullptr ? pool->num_threads() : 1)) {}
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;

  ThreadPool* pool() const { return pool_; }
  int num_threads() const { return static_cast<int>(arenas_.size()); }
  Workspace& workspace() { return workspace_; }
  // The arena of thread `thread` of a parallel loop (0 is the calling thread).
  Workspace& arena(int thread) { return arenas_[static_cast<size_t>(thread)].ws; }
  // Sizes `slot` of every thread's arena for n values of T, before a parallel loop whose items
  // ask for at most that: which thread takes which item changes from call to call, and an
  // arena sized only by the items it happened to run would grow in some later call.
  template <typename T>
  void reserve_arenas(int slot, int64_t n) {
    for (Arena& a : arenas_) a.ws.get<T>(slot, n);
  }

 private:
  // Apart by a cache line: a thread growing its arena writes only its own.
  struct alignas(64) Arena {
    Workspace ws;
  };
  ThreadPool* pool_;
  Workspace workspace_;
  std::vector<Arena> arenas_;
};

}  // namespace mx
