// Continuous batching as pure logic: requests in, a batch plan out, no model and no clock.
// Each step runs the decode token of every running request first, then prefill chunks of the
// rest (requests still prefilling, then waiting ones in arrival order) within
// chunked_prefill_size tokens, max_running_requests and the KV block budget. A running
// request holds one of max_running_requests recurrent-state slots (hybrid models). When a decode
// step finds no free block, the most recently arrived running request is preempted: its
// blocks are freed and it waits again, keeping its place by arrival, to recompute its prompt
// and generated tokens later.
//
// With prefix caching, full blocks enter a radix tree (runtime/prefix_cache.h) as soon as a
// step completes them (prompt and generated tokens alike), so requests running at the same
// time share them too. Admission matches a request's known tokens against the tree and starts
// computing after the longest cached run of whole blocks, capped one token short of the end
// (the last token's logits are needed); the KV budget counts only its new blocks. A request
// that would compute many of the same tokens as one admitted in the same step waits a step
// instead, and reads them. Cached blocks nobody reads are evicted, least recently used first,
// before anyone is preempted.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "core/status.h"
#include "runtime/kv_blocks.h"
#include "runtime/prefix_cache.h"

namespace mx {

struct SchedulerConfig {
  int32_t max_running_requests = 16;
  int64_t chunked_prefill_size = 512;
  int32_t max_waiting_requests = 256;
  int32_t num_blocks = 1024;
  int32_t block_size = 16;
  // Reuse the KV blocks of cached prefixes.
  bool prefix_caching = true;
  // Models with recurrent state (hybrid): prefill chunks start at multiples of prefill_align,
  // so that a chunked rule splits a prompt the same way whatever the batch and the cache. With
  // prefix caching, `state_entries` saved states hold the state after chosen positions: chunks
  // stop at every multiple of state_interval and at the prompt's last multiple of
  // prefill_align, and the state there is saved; a cached prefix is used only up to a
  // position with a saved state.
  int64_t prefill_align = 1;
  int32_t state_entries = 0;
  int64_t state_interval = 256;
  // Data-parallel attention: one pool of num_blocks a rank, each request in one of them (its
  // rank runs it), block ids counted within the pool. Prefix caching needs one pool.
  int32_t dp_size = 1;
};

// Prefix-cache lookups in tokens, as vLLM counts them: `queries` adds the known tokens of each
// admitted request, `hits` those it found cached.
struct PrefixCacheStats {
  int64_t queries = 0, hits = 0;
};

// Compute positions [start, start + count) of request `id`; when `samples`, the last
// position's logits sample the request's next token.
// A decode item with `guesses` > 0 feeds the last sampled token and as many drafted ones
// (count = 1 + guesses): every position's logits are verified, and the step yields from 1 to
// guesses + 1 tokens.
struct PlanItem {
  uint64_t id;
  int64_t start;
  int64_t count;
  bool samples;
  int32_t guesses = 0;
  // Hybrid prefix caching: the saved state to load into the request's slot before the step,
  // and the one to save its state into after it (-1: none).
  int32_t load_state = -1, save_state = -1;
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
  // Data-parallel attention: the rank that runs it and whose pool holds its blocks while
  // running; -1 while waiting.
  int32_t rank = -1;
  BlockTable table;
  // The first `shared_blocks` blocks of `table` belong to the prefix cache (this request holds
  // a reference to each); the rest are its own.
  int32_t shared_blocks = 0;
  std::vector<int32_t> tokens;  // prompt then generated
  int32_t draft = 0;            // guesses to verify in the next decode step (set_draft)
  int32_t load_entry = -1;      // the saved state its cached prefix ends with, until loaded
  int64_t known() const { return prompt_len + generated; }
  bool decoding() const { return generated > 0 && computed == known() - 1; }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Fails with kOutOfRange when the waiting queue is full (retry later), and with
  // kInvalidArgument when the request could never fit the KV budget.
  Status add(uint64_t id, std::vector<int32_t> prompt, int64_t max_new_tokens);
  BatchPlan schedule();
  // After the model ran `plan` and sampled `sampled` (one token per sampling item, in plan
  // order): advances the requests, caches their newly full blocks, and retires those that
  // reached max_new_tokens or are listed in `finished` (a stop string or token). Returns the
  // ids retired.
  std::vector<uint64_t> complete(const BatchPlan& plan, const std::vector<int32_t>& sampled,
                                 const std::vector<uint64_t>& finished = {});
  // The same with the tokens each sampling item yielded: one, or for an item with guesses
  // the kept guesses and the token after them. Positions past what was kept are dropped from
  // the computed length, so their keys are overwritten and no block they filled is cached.
  std::vector<uint64_t> complete_runs(const BatchPlan& plan,
                                      const std::vector<std::vector<int32_t>>& yielded,
                                      const std::vector<uint64_t>& finished = {});
  // Asks the next step to verify `guesses` drafted tokens of a decoding request, within its
  // token budget. The guesses get KV blocks only where free ones remain: they never evict a
  // cached prefix or preempt a request.
  void set_draft(uint64_t id, int32_t guesses);
  // Drops a request wherever it is and frees its blocks; false when unknown.
  bool cancel(uint64_t id);

  size_t running() const { return running_.size(); }
  size_t waiting() const { return waiting_.size(); }
  // Rank 0's pool (the only one without data-parallel attention), or rank `r`'s.
  const BlockAllocator& allocator(int r = 0) const { return pools_[static_cast<size_t>(r)]; }
  const PrefixCache& prefix_cache() const { return cache_; }
  const PrefixCacheStats& prefix_stats() const { return prefix_stats_; }
  // Blocks that requests hold: in use, less the cached blocks nobody reads.
  int32_t held_blocks() const;
  const SeqInfo* find(uint64_t id) const;
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt(uint64_t id);
  void retire(uint64_t id);
  // Grows a table to `tokens` slots, evicting unread cached blocks when the pool is short.
  bool reserve(SeqInfo& s, int64_t tokens);
  // Drops the request's references and frees its own blocks.
  void release_blocks(SeqInfo& s);
  // Starts a request that holds no blocks at its longest cached prefix.
  void match_prefix(SeqInfo& s);
  void cache_full_blocks(SeqInfo& s);
  // Whether `s` should wait for blocks that plan items [from, end) are about to compute.
  bool shares_with_admitted(const SeqInfo& s, const BatchPlan& plan, size_t from) const;
  // The end of `s`'s next prefill chunk given `budget` tokens (hybrid models: aligned, and
  // stopping at the positions whose state is kept); s.computed when it must wait.
  int64_t chunk_end(const SeqInfo& s, int64_t budget) const;
  bool keeps_states() const { return config_.state_entries > 0 && config_.prefix_caching; }
  bool state_position(const SeqInfo& s, int64_t end) const;
  // A saved state to write: a free one, else the least recently used (its block loses it);
  // -1 when every one is about to be written.
  int32_t take_entry();
  void drop_state(int32_t block);
  void keep_state(const PlanItem& i, SeqInfo* s);

  SchedulerConfig config_;
  std::vector<BlockAllocator> pools_;
  BlockAllocator& pool(const SeqInfo& s) {
    return pools_[static_cast<size_t>(std::max(0, s.rank))];
  }
  // The latest-arriving running request in `rank`'s pool (the next to make room there).
  uint64_t latest_in(int32_t rank) const;
  // The pool with the most free blocks (ties: the lower rank), for a request admitted now.
  int32_t roomiest_pool() const;
  PrefixCache cache_;
  PrefixCacheStats prefix_stats_;
  uint64_t next_arrival_ = 0;
  std::map<uint64_t, SeqInfo> seqs_;
  std::vector<uint64_t> running_;  // arrival order
  std::deque<uint64_t> waiting_;   // arrival order
  std::vector<int32_t> free_slots_;
  // Saved states: the cached block each follows (-1 free, -2 being written), when each was last
  // used, and each cached block's.
  std::vector<int32_t> entry_block_;
  std::vector<uint64_t> entry_used_;
  std::map<int32_t, int32_t> block_entry_;
  uint64_t state_clock_ = 0;
};

}  // namespace mx
