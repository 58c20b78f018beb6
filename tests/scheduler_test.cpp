// The scheduler driven by a fake model and clock, and the KV block allocator under random
// operations. Invariants are checked after every step: block accounting between the requests,
// the prefix cache and the allocator, and (with a stand-in for each cached key and value) that
// every position a plan reads holds what its own prefix would have computed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "runtime/kv_blocks.h"
#include "runtime/scheduler.h"

namespace mx {
namespace {

// `n` token ids: a function of (seed, position) only, so equal seeds give equal prompts.
std::vector<int32_t> tokens(int64_t n, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>((seed * 131 + i * 7) % 97);
  return t;
}

// What position p's key and value stand for: the tokens 0 .. p (a polynomial hash).
uint64_t prefix_value(const std::vector<int32_t>& t, int64_t p) {
  uint64_t h = 0;
  for (int64_t i = 0; i <= p; ++i)
    h = h * 1000003u + static_cast<uint64_t>(t[static_cast<size_t>(i)]) + 1;
  return h;
}

// Runs plans as a model would: every item computes its positions; sampling items produce a
// token. Tracks what each request has received to check recompute after preemption.
struct FakeEngine {
  explicit FakeEngine(Scheduler& sched)
      : s(sched),
        kv(static_cast<size_t>(sched.config().num_blocks),
           std::vector<uint64_t>(static_cast<size_t>(sched.config().block_size), 0)) {}
  Scheduler& s;
  int64_t clock = 0;
  std::map<uint64_t, int64_t> produced;  // tokens delivered per request
  std::map<uint64_t, int64_t> finished_at;
  std::vector<BatchPlan> history;
  std::vector<std::vector<uint64_t>> kv;  // [block][slot]: prefix_value of what it holds
  uint64_t max_id = 64;                   // ids 1 .. max_id are checked
  // A hybrid model's recurrent state per slot and in each saved state: the prefix_value of
  // the last position it has taken in (0: none).
  std::map<int32_t, uint64_t> slot_state;
  std::map<int32_t, uint64_t> saved;

  // Every block is free, in the prefix cache, or a request's own; a cached block's references
  // are the requests whose shared run holds it.
  void check_accounting() {
    const SchedulerConfig& c = s.config();
    const PrefixCache& cache = s.prefix_cache();
    std::map<int32_t, int32_t> refs;
    std::set<int32_t> own;
    for (uint64_t id = 1; id <= max_id; ++id) {
      const SeqInfo* q = s.find(id);
      if (q == nullptr) continue;
      const std::vector<int32_t>& b = q->table.blocks;
      ASSERT_LE(q->shared_blocks, static_cast<int32_t>(b.size()));
      for (size_t i = 0; i < b.size(); ++i) {
        if (static_cast<int32_t>(i) < q->shared_blocks) {
          ASSERT_TRUE(cache.contains(b[i])) << "shared block " << b[i] << " not cached";
          ++refs[b[i]];
        } else {
          ASSERT_FALSE(cache.contains(b[i])) << "own block " << b[i] << " also cached";
          ASSERT_TRUE(own.insert(b[i]).second) << "block " << b[i] << " owned twice";
        }
      }
    }
    for (const auto& [b, n] : refs) ASSERT_EQ(cache.refs(b), n) << "block " << b;
    ASSERT_EQ(cache.evictable_blocks(), cache.cached_blocks() - static_cast<int32_t>(refs.size()));
    ASSERT_EQ(s.allocator().used_blocks(),
              static_cast<int32_t>(own.size()) + cache.cached_blocks());
    if (!c.prefix_caching) {
      ASSERT_EQ(cache.cached_blocks(), 0);
    }
  }

  // Reads: every position before the item's start holds its own prefix's value. Writes: only
  // into the request's own blocks.
  void run_item(const PlanItem& i) {
    const SeqInfo* q = s.find(i.id);
    const int64_t bs = s.config().block_size;
    if (s.config().prefill_align > 1) run_state(i, *q);
    for (int64_t p = 0; p < i.start + i.count; ++p) {
      const int32_t b = q->table.blocks[static_cast<size_t>(p / bs)];
      uint64_t& slot = kv[static_cast<size_t>(b)][static_cast<size_t>(p % bs)];
      if (p < i.start) {
        ASSERT_EQ(slot, prefix_value(q->tokens, p)) << "request " << i.id << " position " << p;
      } else {
        ASSERT_FALSE(s.prefix_cache().contains(b)) << "a write into shared block " << b;
        slot = prefix_value(q->tokens, p);
      }
    }
  }

  // The recurrent state a hybrid item starts from is its own prefix's: reset at position 0,
  // else carried in the slot or loaded from a saved state. Prompt chunks start aligned.
  void run_state(const PlanItem& i, const SeqInfo& q) {
    uint64_t& st = slot_state[q.slot];
    if (i.start == 0) st = 0;
    if (i.load_state >= 0) {
      ASSERT_TRUE(saved.count(i.load_state)) << "load of a state never saved";
      st = saved[i.load_state];
    }
    if (i.start > 0) {
      ASSERT_EQ(st, prefix_value(q.tokens, i.start - 1)) << "request " << i.id << " at " << i.start;
    }
    if (i.start < q.prompt_len) {
      ASSERT_EQ(i.start % s.config().prefill_align, 0) << "unaligned prompt chunk";
    }
    st = prefix_value(q.tokens, i.start + i.count - 1);
    if (i.save_state >= 0) saved[i.save_state] = st;
  }

  void check_invariants(const BatchPlan& plan) {
    check_accounting();
    if (::testing::Test::HasFatalFailure()) return;
    const SchedulerConfig& c = s.config();
    ASSERT_LE(static_cast<int32_t>(s.running()), c.max_running_requests);
    int64_t prefill = 0;
    std::set<uint64_t> ids;
    for (const PlanItem& i : plan.items) {
      ASSERT_TRUE(ids.insert(i.id).second) << "request twice in one plan";
      const SeqInfo* q = s.find(i.id);
      ASSERT_NE(q, nullptr);
      ASSERT_EQ(i.start, q->computed) << "plan does not continue where the cache ends";
      ASSERT_LE(i.start + i.count, q->table.tokens) << "positions without KV slots";
      ASSERT_LE(i.start + i.count, q->known());
      const bool decode = q->generated > 0 && i.count == 1 && i.start == q->known() - 1;
      if (!decode) prefill += i.count;
    }
    ASSERT_LE(prefill, c.chunked_prefill_size);
  }

  // One step; returns false when there was nothing to do.
  bool step(const std::vector<uint64_t>& stop = {}) {
    BatchPlan plan = s.schedule();
    check_invariants(plan);
    if (::testing::Test::HasFatalFailure() || plan.empty()) return false;
    ++clock;
    std::vector<int32_t> sampled;
    for (const PlanItem& i : plan.items) {
      run_item(i);
      if (::testing::Test::HasFatalFailure()) return false;
      if (i.samples) {
        ++produced[i.id];
        // A token that depends on the request and its length, as a greedy model's would.
        sampled.push_back(static_cast<int32_t>((i.id * 31 + static_cast<uint64_t>(i.start)) % 97));
      }
    }
    for (uint64_t id : s.complete(plan, sampled, stop)) finished_at[id] = clock;
    check_accounting();
    history.push_back(std::move(plan));
    return !::testing::Test::HasFatalFailure();
  }
};

// Everything done: no request holds a block, and every block in use is an unread cached one.
void expect_all_returned(const Scheduler& s) {
  EXPECT_EQ(s.held_blocks(), 0);
  EXPECT_EQ(s.prefix_cache().evictable_blocks(), s.prefix_cache().cached_blocks());
  EXPECT_EQ(s.allocator().free_blocks() + s.prefix_cache().evictable_blocks(),
            s.config().num_blocks);
}

TEST(Scheduler, AdmissionRespectsMaxRunning) {
  SchedulerConfig c;
  c.max_running_requests = 2;
  Scheduler s(c);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s.add(id, tokens(10, id), 3).is_ok());
  FakeEngine e(s);
  ASSERT_TRUE(e.step());
  EXPECT_EQ(s.running(), 2u);
  EXPECT_EQ(s.waiting(), 1u);
  while (e.step()) {
  }
  EXPECT_EQ(e.produced[1], 3);
  EXPECT_EQ(e.produced[3], 3);
  EXPECT_GT(e.finished_at[3], e.finished_at[1]);  // waited for a slot
  expect_all_returned(s);
}

TEST(Scheduler, ChunkedPrefillSplitsLongPrompts) {
  SchedulerConfig c;
  c.chunked_prefill_size = 256;
  Scheduler s(c);
  ASSERT_TRUE(s.add(7, tokens(1000, 7), 2).is_ok());
  FakeEngine e(s);
  std::vector<int64_t> chunks;
  while (e.step()) chunks.push_back(e.history.back().items[0].count);
  EXPECT_EQ(chunks, (std::vector<int64_t>{256, 256, 256, 232, 1}));
  EXPECT_FALSE(e.history[2].items[0].samples);
  EXPECT_TRUE(e.history[3].items[0].samples);  // the last chunk samples the first token
}

TEST(Scheduler, DecodeJoinsWhileOthersPrefill) {
  SchedulerConfig c;
  c.chunked_prefill_size = 64;
  Scheduler s(c);
  ASSERT_TRUE(s.add(1, tokens(8, 1), 20).is_ok());
  FakeEngine e(s);
  ASSERT_TRUE(e.step());
  ASSERT_TRUE(s.add(2, tokens(300, 2), 5).is_ok());  // arrives while 1 decodes
  ASSERT_TRUE(e.step());
  const BatchPlan& p = e.history.back();
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].id, 1u);  // decode first
  EXPECT_EQ(p.items[0].count, 1);
  EXPECT_EQ(p.items[1].id, 2u);
  EXPECT_EQ(p.items[1].count, 64);
}

TEST(Scheduler, PreemptionByRecomputeWhenKvRunsOut) {
  SchedulerConfig c;
  c.num_blocks = 8;  // 128 token slots for two requests that need 110 each
  c.block_size = 16;
  c.chunked_prefill_size = 512;
  c.prefix_caching = false;  // recompute from position 0 (PreemptedRequestRematches: with it)
  Scheduler s(c);
  ASSERT_TRUE(s.add(1, tokens(50, 1), 60).is_ok());
  ASSERT_TRUE(s.add(2, tokens(50, 2), 60).is_ok());
  FakeEngine e(s);
  int preemptions = 0;
  for (int i = 0; i < 1000 && e.step(); ++i) {
    preemptions += static_cast<int>(e.history.back().preempted.size());
    ASSERT_LE(s.allocator().used_blocks(), 8);
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(e.produced[1], 60);
  EXPECT_EQ(e.produced[2], 60);  // resumed after recompute, no token lost or doubled
  EXPECT_LT(e.finished_at[1], e.finished_at[2]);  // the later arrival was the victim
  EXPECT_EQ(s.allocator().used_blocks(), 0);
  // After its preemption, request 2 recomputed its prompt and generated tokens from 0.
  bool recomputed = false;
  for (const BatchPlan& p : e.history) {
    for (const PlanItem& i : p.items) recomputed |= i.id == 2 && i.start == 0 && i.count > 50;
  }
  EXPECT_TRUE(recomputed);
}

// 200 random requests through a small cache. Prompts start with one of three shared prefixes
// (none, or 1 to 150 tokens) so that the prefix cache hits, evicts and dedups under preemption.
void run_load(bool prefix_caching, bool hybrid = false) {
  SchedulerConfig c;
  if (hybrid) {
    c.prefill_align = 64;
    c.state_interval = 128;
    c.state_entries = prefix_caching ? 6 : 0;
  }
  c.max_running_requests = 4;
  c.chunked_prefill_size = 128;
  c.num_blocks = 40;
  c.block_size = 16;
  c.max_waiting_requests = 1000;
  c.prefix_caching = prefix_caching;
  Scheduler s(c);
  FakeEngine e(s);
  e.max_id = 200;
  std::mt19937 rng(5);
  const std::vector<int32_t> prefixes[3] = {{}, tokens(40, 1000), tokens(150, 2000)};
  std::map<uint64_t, int64_t> arrived, want;
  uint64_t next = 1;
  for (int t = 0; t < 4000; ++t) {
    if (next <= 200 && rng() % 3 == 0) {
      const int64_t p = 1 + static_cast<int64_t>(rng() % 200),
                    n = 1 + static_cast<int64_t>(rng() % 80);
      const std::vector<int32_t>& pre = prefixes[rng() % 3];
      std::vector<int32_t> prompt = tokens(p, static_cast<uint32_t>(next));
      const int64_t shared = std::min<int64_t>(p - 1, static_cast<int64_t>(pre.size()));
      std::copy(pre.begin(), pre.begin() + shared, prompt.begin());
      ASSERT_TRUE(s.add(next, prompt, n).is_ok());
      arrived[next] = e.clock;
      want[next] = n;
      ++next;
    }
    // A request sometimes stops early (stop string), as the engine would report.
    std::vector<uint64_t> stop;
    if (rng() % 50 == 0 && !e.history.empty() && !e.history.back().items.empty()) {
      stop.push_back(e.history.back().items[0].id);
    }
    if (!e.step(stop) && next > 200) break;
    if (::testing::Test::HasFatalFailure()) return;
  }
  ASSERT_EQ(e.finished_at.size(), 200u) << "requests left unfinished";
  int64_t worst = 0;
  for (const auto& [id, at] : e.finished_at) {
    worst = std::max(worst, at - arrived[id]);
    EXPECT_LE(e.produced[id], want[id]);
  }
  EXPECT_LT(worst, 2000) << "a request waited unboundedly";
  expect_all_returned(s);
  if (prefix_caching) {
    EXPECT_GT(s.prefix_stats().hits, 0);
    EXPECT_GT(s.prefix_cache().cached_blocks(), 0);
  } else {
    EXPECT_EQ(s.allocator().used_blocks(), 0);
  }
}

TEST(Scheduler, NoStarvationUnderLoad) { run_load(false); }
TEST(Scheduler, NoStarvationUnderLoadWithPrefixCache) { run_load(true); }
// A hybrid model: aligned prompt chunks, and every cached prefix resumed from the state saved
// where it ends (the fake engine checks each item's starting state against its own prefix).
TEST(Scheduler, HybridUnderLoad) { run_load(false, true); }
TEST(Scheduler, HybridUnderLoadWithPrefixCache) { run_load(true, true); }

// The second prompt starts with the first one's 100 tokens: 6 full blocks of 16 are cached
// when the first finishes, so the second computes from 96; its 120 tokens take 8 blocks, of
// which only the 2 new ones count against the 2 left free.
TEST(Scheduler, AdmissionWithAHitComputesOnlyTheSuffix) {
  SchedulerConfig c;
  c.num_blocks = 8;
  c.block_size = 16;
  Scheduler s(c);
  FakeEngine e(s);
  const std::vector<int32_t> first = tokens(100, 9);
  ASSERT_TRUE(s.add(1, first, 1).is_ok());
  ASSERT_TRUE(e.step());
  EXPECT_FALSE(e.step());
  EXPECT_EQ(s.prefix_cache().cached_blocks(), 6);
  EXPECT_EQ(s.allocator().free_blocks(), 2);
  std::vector<int32_t> second = first;
  for (int32_t t : tokens(20, 10)) second.push_back(t);
  ASSERT_TRUE(s.add(2, second, 1).is_ok());
  ASSERT_TRUE(e.step());
  const PlanItem& i = e.history.back().items.at(0);
  EXPECT_EQ(i.start, 96);
  EXPECT_EQ(i.count, 24);
  EXPECT_TRUE(i.samples);
  EXPECT_EQ(s.prefix_stats().queries, 220);
  EXPECT_EQ(s.prefix_stats().hits, 96);
  // The request finished in that step: 7 of its blocks full and cached, the last freed.
  EXPECT_EQ(s.prefix_cache().cached_blocks(), 7);
  expect_all_returned(s);
}

// A prompt wholly cached still computes its last token, from the last whole block before it:
// 100 tokens resume at 96, 96 tokens at 80 (position 95 is in the sixth block).
TEST(Scheduler, AWhollyCachedPromptComputesItsLastToken) {
  SchedulerConfig c;
  Scheduler s(c);
  FakeEngine e(s);
  const std::vector<int32_t> p = tokens(100, 4);
  ASSERT_TRUE(s.add(1, p, 1).is_ok());
  while (e.step()) {
  }
  ASSERT_TRUE(s.add(2, p, 1).is_ok());
  ASSERT_TRUE(e.step());
  EXPECT_EQ(e.history.back().items.at(0).start, 96);
  EXPECT_EQ(e.history.back().items.at(0).count, 4);
  ASSERT_TRUE(s.add(3, std::vector<int32_t>(p.begin(), p.begin() + 96), 1).is_ok());
  ASSERT_TRUE(e.step());
  EXPECT_EQ(e.history.back().items.at(0).start, 80);
  EXPECT_EQ(e.history.back().items.at(0).count, 16);
  expect_all_returned(s);
}

// Blocks enter the cache as prefill chunks complete them: B, arriving while A prefills its 200
// tokens in chunks of 64, waits for budget and then starts where A's cached blocks end (192).
TEST(Scheduler, RunningRequestsShareBlocksAsChunksComplete) {
  SchedulerConfig c;
  c.chunked_prefill_size = 64;
  Scheduler s(c);
  FakeEngine e(s);
  const std::vector<int32_t> p = tokens(200, 5);
  ASSERT_TRUE(s.add(1, p, 4).is_ok());
  ASSERT_TRUE(e.step());
  EXPECT_EQ(s.prefix_cache().cached_blocks(), 4);
  ASSERT_TRUE(s.add(2, p, 4).is_ok());
  ASSERT_TRUE(e.step());  // A: [64, 128), no budget left for B
  ASSERT_TRUE(e.step());  // A: [128, 192)
  ASSERT_TRUE(e.step());
  const BatchPlan& plan = e.history.back();
  ASSERT_EQ(plan.items.size(), 2u);
  EXPECT_EQ(plan.items[0].id, 1u);
  EXPECT_EQ(plan.items[0].start, 192);
  EXPECT_EQ(plan.items[1].id, 2u);
  EXPECT_EQ(plan.items[1].start, 192);
  EXPECT_EQ(plan.items[1].count, 8);
  const SeqInfo* b = s.find(2);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shared_blocks, 12);
  EXPECT_EQ(s.prefix_cache().refs(b->table.blocks[0]), 2);
  EXPECT_EQ(s.prefix_cache().cached_blocks(), 12);
  EXPECT_EQ(s.held_blocks(), 14);  // the 12 shared ones, and each its own partial block 12
  while (e.step()) {
  }
  expect_all_returned(s);
}

// n > 1 copies of a prompt (or prompts sharing at least 32 tokens beyond the cache) admitted
// in one step compute it once: the later ones wait a step and start at the first one's cached
// blocks. Prompts sharing less are admitted together.
TEST(Scheduler, PromptsSharingAPrefixInOneStepComputeItOnce) {
  SchedulerConfig c;
  Scheduler s(c);
  FakeEngine e(s);
  const std::vector<int32_t> p = tokens(100, 8);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s.add(id, p, 2).is_ok());
  ASSERT_TRUE(e.step());
  ASSERT_EQ(e.history.back().items.size(), 1u);
  EXPECT_EQ(e.history.back().items[0].count, 100);
  ASSERT_TRUE(e.step());
  const BatchPlan& two = e.history.back();
  ASSERT_EQ(two.items.size(), 3u);
  EXPECT_EQ(two.items[0].start, 100);  // request 1 decodes
  for (size_t k = 1; k < 3; ++k) {
    EXPECT_EQ(two.items[k].id, k + 1);
    EXPECT_EQ(two.items[k].start, 96);
    EXPECT_EQ(two.items[k].count, 4);
  }
  while (e.step()) {
  }
  expect_all_returned(s);

  // 31 shared tokens are one whole block: admitted together. 40 are two: the second waits.
  for (int64_t shared : {31, 40}) {
    Scheduler t(c);
    FakeEngine f(t);
    std::vector<int32_t> q = tokens(100, 9);
    std::copy(p.begin(), p.begin() + shared, q.begin());
    ASSERT_TRUE(t.add(1, p, 2).is_ok());
    ASSERT_TRUE(t.add(2, q, 2).is_ok());
    ASSERT_TRUE(f.step());
    EXPECT_EQ(f.history.back().items.size(), shared == 31 ? 2u : 1u) << shared;
    if (shared == 40) {
      ASSERT_TRUE(f.step());
      EXPECT_EQ(f.history.back().items.at(1).start, 32);
    }
  }
}

// Two 50-token prompts that together outgrow 8 blocks (as PreemptionByRecomputeWhenKvRunsOut).
// B is preempted at 65 known tokens with 4 full blocks cached; A, growing to 110 tokens, evicts
// B's last three (leaf first); B readmitted re-matches its first block and computes [16, 65).
TEST(Scheduler, PreemptedRequestRematches) {
  SchedulerConfig c;
  c.num_blocks = 8;
  c.block_size = 16;
  Scheduler s(c);
  ASSERT_TRUE(s.add(1, tokens(50, 1), 60).is_ok());
  ASSERT_TRUE(s.add(2, tokens(50, 2), 60).is_ok());
  FakeEngine e(s);
  int preemptions = 0;
  for (int i = 0; i < 1000 && e.step(); ++i)
    preemptions += static_cast<int>(e.history.back().preempted.size());
  EXPECT_EQ(preemptions, 1);
  EXPECT_EQ(e.produced[1], 60);
  EXPECT_EQ(e.produced[2], 60);
  bool rematched = false;
  for (const BatchPlan& p : e.history) {
    for (const PlanItem& i : p.items) rematched |= i.id == 2 && i.start == 16 && i.count == 49;
  }
  EXPECT_TRUE(rematched);
  EXPECT_EQ(s.prefix_stats().hits, 16);
  expect_all_returned(s);
}

// A cancelled request drops its references mid-prefill; its cached blocks stay for others.
TEST(Scheduler, CancelKeepsBlockAccountingExact) {
  SchedulerConfig c;
  c.chunked_prefill_size = 32;
  c.num_blocks = 16;
  Scheduler s(c);
  FakeEngine e(s);
  const std::vector<int32_t> p = tokens(120, 6);
  ASSERT_TRUE(s.add(1, p, 2).is_ok());
  ASSERT_TRUE(e.step());
  ASSERT_TRUE(e.step());  // 64 tokens: 4 blocks cached, referenced by request 1
  EXPECT_EQ(s.prefix_cache().cached_blocks(), 4);
  EXPECT_EQ(s.prefix_cache().evictable_blocks(), 0);
  ASSERT_TRUE(s.add(2, p, 2).is_ok());
  ASSERT_TRUE(e.step());  // request 1 takes the whole budget
  EXPECT_TRUE(s.cancel(1));
  EXPECT_EQ(s.prefix_cache().cached_blocks(), 6);
  EXPECT_EQ(s.prefix_cache().evictable_blocks(), 6);
  ASSERT_TRUE(e.step());
  EXPECT_EQ(e.history.back().items.at(0).start, 96);
  EXPECT_EQ(e.history.back().items.at(0).count, 24);  // the whole prompt: block 7 is full
  EXPECT_TRUE(s.cancel(2));
  expect_all_returned(s);
  EXPECT_EQ(s.prefix_cache().cached_blocks(), 7);
  EXPECT_EQ(s.allocator().free_blocks(), 16 - 7);
}

TEST(Scheduler, QueueBoundCancellationAndImpossibleRequests) {
  SchedulerConfig c;
  c.max_waiting_requests = 2;
  c.num_blocks = 4;
  c.block_size = 16;
  Scheduler s(c);
  ASSERT_TRUE(s.add(1, tokens(10, 1), 5).is_ok());
  ASSERT_TRUE(s.add(2, tokens(10, 2), 5).is_ok());
  EXPECT_EQ(s.add(3, tokens(10, 3), 5).code(), StatusCode::kOutOfRange);  // queue full: 503
  // Can never fit 64 slots: the client's error even while the queue is full.
  EXPECT_EQ(s.add(4, tokens(60, 4), 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.add(5, tokens(10, 5), INT64_MAX).code(),
            StatusCode::kInvalidArgument);  // no overflow
  FakeEngine e(s);
  ASSERT_TRUE(e.step());
  EXPECT_GT(s.allocator().used_blocks(), 0);
  EXPECT_TRUE(s.cancel(1));
  EXPECT_TRUE(s.cancel(2));
  EXPECT_FALSE(s.cancel(2));
  EXPECT_EQ(s.allocator().used_blocks(), 0);  // a disconnect frees its blocks
  EXPECT_FALSE(e.step());
}

// Data-parallel attention: each rank has a pool of its own, so two requests that one pool
// holds only by preempting each other run side by side in two, one on each rank.
TEST(Scheduler, DataParallelRanksEachHaveAPool) {
  for (int32_t dp : {1, 2}) {
    SchedulerConfig c;
    c.num_blocks = 8;  // 128 token slots a pool; each request needs 110
    c.block_size = 16;
    c.prefix_caching = false;
    c.dp_size = dp;
    Scheduler s(c);
    ASSERT_TRUE(s.add(1, tokens(50, 1), 60).is_ok());
    ASSERT_TRUE(s.add(2, tokens(50, 2), 60).is_ok());
    size_t preemptions = 0;
    std::set<int32_t> ranks;
    std::map<uint64_t, int64_t> produced;
    for (int i = 0; i < 1000; ++i) {
      const BatchPlan p = s.schedule();
      if (p.empty()) break;
      preemptions += p.preempted.size();
      std::vector<std::vector<int32_t>> yielded;
      for (const PlanItem& it : p.items) {
        ranks.insert(s.find(it.id)->rank);
        if (it.samples) yielded.push_back({7});
      }
      for (const PlanItem& it : p.items) produced[it.id] += it.samples ? 1 : 0;
      s.complete_runs(p, yielded);
      for (int r = 0; r < dp; ++r) ASSERT_LE(s.allocator(r).used_blocks(), 8);
    }
    EXPECT_EQ(preemptions > 0, dp == 1) << dp << " pools";
    EXPECT_EQ(ranks.size(), static_cast<size_t>(dp));
    for (int r = 0; r < dp; ++r) EXPECT_EQ(s.allocator(r).used_blocks(), 0);
  }
}

TEST(KvBlocks, RandomOperationsNeverLeakOrDoubleFree) {
  BlockAllocator alloc(64, 16);
  std::mt19937 rng(11);
  std::vector<BlockTable> tables(12);
  int double_frees_caught = 0;
  for (int op = 0; op < 10000; ++op) {
    BlockTable& t = tables[rng() % tables.size()];
    switch (rng() % 4) {
      case 0:
      case 1: {  // grow (a prefill chunk or a decode step)
        const int64_t want = t.tokens + 1 + static_cast<int64_t>(rng() % 40);
        const int32_t before = alloc.free_blocks();
        const size_t had = t.blocks.size();
        if (!t.reserve(want, &alloc)) {
          ASSERT_EQ(alloc.free_blocks(), before) << "a failed reserve took blocks";
          ASSERT_EQ(t.blocks.size(), had);
        }
        break;
      }
      case 2:  // finish or preempt: release everything
        ASSERT_TRUE(t.release(&alloc).is_ok());
        break;
      default: {  // a buggy second free of a block already returned must be refused
        if (t.blocks.empty()) break;
        std::vector<int32_t> copy = t.blocks;
        ASSERT_TRUE(t.release(&alloc).is_ok());
        const int32_t free_before = alloc.free_blocks();
        ASSERT_FALSE(alloc.release(copy).is_ok());
        ASSERT_EQ(alloc.free_blocks(), free_before);
        ++double_frees_caught;
      }
    }
    // Every block is either free or in exactly one table.
    std::set<int32_t> seen;
    size_t held = 0;
    for (const BlockTable& b : tables) {
      for (int32_t x : b.blocks) ASSERT_TRUE(seen.insert(x).second) << "block " << x << " shared";
      held += b.blocks.size();
    }
    ASSERT_EQ(static_cast<int32_t>(held) + alloc.free_blocks(), alloc.num_blocks()) << "op " << op;
  }
  for (BlockTable& t : tables) ASSERT_TRUE(t.release(&alloc).is_ok());
  EXPECT_EQ(alloc.free_blocks(), 64);
  EXPECT_GT(double_frees_caught, 100);
  EXPECT_FALSE(alloc.release({99}).is_ok());
}

}  // namespace
}  // namespace mx
