// Continuous batching as pure logic: requests in, a batch plan out, no model and no clock.
// Each step runs the decode token of every running request first, then prefill chunks of the
// rest (requests still prefilling, then waiting ones in arrival order) within
// chunked_prefill_size tokens, max_running_requests and the KV block budget. A running
// request holds one of max_running_requests recurrent-state slots (hybrid models). When a decode
// step finds no free block, the most recently arrived running request is preempted: its
// blocks are freed and it waits again, keeping its place by arrival, to recompute its prompt
// and generated tokens later.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "core/status.h"
#include "runtime/kv_blocks.h"

namespace mx {

struct SchedulerConfig {
  int32_t max_running_requests = 16;
  int64_t chunked_prefill_size = 512;
  int32_t max_waiting_requests = 256;
  int32_t num_blocks = 1024;
  int32_t block_size = 16;
};

// Compute positions [start, start + count) of request `id`; when `samples`, the last
// position's logits sample the request's next token.
struct PlanItem {
  uint64_t id;
  int64_t start;
  int64_t count;
  bool samples;
};

struct BatchPlan {
  std::vector<PlanItem> items;  // decode items first
  std::vector<uint64_t> preempted;
  int64_t tokens() const;
  bool empty() const { return items.empty(); }
};

struct SeqInfo {
  uint64_t id = 0;
  uint64_t arrival = 0;
  int64_t prompt_len = 0;
  int64_t max_new_tokens = 0;
  int64_t generated = 0;  // tokens sampled so far
  int64_t computed = 0;   // leading tokens whose KV is cached
  int32_t preemptions = 0;
  // The recurrent-state slot (hybrid models) while running; -1 while waiting. There are
  // max_running_requests slots, so an admitted request always finds one.
  int32_t slot = -1;
  BlockTable table;
  int64_t known() const { return prompt_len + generated; }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Fails with kOutOfRange when the waiting queue is full (retry later), and with
  // kInvalidArgument when the request could never fit the KV budget.
  Status add(uint64_t id, int64_t prompt_len, int64_t max_new_tokens);
  BatchPlan schedule();
  // After the model ran `plan` and sampled for its sampling items: advances the requests and
  // retires those that reached max_new_tokens or are listed in `finished` (a stop string or
  // token). Returns the ids retired.
  std::vector<uint64_t> complete(const BatchPlan& plan, const std::vector<uint64_t>& finished);
  // Drops a request wherever it is and frees its blocks; false when unknown.
  bool cancel(uint64_t id);

  size_t running() const { return running_.size(); }
  size_t waiting() const { return waiting_.size(); }
  const BlockAllocator& allocator() const { return alloc_; }
  const SeqInfo* find(uint64_t id) const;
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt(uint64_t id);
  void retire(uint64_t id);

  SchedulerConfig config_;
  BlockAllocator alloc_;
  uint64_t next_arrival_ = 0;
  std::map<uint64_t, SeqInfo> seqs_;
  std::vector<uint64_t> running_;  // arrival order
  std::deque<uint64_t> waiting_;   // arrival order
  std::vector<int32_t> free_slots_;
};

}  // namespace mx
