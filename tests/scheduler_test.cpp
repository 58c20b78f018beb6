// The scheduler driven by a fake model and clock, and the KV block allocator under random
// operations. Invariants are checked after every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "runtime/kv_blocks.h"
#include "runtime/scheduler.h"

namespace mx {
namespace {

// Runs plans as a model would: every item computes its positions; sampling items produce a
// token. Tracks what each request has received to check recompute after preemption.
struct FakeEngine {
  explicit FakeEngine(Scheduler& sched) : s(sched) {}
  Scheduler& s;
  int64_t clock = 0;
  std::map<uint64_t, int64_t> produced;  // tokens delivered per request
  std::map<uint64_t, int64_t> finished_at;
  std::vector<BatchPlan> history;

  void check_invariants(const BatchPlan& plan) {
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
    for (const PlanItem& i : plan.items) {
      if (i.samples) ++produced[i.id];
    }
    for (uint64_t id : s.complete(plan, stop)) finished_at[id] = clock;
    history.push_back(std::move(plan));
    return true;
  }
};

TEST(Scheduler, AdmissionRespectsMaxRunning) {
  SchedulerConfig c;
  c.max_running_requests = 2;
  Scheduler s(c);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s.add(id, 10, 3).is_ok());
  FakeEngine e(s);
  ASSERT_TRUE(e.step());
  EXPECT_EQ(s.running(), 2u);
  EXPECT_EQ(s.waiting(), 1u);
  while (e.step()) {
  }
  EXPECT_EQ(e.produced[1], 3);
  EXPECT_EQ(e.produced[3], 3);
  EXPECT_GT(e.finished_at[3], e.finished_at[1]);  // waited for a slot
  EXPECT_EQ(s.allocator().used_blocks(), 0);
}

TEST(Scheduler, ChunkedPrefillSplitsLongPrompts) {
  SchedulerConfig c;
  c.chunked_prefill_size = 256;
  Scheduler s(c);
  ASSERT_TRUE(s.add(7, 1000, 2).is_ok());
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
  ASSERT_TRUE(s.add(1, 8, 20).is_ok());
  FakeEngine e(s);
  ASSERT_TRUE(e.step());
  ASSERT_TRUE(s.add(2, 300, 5).is_ok());  // arrives while 1 decodes
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
  Scheduler s(c);
  ASSERT_TRUE(s.add(1, 50, 60).is_ok());
  ASSERT_TRUE(s.add(2, 50, 60).is_ok());
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

TEST(Scheduler, NoStarvationUnderLoad) {
  SchedulerConfig c;
  c.max_running_requests = 4;
  c.chunked_prefill_size = 128;
  c.num_blocks = 40;
  c.block_size = 16;
  c.max_waiting_requests = 1000;
  Scheduler s(c);
  FakeEngine e(s);
  std::mt19937 rng(5);
  std::map<uint64_t, int64_t> arrived, want;
  uint64_t next = 1;
  for (int t = 0; t < 4000; ++t) {
    if (next <= 200 && rng() % 3 == 0) {
      const int64_t p = 1 + static_cast<int64_t>(rng() % 200),
                    n = 1 + static_cast<int64_t>(rng() % 80);
      ASSERT_TRUE(s.add(next, p, n).is_ok());
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
    if (HasFatalFailure()) return;
  }
  ASSERT_EQ(e.finished_at.size(), 200u) << "requests left unfinished";
  int64_t worst = 0;
  for (const auto& [id, at] : e.finished_at) {
    worst = std::max(worst, at - arrived[id]);
    EXPECT_LE(e.produced[id], want[id]);
  }
  EXPECT_LT(worst, 2000) << "a request waited unboundedly";
  EXPECT_EQ(s.allocator().used_blocks(), 0);
}

TEST(Scheduler, QueueBoundCancellationAndImpossibleRequests) {
  SchedulerConfig c;
  c.max_waiting_requests = 2;
  c.num_blocks = 4;
  c.block_size = 16;
  Scheduler s(c);
  ASSERT_TRUE(s.add(1, 10, 5).is_ok());
  ASSERT_TRUE(s.add(2, 10, 5).is_ok());
  EXPECT_EQ(s.add(3, 10, 5).code(), StatusCode::kOutOfRange);  // queue full: 503
  // Can never fit 64 slots: the client's error even while the queue is full.
  EXPECT_EQ(s.add(4, 60, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.add(5, 10, INT64_MAX).code(), StatusCode::kInvalidArgument);  // no overflow
  FakeEngine e(s);
  ASSERT_TRUE(e.step());
  EXPECT_GT(s.allocator().used_blocks(), 0);
  EXPECT_TRUE(s.cancel(1));
  EXPECT_TRUE(s.cancel(2));
  EXPECT_FALSE(s.cancel(2));
  EXPECT_EQ(s.allocator().used_blocks(), 0);  // a disconnect frees its blocks
  EXPECT_FALSE(e.step());
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
