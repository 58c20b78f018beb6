#include "runtime/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace mx {

int64_t BatchPlan::tokens() const {
  int64_t n = 0;
  for (const PlanItem& i : items) n += i.count;
  return n;
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      pools_(static_cast<size_t>(std::max(1, config.dp_size)),
             BlockAllocator(config.num_blocks, config.block_size)),
      cache_(config.block_size) {
  MX_CHECK(config.dp_size <= 1 || !config.prefix_caching);
  for (int32_t s = config.max_running_requests - 1; s >= 0; --s) free_slots_.push_back(s);
  MX_CHECK(config.max_running_requests > 0 && config.chunked_prefill_size > 0);
  MX_CHECK(config.prefill_align == 1 || config.prefill_align % config.block_size == 0);
  MX_CHECK(config.state_interval % config.prefill_align == 0);
  entry_block_.assign(static_cast<size_t>(std::max(0, config.state_entries)), -1);
  entry_used_.assign(entry_block_.size(), 0);
}

Status Scheduler::add(uint64_t id, std::vector<int32_t> prompt, int64_t max_new_tokens) {
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  if (prompt_len <= 0 || max_new_tokens <= 0)
    return invalid_argument("empty prompt or token budget");
  if (seqs_.count(id)) return invalid_argument("request " + std::to_string(id) + " exists");
  // A request that can never fit is the client's error (400) whatever the queue holds; only a
  // full queue is the server's (kOutOfRange: 503, retry later).
  const int64_t capacity = static_cast<int64_t>(config_.num_blocks) * config_.block_size;
  if (prompt_len > capacity || max_new_tokens > capacity - prompt_len) {
    return invalid_argument("the prompt (" + std::to_string(prompt_len) +
                            " tokens) plus max_tokens (" + std::to_string(max_new_tokens) +
                            ") exceeds the KV cache of " + std::to_string(capacity) + " tokens");
  }
  if (static_cast<int32_t>(waiting_.size()) >= config_.max_waiting_requests) {
    return Status(StatusCode::kOutOfRange, "the waiting queue is full (" +
                                               std::to_string(config_.max_waiting_requests) +
                                               " requests)");
  }
  SeqInfo s;
  s.id = id;
  s.arrival = next_arrival_++;
  s.prompt_len = prompt_len;
  s.max_new_tokens = max_new_tokens;
  s.tokens = std::move(prompt);
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
  return Status::ok();
}

int32_t Scheduler::held_blocks() const {
  int32_t used = 0;
  for (const BlockAllocator& p : pools_) used += p.used_blocks();
  return used - cache_.evictable_blocks();
}

uint64_t Scheduler::latest_in(int32_t rank) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (seqs_.at(*it).rank == rank) return *it;
  }
  MX_CHECK(false);
  return 0;
}

int32_t Scheduler::roomiest_pool() const {
  int32_t best = 0;
  for (size_t r = 1; r < pools_.size(); ++r) {
    if (pools_[r].free_blocks() > pools_[static_cast<size_t>(best)].free_blocks()) {
      best = static_cast<int32_t>(r);
    }
  }
  return best;
}

bool Scheduler::reserve(SeqInfo& s, int64_t tokens) {
  BlockAllocator& alloc = pool(s);
  const int32_t short_by = BlockAllocator::blocks_for(tokens, alloc.block_size()) -
                           static_cast<int32_t>(s.table.blocks.size()) - alloc.free_blocks();
  // Cached blocks go only when that makes room: a request that cannot fit anyway keeps them.
  if (short_by > 0 && short_by <= cache_.evictable_blocks()) {
    std::vector<int32_t> freed;
    MX_CHECK(cache_.evict(short_by, &freed) == short_by);
    for (int32_t b : freed) drop_state(b);
    MX_CHECK(alloc.release(freed).is_ok());
  }
  return s.table.reserve(tokens, &alloc);
}

void Scheduler::release_blocks(SeqInfo& s) {
  const std::vector<int32_t>& b = s.table.blocks;
  const auto split = b.begin() + s.shared_blocks;
  MX_CHECK(cache_.release(std::vector<int32_t>(b.begin(), split)).is_ok());
  MX_CHECK(pool(s).release(std::vector<int32_t>(split, b.end())).is_ok());
  s.table.blocks.clear();
  s.table.tokens = 0;
  s.shared_blocks = 0;
}

void Scheduler::match_prefix(SeqInfo& s) {
  if (!config_.prefix_caching || !s.table.blocks.empty()) return;
  const int64_t bs = config_.block_size, align = config_.prefill_align;
  // The last known token is always computed: its logits sample the next one.
  std::vector<int32_t> hit = cache_.match(s.tokens.data(), (s.known() - 1) / align * align);
  if (config_.state_entries > 0) {
    // A hybrid model resumes only where a state was kept.
    while (!hit.empty() && (static_cast<int64_t>(hit.size()) * bs % align != 0 ||
                            !block_entry_.count(hit.back()))) {
      hit.pop_back();
    }
    if (hit.empty()) return;
    s.load_entry = block_entry_.at(hit.back());
    entry_used_[static_cast<size_t>(s.load_entry)] = ++state_clock_;
  }
  if (hit.empty()) return;
  MX_CHECK(cache_.acquire(hit).is_ok());
  s.shared_blocks = static_cast<int32_t>(hit.size());
  s.computed = static_cast<int64_t>(hit.size()) * bs;
  s.table.tokens = s.computed;
  s.table.blocks = std::move(hit);
}

void Scheduler::cache_full_blocks(SeqInfo& s) {
  if (!config_.prefix_caching) return;
  const int32_t full = static_cast<int32_t>(s.computed / config_.block_size);
  if (full <= s.shared_blocks) return;
  std::vector<int32_t> duplicates;
  cache_.insert(s.tokens.data(), full, s.shared_blocks, &s.table.blocks, &duplicates);
  MX_CHECK(pool(s).release(duplicates).is_ok());
  s.shared_blocks = full;
}

// A waiting request that shares at least this many tokens beyond its cached prefix with what a
// request admitted in the same step computes waits one step to read them from the cache (as
// SGLang's in-batch prefix caching): n > 1 copies of a prompt compute it once.
constexpr int64_t kInBatchShareTokens = 32;

bool Scheduler::shares_with_admitted(const SeqInfo& s, const BatchPlan& plan, size_t from) const {
  if (!config_.prefix_caching) return false;
  const int64_t bs = config_.block_size;
  const int64_t limit = (s.known() - 1) / bs * bs;
  for (size_t k = from; k < plan.items.size(); ++k) {
    const PlanItem& i = plan.items[k];
    const std::vector<int32_t>& t = seqs_.at(i.id).tokens;
    const int64_t end = std::min(limit, i.start + i.count);
    int64_t common = 0;
    while (common < end && s.tokens[static_cast<size_t>(common)] == t[static_cast<size_t>(common)])
      ++common;
    if (common / bs * bs - s.computed >= kInBatchShareTokens) return true;
  }
  return false;
}

void Scheduler::preempt(uint64_t id) {
  SeqInfo& s = seqs_.at(id);
  release_blocks(s);
  s.computed = 0;
  s.draft = 0;
  s.load_entry = -1;
  ++s.preemptions;
  free_slots_.push_back(s.slot);
  s.slot = -1;
  s.rank = -1;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  // Back to waiting in arrival order, so it is readmitted before anything that came later.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](uint64_t w) { return seqs_.at(w).arrival > s.arrival; });
  waiting_.insert(pos, id);
}

BatchPlan Scheduler::schedule() {
  BatchPlan plan;
  // 1. Decode: every running request whose prompt is fully computed gets one token.
  std::vector<uint64_t> decoding;
  for (uint64_t id : running_) {
    if (seqs_.at(id).decoding()) decoding.push_back(id);
  }
  for (uint64_t id : decoding) {
    if (std::find(running_.begin(), running_.end(), id) == running_.end()) continue;  // preempted
    SeqInfo& s = seqs_.at(id);
    int32_t guesses = s.draft;
    const int32_t need = BlockAllocator::blocks_for(s.computed + 1 + guesses, config_.block_size) -
                         static_cast<int32_t>(s.table.blocks.size());
    if (guesses > 0 && need <= pool(s).free_blocks()) {
      MX_CHECK(s.table.reserve(s.computed + 1 + guesses, &pool(s)));
    } else {
      guesses = 0;
    }
    while (!reserve(s, s.computed + 1)) {
      const uint64_t victim = latest_in(s.rank);  // the latest arrival in its pool
      preempt(victim);
      plan.preempted.push_back(victim);
      if (victim == id) break;
    }
    if (std::find(running_.begin(), running_.end(), id) == running_.end()) continue;
    plan.items.push_back({id, s.computed, 1 + guesses, true, guesses});
  }
  // Planned decode items of requests preempted later in this loop are dropped.
  plan.items.erase(std::remove_if(plan.items.begin(), plan.items.end(),
                                  [&](const PlanItem& i) {
                                    return std::find(running_.begin(), running_.end(), i.id) ==
                                           running_.end();
                                  }),
                   plan.items.end());
  // 2. Prefill: running requests still prefilling, then waiting ones in arrival order.
  int64_t budget = config_.chunked_prefill_size;
  auto prefill = [&](SeqInfo& s) -> bool {
    const int64_t end = chunk_end(s, budget);
    const int64_t chunk = end - s.computed;
    if (chunk <= 0 || !reserve(s, end)) return false;
    PlanItem item{s.id, s.computed, chunk, end == s.known()};
    item.load_state = s.load_entry;
    s.load_entry = -1;
    if (keeps_states() && state_position(s, end)) item.save_state = take_entry();
    plan.items.push_back(item);
    budget -= chunk;
    return true;
  };
  for (uint64_t id : running_) {
    SeqInfo& s = seqs_.at(id);
    if (!s.decoding() && budget > 0) prefill(s);
  }
  const size_t admitted_from = plan.items.size();
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_running_requests) {
    SeqInfo& s = seqs_.at(waiting_.front());
    s.rank = roomiest_pool();
    match_prefix(s);
    // No KV room, or better computed by a request just admitted: admit nothing out of order.
    if (shares_with_admitted(s, plan, admitted_from) || !prefill(s)) {
      release_blocks(s);
      s.computed = 0;
      s.load_entry = -1;
      s.rank = -1;
      break;
    }
    if (config_.prefix_caching) {
      prefix_stats_.queries += s.known();
      prefix_stats_.hits += static_cast<int64_t>(s.shared_blocks) * config_.block_size;
    }
    MX_CHECK(!free_slots_.empty());
    s.slot = free_slots_.back();
    free_slots_.pop_back();
    running_.push_back(s.id);
    std::sort(running_.begin(), running_.end(),
              [&](uint64_t a, uint64_t b) { return seqs_.at(a).arrival < seqs_.at(b).arrival; });
    waiting_.pop_front();
  }
  return plan;
}

void Scheduler::retire(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  release_blocks(it->second);
  if (it->second.slot >= 0) free_slots_.push_back(it->second.slot);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  seqs_.erase(it);
}

int64_t Scheduler::chunk_end(const SeqInfo& s, int64_t budget) const {
  int64_t end = std::min(s.known(), s.computed + budget);
  const int64_t align = config_.prefill_align;
  if (align == 1) return end;
  // The prompt in aligned chunks (the last may end it anywhere); tokens that were generated
  // (recomputed after preemption) run token by token, so in any split, from the prompt's end.
  const int64_t prompt = s.prompt_len;
  if (s.computed < prompt) {
    end = std::min(end, prompt);
    if (end < prompt) end = end / align * align;
  }
  if (keeps_states()) {
    const int64_t interval = config_.state_interval;
    const int64_t next = (s.computed / interval + 1) * interval;
    const int64_t last = prompt / align * align;
    if (next < end) end = next;
    if (last > s.computed && last < end) end = last;
  }
  return std::max(end, s.computed);
}

bool Scheduler::state_position(const SeqInfo& s, int64_t end) const {
  const int64_t align = config_.prefill_align;
  return end % align == 0 &&
         (end % config_.state_interval == 0 || end == s.prompt_len / align * align);
}

int32_t Scheduler::take_entry() {
  int32_t best = -1;
  for (size_t e = 0; e < entry_block_.size(); ++e) {
    if (entry_block_[e] == -1) {
      best = static_cast<int32_t>(e);
      break;
    }
    if (entry_block_[e] >= 0 &&
        (best < 0 || entry_used_[e] < entry_used_[static_cast<size_t>(best)])) {
      best = static_cast<int32_t>(e);
    }
  }
  if (best < 0) return -1;
  if (entry_block_[static_cast<size_t>(best)] >= 0)
    block_entry_.erase(entry_block_[static_cast<size_t>(best)]);
  entry_block_[static_cast<size_t>(best)] = -2;
  return best;
}

void Scheduler::drop_state(int32_t block) {
  auto it = block_entry_.find(block);
  if (it == block_entry_.end()) return;
  entry_block_[static_cast<size_t>(it->second)] = -1;
  block_entry_.erase(it);
}

// After the step that saved the state at the end of item `i`: it follows the block that ends
// there, once that block is cached (else the entry goes back).
void Scheduler::keep_state(const PlanItem& i, SeqInfo* s) {
  const auto e = static_cast<size_t>(i.save_state);
  entry_block_[e] = -1;
  if (s == nullptr) return;
  const int64_t end = i.start + i.count, bs = config_.block_size;
  const auto idx = static_cast<size_t>(end / bs - 1);
  if (end % bs != 0 || idx >= s->table.blocks.size()) return;
  const int32_t block = s->table.blocks[idx];
  if (!cache_.contains(block) || block_entry_.count(block)) return;
  entry_block_[e] = block;
  entry_used_[e] = ++state_clock_;
  block_entry_[block] = static_cast<int32_t>(e);
}

void Scheduler::set_draft(uint64_t id, int32_t guesses) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second.decoding()) return;
  SeqInfo& s = it->second;
  s.draft =
      static_cast<int32_t>(std::clamp<int64_t>(guesses, 0, s.max_new_tokens - s.generated - 1));
}

std::vector<uint64_t> Scheduler::complete(const BatchPlan& plan,
                                          const std::vector<int32_t>& sampled,
                                          const std::vector<uint64_t>& finished) {
  std::vector<std::vector<int32_t>> runs;
  runs.reserve(sampled.size());
  for (int32_t t : sampled) runs.push_back({t});
  return complete_runs(plan, runs, finished);
}

std::vector<uint64_t> Scheduler::complete_runs(const BatchPlan& plan,
                                               const std::vector<std::vector<int32_t>>& yielded,
                                               const std::vector<uint64_t>& finished) {
  std::vector<uint64_t> retired;
  size_t next_sample = 0;
  for (const PlanItem& i : plan.items) {
    const std::vector<int32_t>* run = nullptr;
    if (i.samples) {
      MX_CHECK(next_sample < yielded.size());
      run = &yielded[next_sample++];
      MX_CHECK(!run->empty() && run->size() <= static_cast<size_t>(i.guesses) + 1);
    }
    auto it = seqs_.find(i.id);
    if (it == seqs_.end()) {  // cancelled meanwhile
      if (i.save_state >= 0) keep_state(i, nullptr);
      continue;
    }
    SeqInfo& s = it->second;
    // A verified item computed the fed token and the guesses kept: one fewer than it yielded.
    const int64_t done = i.guesses > 0 ? static_cast<int64_t>(run->size()) : i.count;
    s.computed = std::max(s.computed, i.start + done);
    s.draft = 0;
    if (run != nullptr) {
      s.generated += static_cast<int64_t>(run->size());
      s.tokens.insert(s.tokens.end(), run->begin(), run->end());
    }
    cache_full_blocks(s);
    if (i.save_state >= 0) keep_state(i, &s);
    const bool stop = std::find(finished.begin(), finished.end(), i.id) != finished.end();
    if (s.generated >= s.max_new_tokens || stop) {
      retired.push_back(i.id);
      retire(i.id);
    }
  }
  MX_CHECK(next_sample == yielded.size());
  return retired;
}

bool Scheduler::cancel(uint64_t id) {
  if (!seqs_.count(id)) return false;
  retire(id);
  return true;
}

const SeqInfo* Scheduler::find(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

}  // namespace mx
